"""Shared test setup: caches inside the project, offline, the benchmark data from ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One cache for the whole test session (converted SmolLM2, tiny model, indexes), inside the project.
os.environ.setdefault("RAGTEAM_HOME", str(ROOT / ".ragteam" / "test-cache"))
os.environ.setdefault("HF_HOME", str(Path(os.environ["RAGTEAM_HOME"]) / "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLCONFIGDIR", str(Path(os.environ["RAGTEAM_HOME"]) / "matplotlib"))

SHARED_DATA = Path(os.environ.get("RAGTEAM_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The benchmark files in ../shared/data (a hard requirement of the suite: CI has them beside the clone)."""
    if not SHARED_DATA.is_dir():
        raise RuntimeError(f"benchmark data not found at {SHARED_DATA}; set RAGTEAM_SHARED_DATA")
    return SHARED_DATA
