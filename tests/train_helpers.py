"""Helpers shared by the tests of the supervised trainers (test_train_sft.py, test_train_pref.py): a data file
written as JSON lines, and a trainer config on the tiny model small enough to train in seconds on a CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

C = TypeVar("C", bound=BaseModel)


def write_jsonl(path: Path, rows: list) -> Path:
    """`rows` one per line: a dict as JSON, a string as it is (a malformed line, for the error tests)."""
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def tiny_cfg(cls: type[C], data: Path, out: Path, **kw) -> C:
    """A `cls` trainer config (SFTConfig, DPOConfig) on the tiny policy: batch 2, 256 tokens, CPU, no bar."""
    base = dict(
        data=str(data),
        out=str(out),
        policy={"model": "tiny"},
        batch_size=2,
        max_length=256,
        device="cpu",
        progress=False,
    )
    return cls(**(base | kw))
