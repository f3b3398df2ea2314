"""Does PPO learn? The same few training questions every iteration, estimators side by side, curves printed.

    .venv/bin/python bench/learning.py --init smollm2 --questions 8 --iterations 6 --sides grpo gae
    .venv/bin/python bench/learning.py --init runs/mmoa-sft --sides grpo gae    # from an SFT model

Each side is one `ragteam train ppo` run (MMOA-RAG S-G, the `mmoa` recipe's credit and penalties) on the
same `--questions` training questions in every iteration, at an equal number of sampled episodes per
iteration (`--questions` x `--group-size`; gae uses the same episodes, one critic baseline each). Small
acts (`--max-tokens`) and few documents (`--candidates`) keep an iteration affordable on CPU. The Selector's
action space is restricted as in MMOA-RAG's eq. 5 (the `mmoa` recipe's default); `--unconstrained` lets it
write free text, which an untrained model never writes in the required format (docs/results.md). The script
prints, per iteration and side, the training reward (F1 of the answers), the invalid-act rate of each role
and the Generator's reply length, then writes `OUT/learning.png` and `OUT/learning.json`.

What it shows is the one thing a unit test cannot: that on the real task, from the real start, training
reward goes up and invalid acts go down; a flat or falling curve here is a finding, not noise to tune away
(the questions never change, so differences between iterations are the policy's).

The side `trl-grpo` is the external reference: TRL's own `GRPOTrainer` (bench/learning_trl.py) from the
same `--init`, on the same questions, at the same number of sampled completions per iteration (`--questions`
x `--group-size`, `num_generations` = `--group-size`), the same `--lr` (constant), `--max-tokens`, beta 0,
temperature 1.0 and top_p 0.9. It differs from our sides in the task: a single role, MMOA-RAG's Generator
alone, whose prompt holds the top `--candidates` documents that ragteam's default retriever returns for the
question (fixed per question, all K shown: there is no Selector), rewarded with the F1 of the answer read by
the Generator's parser. Our sides roll the Selector too (and train it) unless told
`--ppo.train-roles generator`, so their Generator sees the Selector's choice of documents. TRL's loss is its
default (dapo, epsilon 0.2, group-scaled advantages); `--trl-epochs` passes (TRL's `num_iterations`, default
2 like our `--ppo.epochs`) of `--trl-updates` optimizer steps each per iteration. Its log has no Selector, so
its invalid column is the Generator's (empty answers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"

SIDE_FLAGS = {
    "gae": ["--ppo.advantage", "gae", "--ppo.shared-value"],
    "grpo": ["--ppo.advantage", "grpo"],
    "drgrpo": ["--ppo.advantage", "drgrpo"],
    "rloo": ["--ppo.advantage", "rloo"],
    "reinforce_pp": ["--ppo.advantage", "reinforce_pp"],
}


def command(args: argparse.Namespace, side: str, out: Path) -> list[str]:
    return [
        str(ROOT / ".venv" / "bin" / "ragteam"), "train", "ppo", "--recipe", "mmoa",
        "--variant", "s-g", "--candidates", str(args.candidates), "--data", str(args.data),
        "--selector-constrained" if not args.unconstrained else "--no-selector-constrained",
        "--offset", str(args.offset), "--limit", str(args.questions),
        "--questions-per-iteration", str(args.questions), "--rollout.group-size", str(args.group_size),
        "--rollout.max-tokens", str(args.max_tokens), "--iterations", str(args.iterations),
        "--policy.model", args.init, "--out", str(out), "--ppo.lr", str(args.lr), "--ppo.value-lr", str(args.lr),
        "--ppo.kl-beta", "0", "--ppo.kl-anneal-to", "0", "--ppo.kl-beta-min", "0",
        "--ppo.lr-schedule", "constant", "--threads", str(args.threads), "--no-progress", "--no-tensorboard",
        *SIDE_FLAGS[side], *(["--resume"] if any(out.glob("checkpoint-*")) else []),
    ]  # fmt: skip


def trl_command(args: argparse.Namespace, out: Path) -> list[str]:
    """The TRL reference side (bench/learning_trl.py): GRPOTrainer on the Generator alone."""
    return [
        sys.executable, str(Path(__file__).with_name("learning_trl.py")), "--data", str(args.data),
        "--offset", str(args.offset), "--questions", str(args.questions), "--group-size", str(args.group_size),
        "--iterations", str(args.iterations), "--init", args.init, "--candidates", str(args.candidates),
        "--max-tokens", str(args.max_tokens), "--lr", str(args.lr), "--threads", str(args.threads),
        "--epochs", str(args.trl_epochs), "--updates", str(args.trl_updates),
        *(["--penalty"] if args.trl_penalty else []), "--out", str(out),
    ]  # fmt: skip


def curve(out: Path) -> list[dict]:
    """Per iteration: reward F1, invalid rate per role, Generator length, seconds."""
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x.strip()]
    return [
        {
            "iteration": r["iteration"],
            "f1": r["reward"]["f1"],
            "invalid": {role: v.get("invalid", 0.0) for role, v in r["roles"].items()},
            "generator_length": r["roles"].get("generator", {}).get("length"),
            "informative_groups": r.get("groups", {}).get("informative"),
            "seconds": sum(r.get("seconds", {}).values()),
        }
        for r in rows
    ]


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    for side, rows in curves.items():
        its = [r["iteration"] for r in rows]
        a.plot(its, [r["f1"] for r in rows], marker="o", label=side)
        b.plot(
            its,
            [sum(r["invalid"].values()) / max(1, len(r["invalid"])) for r in rows],
            marker="o",
            label=side,
        )
    a.set(title="training reward (F1, same questions)", xlabel="iteration")
    b.set(title="invalid acts (mean over roles)", xlabel="iteration")
    a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--offset", type=int, default=0, help="first training question")
    p.add_argument("--questions", type=int, default=8, help="the fixed training questions")
    p.add_argument("--group-size", type=int, default=2, help="episodes per question and iteration")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--init", default="smollm2", help="the start: smollm2 (untrained) or an SFT model folder")
    p.add_argument("--sides", nargs="+", default=["grpo", "gae"], choices=[*sorted(SIDE_FLAGS), "trl-grpo"])
    p.add_argument("--candidates", type=int, default=3, help="documents the Selector sees")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens per act")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument(
        "--unconstrained",
        action="store_true",
        help="the Selector writes free text (default: its action space restricted as MMOA-RAG's eq. 5)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trl-epochs", type=int, default=2, help="trl-grpo: passes per batch (num_iterations)")
    p.add_argument("--trl-updates", type=int, default=1, help="trl-grpo: optimizer steps per pass")
    p.add_argument("--trl-penalty", action="store_true", help="trl-grpo: add the Generator's length penalty")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-learning")
    args = p.parse_args()

    curves = {}
    for side in args.sides:
        out = args.out / side
        t0 = time.perf_counter()
        cmd = trl_command(args, out) if side == "trl-grpo" else command(args, side, out)
        subprocess.run(cmd, check=True)
        curves[side] = curve(out)
        print(f"[learning] {side}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)

    print("| iteration | " + " | ".join(f"{s} F1 | {s} invalid | {s} gen. length" for s in curves) + " |")
    print("|---:|" + "---:|---:|---:|" * len(curves))
    for i in range(max(len(c) for c in curves.values())):
        cells = []
        for rows in curves.values():
            r = rows[i] if i < len(rows) else None
            if r is None:
                cells += ["", "", ""]
                continue
            inv = ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["invalid"].items()))
            cells += [f"{r['f1']:.3f}", inv, f"{r['generator_length'] or 0:.1f}"]
        print(f"| {i + 1} | " + " | ".join(cells) + " |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "learning.json").write_text(json.dumps(curves, indent=2))
    plot(curves, args.out / "learning.png")
    print(f"[learning] curves: {args.out / 'learning.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
