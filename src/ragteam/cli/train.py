"""What `ragteam train sft|dpo|prm` share: run one TRL-based trainer and say how to use its result.

    ragteam train sft    --data sft.jsonl   --out runs/sft    [--init smollm2] [--lora] [--sft.packing]
    ragteam train dpo    --data pairs.jsonl --out runs/dpo    --init runs/sft [--dpo.beta 0.1]
    ragteam train prm --data pairs.jsonl --out runs/prm    [--init smollm2]
    ragteam train sft    --data sft.jsonl   --out runs/sft    --max-steps 400 --resume   # continue a run
    ragteam train ppo    --recipe mmoa --data q.jsonl --out runs/ppo --init runs/sft     # see train_ppo.py

Schedule: --epochs E or --max-steps N, --lr, --batch-size, --grad-accum, --max-length, --seed; checkpoints
every --save-steps into OUT/checkpoint-N. OUT also gets log.jsonl (every logged step), runs/ (TensorBoard)
and config.yaml. Use the result with `--policy.model OUT` (full fine-tune), `--policy.model INIT
--policy.lora OUT` (--lora), or `--prm.model OUT`. The row formats are in `ragteam.train.data`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from ragteam.train.train_config import TrainConfig

OVERWRITE_HELP = (
    "write into a non-empty --out that holds files this command did not write (another command's run, "
    "someone's files); a folder holding this trainer's own checkpoints or model still needs --resume"
)
TRAIN_OWN = ("log.jsonl",)  # what a trainer writes into --out before its config.yaml


def check_train_out(kind: str, cfg: TrainConfig) -> None:
    """Refuse an --out that holds files `ragteam train KIND` did not write, unless --overwrite
    (`ragteam.outdir`). Under torchrun only rank 0 checks: the others would see its files appear."""
    from ragteam.outdir import check_out_dir

    if os.environ.get("RANK", "0") == "0":
        check_out_dir(cfg.out, f"train {kind}", bool(getattr(cfg, "overwrite", False)), own=TRAIN_OWN)


def train_lock(kind: str, cfg: Any) -> Any:
    """The run lock on `cfg.out` (`ragteam.outdir.run_lock`: one writer per run folder) for `ragteam train
    KIND`; under torchrun only rank 0 takes it (the other ranks write into the same folder by design)."""
    import contextlib

    from ragteam.outdir import run_lock

    if os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext()
    return run_lock(cfg.out, f"train {kind}")


def trained(kind: str, cfg: TrainConfig, train: Callable[[TrainConfig, Any], Path], options: Any) -> Path:
    """What `ragteam train KIND` does without the terminal: --out checked (`check_train_out`), then
    `train(shared settings, the trainer's options)`; the output folder."""
    check_train_out(kind, cfg)
    return train(common(cfg), options)


def run_trainer(kind: str, cfg: TrainConfig, train: Callable[[], Path]) -> int:
    """Run `train()` (the command's `train(cfg)`, which checks --out first); on Ctrl-C say how to resume; on
    success say how to load the result."""
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
    if kind == "prm":
        use = f"--prm.model {out}"
    else:
        use = f"--policy.model {out}" if not cfg.lora else f"--policy.model {cfg.init} --policy.lora {out}"
    print(f"ragteam train {kind}: saved to {out}; use it with {use}", file=sys.stderr)
    return 0


class TrainerCommand(TrainConfig):
    """The config of a TRL trainer's command that needs nothing but its own option group (`train dpo`, `train
    prm`): the shared settings, --overwrite, and the options in the field named `KIND` (`--dpo.*`, `--prm.*`).
    `TRAINER` names the training function (`module:function`, imported when the command runs, so --help
    stays fast). Each such command's module holds only its `Config` and re-exports `train` and `run` from here."""

    KIND: ClassVar[str]
    TRAINER: ClassVar[str]

    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def train(cfg: TrainerCommand) -> Path:
    """What the command does, for Python (`ragteam.train_dpo`, `ragteam.train_prm`): --out checked, the model
    trained; returns the output folder."""
    module, name = cfg.TRAINER.split(":")
    return trained(cfg.KIND, cfg, getattr(importlib.import_module(module), name), getattr(cfg, cfg.KIND))


def run(cfg: TrainerCommand) -> int:
    """The command: `train(cfg)` with the messages of `run_trainer`."""
    return run_trainer(cfg.KIND, cfg, lambda: train(cfg))


def common(cfg: TrainConfig) -> TrainConfig:
    """The shared settings alone (without the trainer's own option group)."""
    return TrainConfig.model_validate(cfg.model_dump(include=set(TrainConfig.model_fields)))
