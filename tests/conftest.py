"""Shared test setup: caches inside the project, offline, the benchmark data from ../shared/data, and the fast
tier: `pytest -m "not slow"` leaves out the tests that take seconds each (pyproject.toml says which)."""

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
# One torch thread: on a 2-core runner two threads contend with the engine's worker threads and slow down.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLCONFIGDIR", str(Path(os.environ["RAGTEAM_HOME"]) / "matplotlib"))

# Where the tests run local models: cpu by default (CI); RAGTEAM_TEST_DEVICE=cuda runs them on a GPU.
TEST_DEVICE = os.environ.get("RAGTEAM_TEST_DEVICE", "cpu")

SHARED_DATA = Path(os.environ.get("RAGTEAM_SHARED_DATA", ROOT.parent / "shared" / "data"))

# Fixtures whose every user is `slow`, wherever it is written: the cost comes with the fixture. Other slow tests
# carry `@pytest.mark.slow` (or a module's `pytestmark`) with the reason beside it.
SLOW_FIXTURES = {
    "hotpot_small_index": "real MiniLM embeddings",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` every test that uses a fixture of SLOW_FIXTURES, itself or through another fixture."""
    for item in items:
        for name in SLOW_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow(reason=SLOW_FIXTURES[name]))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The benchmark files in ../shared/data (a hard requirement of the suite: CI has them beside the clone)."""
    if not SHARED_DATA.is_dir():
        raise RuntimeError(f"benchmark data not found at {SHARED_DATA}; set RAGTEAM_SHARED_DATA")
    return SHARED_DATA


def hotpot_head(shared_data: Path, folder: Path, n: int) -> Path:
    """The first `n` records of HotpotQA-500 (IRCoT format) as their own file in `folder`."""
    lines = (shared_data / "hotpotqa-dev-500.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    path = folder / f"hotpotqa-dev-{n}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


HOTPOT_SMALL_RECORDS = 20


@pytest.fixture(scope="session")
def hotpot_small(shared_data: Path, tmp_path_factory) -> Path:
    """The first 20 records of HotpotQA-500 (IRCoT format) as their own file (~200 pooled paragraphs)."""
    return hotpot_head(shared_data, tmp_path_factory.mktemp("retrieval-data"), HOTPOT_SMALL_RECORDS)


@pytest.fixture(scope="session")
def hotpot_small_index(hotpot_small: Path):
    """BM25 + real MiniLM embeddings of hotpot_small's pooled paragraphs, cached under RAGTEAM_HOME."""
    from ragteam.retrieval.factory import dataset_index

    return dataset_index(hotpot_small, kinds=("bm25", "dense"), progress=False)
