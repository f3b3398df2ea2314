"""The Python API is as quiet as the CLI (issue 31): transformers' deprecation notices about the arguments
ragteam passes it stay off the terminal, and come back when asked for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import ragteam
cfg = ragteam.EvalConfig(workflow="mmoa", data={data!r}, out={out!r}, limit=1, policy={{"model": "tiny"}},
                         llm={{"model": "tiny"}}, progress=False, retriever={{"kind": "bm25"}}, topk=2)
ragteam.evaluate(cfg, log=lambda line: None)
"""


def _stderr(data: Path, out: Path, **env: str) -> str:
    script = SCRIPT.format(data=str(data), out=str(out))
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        check=True,
    )
    return run.stderr


@pytest.mark.slow  # a Python process of its own
def test_evaluate_from_python_prints_no_library_deprecation(hotpot_small: Path, tmp_path: Path) -> None:
    quiet = _stderr(hotpot_small, tmp_path / "quiet")
    assert "past_key_values" not in quiet and "FutureWarning" not in quiet, quiet
    loud = _stderr(hotpot_small, tmp_path / "loud", RAGTEAM_LIBRARY_WARNINGS="1")
    assert "past_key_values" in loud  # the notice is real, and shown when asked for
