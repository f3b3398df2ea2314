"""Benchmark: SFT tokens/s and peak memory of `ragteam train sft` on SmolLM2 (CPU): full/LoRA x padded/packed.

The same ~200 synthetic chat rows of mixed lengths (a HotpotQA question with 0 to 5 of its paragraphs, a
one-sentence target) are trained four ways, each in its own process (so peak memory is its own):

  full-padded   every weight; rows padded to the longest row of each batch
  full-packed   every weight; rows packed into --max-length sequences, no padding (TRL packing, best-fit
                decreasing; attention stays within each row)
  lora-padded   LoRA adapters (r=16 on every projection); padded
  lora-packed   LoRA adapters; packed

Each runs --steps optimizer steps of --batch-size sequences through the same code as the command
(`ragteam.train.sft.build_sft_trainer`). tokens/s counts real (non-pad) sequence tokens from the end of step 1
to the end of the last step (step 1 pays one-off costs); "median step" is the median of the per-step rates,
which a burst of load from other programs moves less; peak RSS is the process's maximum resident memory.
On a shared machine use --rounds 2 or more: configs run in turn, round after round, and the best is kept.
The packed/padded ratio is the point: packing should give >= 1.3x the tokens/s.

    .venv/bin/python bench/train.py                 # ~5-10 minutes on 2 cores
    .venv/bin/python bench/train.py --steps 4 --configs full-padded full-packed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["full-padded", "full-packed", "lora-padded", "lora-packed"]
SYSTEM = (
    "You are the generator of a retrieval-augmented QA team. Read the documents, then answer the question "
    "in one sentence that ends with the short answer."
)


def synthetic_rows(data: Path, n: int) -> list[dict]:
    """`n` SFT rows of mixed lengths from HotpotQA (IRCoT format): 0-5 paragraphs, a one-line target."""
    rows = []
    with data.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if len(rows) >= n:
                break
            rec = json.loads(line)
            answer = rec["answers_objects"][0]["spans"][0]
            contexts = rec["contexts"]
            k = [0, 1, 2, 3, 5][i % 5]
            docs = "\n".join(
                f"[{j + 1}] {c['title']}: {c['paragraph_text']}" for j, c in enumerate(contexts[:k])
            )
            user = f"Question: {rec['question_text']}" + (f"\n\nDocuments:\n{docs}" if docs else "")
            support = next((c for c in contexts if c.get("is_supporting")), contexts[0])
            first = support["paragraph_text"].split(".  ")[0].strip().rstrip(".")
            rows.append(
                {
                    "role": "generator",
                    "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                    "target": f"{first}, so the answer is {answer}.",
                    "question_id": rec["question_id"],
                }
            )
    return rows


def run_one(name: str, args: argparse.Namespace) -> dict:
    """Train `name` for args.steps steps in this process; return its measurements."""
    os.environ.setdefault("RAGTEAM_HOME", str(ROOT / ".ragteam"))
    from ragteam.config import setup_caches

    setup_caches()
    from transformers import TrainerCallback
    from transformers.trainer_utils import SaveStrategy

    from ragteam.train.data import read_sft_rows
    from ragteam.train.sft import SFTConfig, build_sft_trainer
    from ragteam.train.trl_args import setup_libraries

    setup_libraries()  # as `ragteam train` does (CPU: the LM head scores only trained positions)
    kind, layout = name.split("-")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        data = Path(tmp) / "sft.jsonl"
        rows = synthetic_rows(Path(args.data), args.rows)
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        cfg = SFTConfig(
            data=str(data),
            out=str(Path(tmp) / "out"),
            policy={"model": args.model},
            lora=kind == "lora",
            max_steps=args.steps,
            batch_size=args.batch_size,
            max_length=args.max_length,
            seed=0,
            tensorboard=False,
            progress=False,
            device=args.device,
            sft={"packing": layout == "packed"},
        )
        trainer, _ = build_sft_trainer(cfg, read_sft_rows(data), lr=1e-5)
        trainer.args.save_strategy = SaveStrategy.NO  # timing only: no checkpoint at the end

        ends: dict[int, float] = {}
        tokens: dict[int, float] = {}

        class Clock(TrainerCallback):
            def on_step_end(self, a, state, control, **kw):
                ends[state.global_step] = time.perf_counter()

            def on_log(self, a, state, control, logs=None, **kw):
                if logs and "num_tokens" in logs:
                    tokens[state.global_step] = float(logs["num_tokens"])

        trainer.add_callback(Clock())
        trainer.train()
    last = max(ends)
    seconds = ends[last] - ends[1]
    trained = tokens[last] - tokens[1]
    step_rates = [(tokens[s] - tokens[s - 1]) / (ends[s] - ends[s - 1]) for s in range(2, last + 1)]
    return {
        "config": name,
        "steps": last,
        "sequences_per_step": args.batch_size,
        "s_per_step": seconds / (last - 1),
        "tokens_per_step": trained / (last - 1),
        "tokens_per_s": trained / seconds,
        "median_step_tokens_per_s": statistics.median(step_rates),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": __import__("torch").get_num_threads(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="init model: smollm2, tiny or a folder")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"))
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--rounds", type=int, default=1, help="run every config this many times; keep the best")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    p.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)  # child process: run one config
    args = p.parse_args()
    if args.steps < 2:
        p.error("--steps must be >= 2 (step 1 is warm-up)")

    if args.one:
        print("RESULT " + json.dumps(run_one(args.one, args)), flush=True)
        return 0

    best: dict[str, dict] = {}
    for round_ in range(args.rounds):
        for name in args.configs:
            cmd = [sys.executable, __file__, "--one", name] + _forwarded(args)
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                print(f"{name}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 1
            r = json.loads(line[len("RESULT ") :]) | {"wall_s": time.perf_counter() - start, "round": round_}
            load = os.getloadavg()[0]
            print(
                f"  round {round_ + 1} {name}: {r['tokens_per_s']:.0f} tokens/s (median step "
                f"{r['median_step_tokens_per_s']:.0f}), peak {r['peak_rss_mb']:.0f} MB, load {load:.1f}",
                file=sys.stderr,
            )
            if name not in best or r["median_step_tokens_per_s"] > best[name]["median_step_tokens_per_s"]:
                best[name] = r
    results = [best[name] for name in args.configs]

    print(
        f"\nSFT on {args.model}, {args.rows} rows, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} steps, best of {args.rounds} ({platform.machine()}, {os.cpu_count()} CPUs)\n"
    )
    head = f"{'config':<13} {'s/step':>7} {'tokens/step':>12} {'tokens/s':>9} {'median step':>12}"
    print(f"{head} {'peak RSS MB':>12}")
    for r in results:
        cells = f"{r['s_per_step']:>7.2f} {r['tokens_per_step']:>12.0f} {r['tokens_per_s']:>9.0f}"
        cells += f" {r['median_step_tokens_per_s']:>12.0f}"
        print(f"{r['config']:<13} {cells} {r['peak_rss_mb']:>12.0f}")
    by = {r["config"]: r for r in results}
    for kind in ("full", "lora"):
        if f"{kind}-padded" in by and f"{kind}-packed" in by:
            packed, padded = by[f"{kind}-packed"], by[f"{kind}-padded"]
            ratio = packed["tokens_per_s"] / padded["tokens_per_s"]
            median = packed["median_step_tokens_per_s"] / padded["median_step_tokens_per_s"]
            verdict = "ok" if min(ratio, median) >= 1.3 else "below the 1.3x target"
            print(f"{kind}: packed / padded = {ratio:.2f}x tokens/s, {median:.2f}x median step ({verdict})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def _forwarded(args: argparse.Namespace) -> list[str]:
    out = ["--model", args.model, "--data", args.data, "--rows", str(args.rows), "--steps", str(args.steps)]
    out += [
        "--batch-size",
        str(args.batch_size),
        "--max-length",
        str(args.max_length),
        "--device",
        args.device,
    ]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
