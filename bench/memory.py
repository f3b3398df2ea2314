"""Benchmark: peak resident memory of a CPU training run with and without `ragteam.allocator`'s setting.

The same `ragteam` command runs in a child process twice, side by side: `default` with glibc's own malloc
behaviour (`RAGTEAM_MALLOC=default`), `returned` with freed blocks of 1 MB and more handed back to the system
(what every `ragteam` command now does). It prints each arm's peak resident size (the child's `ru_maxrss`) and
wall time, and their ratios. The default workload is the one that was killed for memory: a C-3PO tree PPO
iteration (`--rollout.forks c3po`, Tree-GRPO, 32 sequences decoded together) on SmolLM2-135M in float32, here
on `--questions` HotpotQA-500 questions x 2 trees, over the pooled corpus of the file's own paragraphs.

    .venv/bin/python bench/memory.py                 # ~25 minutes on 2 cores (docs/training.md)
    .venv/bin/python bench/memory.py --questions 8 --iterations 2
    .venv/bin/python bench/memory.py -- eval --workflow mmoa --data ../shared/data/hotpotqa-dev-500.jsonl \
        --limit 32 --out {out}                       # any ragteam command; {out} is a fresh folder per arm

Both arms use the same seeds, so they generate the same tokens; the setting changes where freed memory goes,
not a number the run computes (the last line says whether the two runs generated the same number of tokens
in each iteration of a training command; other commands write no log.jsonl and show empty lists).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"


def c3po_tree_ppo(questions: int, iterations: int) -> list[str]:
    """`train ppo` on C-3PO trees: the CPU leg's settings (scripts/experiments/matrix.sh, leg_c3po) on fewer
    questions, every act kept (an untrained proxy's groups often score alike)."""
    return (
        "train ppo --recipe c3po --workflow c3po --profile small --retriever.kind bm25 --topk 3 --max-rounds 3 "
        "--rollout.max-depth 16 --rollout.max-tokens 96 --rollout.llm-max-tokens 48 --role-caps "
        f"--data {DATA} --corpus pooled --seed 0 --rollout.seed 0 --policy.dtype float32 --no-ppo.bf16 "
        "--ppo.epochs 2 --ppo.micro-tokens 4096 --ppo.minibatch-tokens 32768 --rollout.max-concurrent 32 "
        "--policy.max-batch-size 32 --llm.model smollm2 --llm.max-batch-size 32 --no-progress "
        f"--limit {questions} --questions-per-iteration {questions} --iterations {iterations} "
        "--rollout.temperature 1.0 --rollout.forks c3po --ppo.advantage tree_grpo --ppo.credit tree_mc "
        "--rollout.group-size 2 --ppo.reward cover_em --ppo.normalize none --no-ppo.skip-uninformative "
        "--save-total-limit 1 --out {out}"
    ).split()


def run_arm(arm: str, command: list[str], out: Path) -> dict:
    """Run `ragteam <command>` in a child with the arm's allocator setting; its peak RSS and wall time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "RAGTEAM_MALLOC"}
    if arm == "default":
        env["RAGTEAM_MALLOC"] = "default"
    args = [a.replace("{out}", str(out)) for a in command]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragteam.cli.main", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the largest child's so far
    seconds = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped here: keep Popen from waiting on it again
    if code != 0:
        raise SystemExit(f"{arm}: ragteam {' '.join(args)} exited {code}:\n{output[-3000:]}")
    peak_kb = usage.ru_maxrss
    log = out / "log.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return {
        "arm": arm,
        "peak_kb": peak_kb,
        "seconds": seconds,
        "tokens": [r.get("generated_tokens") for r in rows],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", type=int, default=4, help="questions per iteration (2 trees each)")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument(
        "command", nargs="*", help="a ragteam command instead of the C-3PO tree PPO ({out}: its folder)"
    )
    args = p.parse_args()
    command = args.command or c3po_tree_ppo(args.questions, args.iterations)
    print(f"ragteam {' '.join(command)}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(dir=ROOT / "runs" if (ROOT / "runs").is_dir() else None) as tmp:
        for arm in ("returned", "default"):
            r = run_arm(arm, command, Path(tmp) / arm)
            results.append(r)
            print(f"{arm:9s} peak {r['peak_kb'] / 2**20:6.2f} GB   {r['seconds']:7.1f} s", flush=True)
    ret, dflt = results
    same = ret["tokens"] == dflt["tokens"]
    print(
        f"\nreturned / default: peak memory {ret['peak_kb'] / dflt['peak_kb']:.2f}x, "
        f"wall time {ret['seconds'] / dflt['seconds']:.2f}x; generated tokens per iteration "
        f"{ret['tokens']} vs {dflt['tokens']} ({'the same' if same else 'DIFFERENT'})"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
