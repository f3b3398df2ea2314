"""The experiment scripts behind docs/results.md still run: `scripts/experiments/mmoa_grpo.sh` end to end on the
tiny model (its CPU dry run), every stage through the real CLI on HotpotQA-500, the paired comparison written."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # the experiment script end to end
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


def tiny_matrix_env() -> dict[str, str]:
    """scripts/experiments/matrix-tiny.env: the dry run's sizes, shared with on_device.sh's CUDA dry run."""
    env = {}
    for line in (ROOT / "scripts" / "experiments" / "matrix-tiny.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value.strip("'\"")
    return env


@pytest.mark.slow  # the experiment script end to end
def test_matrix_script_runs_every_leg_on_the_heldout_set_and_bundles_under_the_limits(
    shared_data: Path, tmp_path: Path
) -> None:
    import tarfile

    work = tmp_path / "work"
    tiny = tiny_matrix_env()
    part = 256_000  # parts this small, so that the cut and its reassembly run too (15 MiB on the device)
    env = dict(
        os.environ,
        **tiny,
        RAGTEAM=f"{sys.executable} -m ragteam.cli.main",
        PYTHON=sys.executable,
        DATA_DIR=str(shared_data),
        WORK=str(work),
        LEGS="mmoa c3po gym",
        PART_BYTES=str(part),
        OMP_NUM_THREADS="1",
    )
    script = ROOT / "scripts" / "experiments" / "matrix.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]

    n = int(tiny["EVAL_LIMIT"])
    compares = {
        "mmoa": ["compare"],
        "c3po": ["compare-tree-chain", "compare-sft-tree", "compare-sft-chain"],
        "gym": ["compare"],
    }
    for leg, names in compares.items():
        for name in names:
            result = json.loads((work / leg / f"{name}.json").read_text())
            assert result["counts"]["questions"] == n, (leg, name)  # the first n held-out questions, paired
            assert {"em", "f1", "cover_em"} <= set(result["metrics"])
            assert (work / leg / f"{name}.txt").read_text().count("| F1 |") == 1
    held = (work / "heldout-900.jsonl").read_text().splitlines()
    assert len(held) == 900
    first = {json.loads(x)["question_id"] for x in held[:n]}
    for ev in ("mmoa/eval-grpo", "c3po/eval-tree", "gym/eval-ppo"):
        metrics = json.loads((work / ev / "metrics.json").read_text())
        assert (
            metrics["n"] == n
            and metrics["failed"] == 0
            and metrics["data"] == str(work / "heldout-900.jsonl")
        )
        assert str(work / "index-heldout") in json.dumps(metrics["corpus"]), ev  # the held-out index, pinned
        episodes = gzip.open(work / ev / "episodes.jsonl.gz", "rt").read().splitlines()
        assert {json.loads(e)["question"]["id"] for e in episodes} == first

    # every training run retrieved from the pinned HotpotQA-500 index; C-3PO's arms stopped at one token budget
    for run in ("mmoa/grpo", "c3po/tree", "c3po/chain", "gym/ppo"):
        assert str(work / "index-train") in (work / run / "config.yaml").read_text(), run
    budget = int(tiny["C3_TOKENS"])
    for arm in ("tree", "chain"):
        rows = [json.loads(x) for x in (work / "c3po" / arm / "log.jsonl").read_text().splitlines()]
        assert rows[-1]["generated_tokens_total"] >= budget and len(rows) < int(tiny["C3_ITERS"]), arm
    for ev in ("mmoa/eval-sft", "c3po/eval-chain", "gym/eval-ppo"):  # EVAL_DTYPE reaches both models
        command = (work / f"{ev}.log").read_text().splitlines()[0]
        assert "--policy.dtype float32" in command and "--llm.dtype float32" in command, ev
    tree_cfg = (work / "c3po" / "tree" / "config.yaml").read_text()
    assert "advantage: tree_grpo" in tree_cfg or "advantage: tree\n" in tree_cfg

    # bundles: within the device's return limits (8 files of 16 MiB, 64 MiB), parts that reassemble
    files = sorted((work / "bundles").iterdir())
    assert files and all(f.stat().st_size <= part for f in files)
    assert sum(f.stat().st_size for f in files) <= 64 * 2**20
    for leg in compares:
        parts = [f for f in files if f.name.startswith(f"{leg}.tar.gz")]
        assert 1 <= len(parts) <= 7, [f.name for f in parts]
        whole = tmp_path / f"{leg}.tar.gz"
        whole.write_bytes(b"".join(f.read_bytes() for f in parts))
        with tarfile.open(whole) as tar:
            names = tar.getnames()
        assert f"{leg}/timings.tsv" in names and f"{leg}/weights-left-behind.txt" in names
        assert f"{leg}/{compares[leg][0]}.json" in names and f"{leg}/eval-sft/episodes.jsonl.gz" in names
        assert not [x for x in names if x.endswith((".safetensors", ".bin", ".pt"))]
    behind = (work / "mmoa" / "weights-left-behind.txt").read_text()
    assert "grpo/model.safetensors" in behind and "sft/model.safetensors" in behind

    again = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "FRESH=1" in again.stdout  # a second run never overwrites a leg
    assert (work / "mmoa" / "compare.json").is_file()

    # RESUME=1 after an interruption: finished stages are skipped, the trainer resumes from its checkpoint,
    # the eval from its episodes (the bundle had gzipped them), and the compares are made again
    c3 = work / "c3po"
    timings = (c3 / "timings.tsv").read_text().splitlines()
    (c3 / "timings.tsv").write_text(
        "".join(x + "\n" for x in timings if x.split("\t")[1] not in ("chain", "eval-chain", "total"))
    )
    (c3 / "chain" / "model.safetensors").unlink()
    kept = gzip.open(c3 / "eval-chain" / "episodes.jsonl.gz", "rt").read().splitlines()[:1]
    with gzip.open(c3 / "eval-chain" / "episodes.jsonl.gz", "wt") as f:
        f.write(kept[0] + "\n")
    (c3 / "compare-tree-chain.json").unlink()
    resumed = subprocess.run(
        ["bash", str(script)],
        env={**env, "LEGS": "c3po", "RESUME": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-3000:]
    assert "c3po: tree (done before)" in resumed.stdout and "c3po: chain\n" in resumed.stdout
    assert "--resume" in (c3 / "chain.log").read_text().splitlines()[0]  # the exact command heads its log
    assert f"1 of {n} questions already in" in (c3 / "eval-chain.log").read_text()
    assert json.loads((c3 / "compare-tree-chain.json").read_text())["counts"]["questions"] == n

    # the why of a C-3PO result: where the arms' greedy episodes part, and each proxy's route probabilities
    why = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "experiments" / "c3po_why.py"), str(c3), "--prompts", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert why.returncode == 0, why.stderr[-3000:]
    parted = [x for x in why.stdout.splitlines() if "first differing policy act by role" in x]
    assert [x.split(":")[0] for x in parted] == ["sft vs tree", "sft vs chain", "tree vs chain"]
    for line in parted:  # every question is counted once: same, or the role where the two first differ
        counts = json.loads(line.split("by role: ")[1])
        assert sum(counts.values()) == n and set(counts) <= {"same", "length", "router", "filter", "decider"}
    rows = {x.split("|")[1].strip(): x.split("|")[2:6] for x in why.stdout.splitlines() if x.startswith("| ")}
    for arm in ("sft", "tree", "chain"):  # three probabilities of disjoint replies, and each prompt's argmax
        probs = [float(p) for p in rows[arm][:3]]
        assert all(0 < p < 1 for p in probs) and sum(probs) <= 1 + 1e-2, (arm, probs)
        assert sum(int(part.split()[-1]) for part in rows[arm][3].split(",")) == 2, rows[arm]
