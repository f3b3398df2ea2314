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


def test_heldout_set_is_the_900_questions_no_training_question_among_them(
    shared_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "heldout.jsonl"
    env = dict(os.environ, DATA_DIR=str(shared_data))
    script = ROOT / "scripts" / "experiments" / "heldout.sh"
    done = subprocess.run(
        ["bash", str(script), str(out)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    held = out.read_text().splitlines()
    five = (shared_data / "hotpotqa-dev-500.jsonl").read_text().splitlines()
    eight = (shared_data / "hotpotqa-dev-800.jsonl").read_text().splitlines()
    assert held == five[400:500] + eight  # the records unchanged, in a fixed order: runs pair line for line
    ids = [json.loads(x)["question_id"] for x in held]
    assert len(set(ids)) == 900
    trained = {json.loads(x)["question_id"] for x in five[:400]}
    trained_text = {json.loads(x)["question_text"] for x in five[:400]}
    assert not trained & set(ids)
    assert not trained_text & {json.loads(x)["question_text"] for x in held}

    missing = subprocess.run(
        ["bash", str(script), str(out)], env=dict(env, DATA_DIR=str(tmp_path)), capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr
