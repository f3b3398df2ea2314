"""Writing the training rows collect produces, in the formats `ragteam train` reads (`ragteam.train.data`).

The row types are the trainer's own (`SFTRow`, `PairRow`), so a collected file is by construction what
`read_sft_rows` / `read_pair_rows` accept; `write_rows` writes them as JSON lines with the fields in the
documented order. `dedupe` drops repeats within one question (the same prompt and reply sampled twice, or
reached on two paths of a tree), keeping the first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

from ragteam.train.data import PairRow, SFTRow

__all__ = ["PairRow", "SFTRow", "dedupe", "row_key", "write_rows"]

Row = TypeVar("Row", SFTRow, PairRow)


def row_key(row: SFTRow | PairRow) -> tuple:
    """What makes two rows the same: question, role, prompt and reply (or reply pair)."""
    prompt = tuple((m["role"], m["content"]) for m in row.messages)
    if isinstance(row, SFTRow):
        return (row.question_id, row.role, prompt, row.target)
    return (row.question_id, row.role, prompt, row.chosen, row.rejected)


def dedupe(rows: Iterable[Row]) -> tuple[list[Row], int]:
    """The rows without repeats (first kept, order preserved), and how many were dropped."""
    seen: set[tuple] = set()
    out: list[Row] = []
    dropped = 0
    for row in rows:
        key = row_key(row)
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        out.append(row)
    return out, dropped


def row_dict(row: SFTRow | PairRow) -> dict:
    """The JSON object of one row: `{role, messages, target, question_id, provenance}` or
    `{role, messages, chosen, rejected, scores, question_id}`."""
    return asdict(row)


def write_rows(path: str | Path, rows: Iterable[SFTRow | PairRow]) -> int:
    """Write rows as JSONL (replacing the file, via a temporary file so a crash leaves the old one); count."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row_dict(row), ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n
