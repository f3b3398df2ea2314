"""Benchmark: scale-out on CPU. Ray rollout workers against one process (an eval), and PPO on two torchrun
ranks (gloo) against one process (rollout, advantage pass and update times of one iteration).

    .venv/bin/python bench/distributed.py ray --limit 16            # ~6 min on 2 cores
    .venv/bin/python bench/distributed.py torchrun --questions 8    # ~10 min on 2 cores

Each side runs the real command (`ragteam eval`, `ragteam train ppo`) in a fresh process, so model loading
and Ray's start are in the wall time; the table also gives the part each command times itself (the eval's
rollout, PPO's phases from log.jsonl). The sides use the same total of CPU threads: one process with
`--threads` torch threads against `--threads` workers or ranks of one thread each (and one process of one
thread, for scale). Results go to stdout as a markdown table and to --out/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"


def run(cmd: list[str], threads: int) -> float:
    """Run `cmd` with `threads` torch/OpenMP threads; its wall seconds (an error ends the bench)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return time.perf_counter() - t0


def bench_ray(args: argparse.Namespace) -> list[dict]:
    common = [
        sys.executable, "-m", "ragteam.cli.main", "eval", "--data", str(args.data), "--workflow", args.workflow,
        "--limit", str(args.limit), "--policy.model", args.model, "--llm.model", args.model,
        "--retriever.kind", "bm25", "--topk", "3", "--no-progress",
    ]  # fmt: skip
    sides = [
        ("1 process, 1 thread", 1, []),
        (f"1 process, {args.threads} threads", args.threads, []),
        (f"{args.threads} Ray workers x 1 thread", 1, ["--rollout.workers", str(args.threads)]),
    ]
    rows, answers = [], []
    for name, threads, extra in sides:
        out = args.out / f"eval-{len(rows)}"
        shutil.rmtree(out, ignore_errors=True)
        threads_flags = ["--policy.threads", str(threads), "--llm.threads", str(threads)] if not extra else []
        wall = run([*common, "--out", str(out), *threads_flags, *extra], threads)
        metrics = json.loads((out / "metrics.json").read_text())
        answers.append((out / "predictions.jsonl").read_text())
        rows.append({"side": name, "wall_s": round(wall, 1), "eval_s": round(metrics["seconds"], 1)})
    same = all(a == answers[0] for a in answers)
    print(
        f"\neval: {args.workflow}, {args.model}, {args.limit} questions; same predictions on every side: {same}"
    )
    print("| side | wall s (process) | eval s (its own timer) |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['side']} | {r['wall_s']} | {r['eval_s']} |")
    return [dict(r, same_predictions=same) for r in rows]


def bench_torchrun(args: argparse.Namespace) -> list[dict]:
    ppo = [
        "-m", "ragteam.cli.main", "train", "ppo", "--recipe", "mmoa", "--data", str(args.data),
        "--policy.model", args.model, "--limit", "64", "--iterations", "1", "--questions-per-iteration",
        str(args.questions), "--variant", "s-g", "--topk", "3", "--candidates", "3",
        "--retriever.kind", "bm25", "--no-progress", "--no-tensorboard",
    ]  # fmt: skip
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={args.threads}",
    ]
    sides = [
        ("1 process, 1 thread", 1, [sys.executable, *ppo, "--threads", "1"]),
        (
            f"1 process, {args.threads} threads",
            args.threads,
            [sys.executable, *ppo, "--threads", str(args.threads)],
        ),
        (f"torchrun {args.threads} ranks (gloo, DDP) x 1 thread", 1, [*launcher, *ppo, "--threads", "1"]),
    ]
    rows = []
    for name, threads, cmd in sides:
        out = args.out / f"ppo-{len(rows)}"
        shutil.rmtree(out, ignore_errors=True)
        wall = run([*cmd, "--out", str(out)], threads)
        row = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
        secs = row["seconds"]
        rows.append(
            {
                "side": name,
                "wall_s": round(wall, 1),
                "rollout_s": secs["rollout"],
                "advantages_s": secs["advantages"],
                "update_s": secs["update"],
                "samples": row["samples"],
                "policy_loss": row["train"].get("policy_loss"),
            }
        )
    print(f"\nPPO: mmoa s-g, {args.model}, {args.questions} questions, one iteration")
    print("| side | wall s | rollout s | advantages s | update s | samples | policy loss |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['side']} | {r['wall_s']} | {r['rollout_s']} | {r['advantages_s']} | {r['update_s']} | "
            f"{r['samples']} | {r['policy_loss']:.6f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["ray", "torchrun"])
    parser.add_argument("--model", default="smollm2", help="smollm2 or tiny")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--workflow", default="c3po", help="ray: the evaluated workflow")
    parser.add_argument("--limit", type=int, default=16, help="ray: questions evaluated")
    parser.add_argument("--questions", type=int, default=8, help="torchrun: questions of the PPO iteration")
    parser.add_argument(
        "--threads", type=int, default=2, help="workers / ranks, and the one process's threads"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-distributed")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = bench_ray(args) if args.what == "ray" else bench_torchrun(args)
    path = args.out / f"{args.what}.json"
    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
