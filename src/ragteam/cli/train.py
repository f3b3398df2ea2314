"""What `ragteam train sft|dpo|prm|ppo` share around the library's trainer: the run lock, and the messages.

    ragteam train sft    --data sft.jsonl   --out runs/sft    [--policy.model smollm2] [--lora] [--sft.packing]
    ragteam train dpo    --data pairs.jsonl --out runs/dpo    --policy.model runs/sft [--dpo.beta 0.1]
    ragteam train prm    --data pairs.jsonl --out runs/prm    [--prm.model smollm2]
    ragteam train sft    --data sft.jsonl   --out runs/sft    --max-steps 400 --resume   # continue a run
    ragteam train ppo    --recipe mmoa --data q.jsonl --out runs/ppo --policy.model runs/sft   # train_ppo.py

The model a trainer starts from is named as every command names a model: `--policy.model` (sft, dpo, ppo),
`--prm.model` (prm). Schedule: --epochs E or --max-steps N, --lr, --batch-size, --grad-accum, --max-length,
--seed; checkpoints every --save-steps into OUT/checkpoint-N. OUT also gets log.jsonl (every logged step),
runs/ (TensorBoard) and config.yaml. Use the result with `--policy.model OUT` (full fine-tune),
`--policy.model START --policy.lora OUT` (--lora), or `--prm.model OUT`. The configs and the training
functions are the library's (`ragteam.train.sft`, `.dpo`, `.prm`, `.ppo`); the row formats are in
`ragteam.train.data`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

RENAMED = {"--init": "--policy.model"}
"""The trainers' former spelling of the start model, named in the error (`ragteam.cli.main`)."""


def train_lock(kind: str, cfg: Any) -> Any:
    """The run lock on `cfg.out` (`ragteam.outdir.run_lock`: one writer per run folder) for `ragteam train
    KIND`; under torchrun only rank 0 takes it (the other ranks write into the same folder by design)."""
    from ragteam.outdir import run_lock

    if os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext()
    return run_lock(cfg.out, f"train {kind}")


def run_trainer(kind: str, cfg: Any, train: Callable[[], Path], use: Callable[[Path], str]) -> int:
    """Run `train()` (the library's trainer on `cfg`) under the run lock; on Ctrl-C say how to resume; on
    success say how to load the result (`use(output folder)`: the flags that load it)."""
    try:
        with train_lock(kind, cfg):
            out = train()
    except KeyboardInterrupt:
        print(
            f"\nragteam train {kind}: interrupted; continue from the newest checkpoint with the same command "
            f"and --resume (checkpoints in {cfg.out})",
            file=sys.stderr,
        )
        return 130
    print(f"ragteam train {kind}: saved to {out}; use it with {use(out)}", file=sys.stderr)
    return 0


def policy_use(cfg: Any) -> Callable[[Path], str]:
    """How to load a policy trainer's result: the model, or its start model with the adapter (--lora)."""
    if cfg.lora:
        return lambda out: f"--policy.model {cfg.policy.model} --policy.lora {out}"
    return lambda out: f"--policy.model {out}"
