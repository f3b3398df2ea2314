"""The experiment scripts behind docs/results.md still run: `scripts/experiments/mmoa_grpo.sh` end to end on the
tiny model (its CPU dry run), every stage through the real CLI on HotpotQA-500, the paired comparison written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mmoa_grpo_script_runs_every_stage_and_compares(shared_data: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = dict(
        os.environ,
        RAGTEAM=f"{sys.executable} -m ragteam.cli.main",
        DATA=str(shared_data / "hotpotqa-dev-500.jsonl"),
        WORK=str(work),
        POLICY="tiny",
        SFT_STEPS="2",
        QPI="2",
        GROUP="2",
        ITERS="1",
        EVAL_LIMIT="2",
        BATCH="8",
        MB_TOKENS="8192",
        OMP_NUM_THREADS="1",
    )
    script = ROOT / "scripts" / "experiments" / "mmoa_grpo.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((work / "compare.json").read_text())
    assert result["counts"]["questions"] == 2  # held-out questions 400-401, paired
    assert {"em", "f1", "cover_em"} <= set(result["metrics"])
    rows = [json.loads(x) for x in (work / "grpo" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert (work / "sft" / "checkpoint-2").is_dir() and (work / "eval-grpo" / "episodes.jsonl").is_file()

    again = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "FRESH=1" in again.stdout  # a second run never overwrites the first
