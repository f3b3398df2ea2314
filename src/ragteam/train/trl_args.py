"""How the TRL-based trainers (SFT, DPO, PRM) drive TRL and transformers: the opening phases every one runs
(`start_training`), the TrainingArguments they share, the libraries' set-up, the JSONL log callback, and
`train()` inside the W&B run."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragteam.config import Config
from ragteam.train.report import wandb_run
from ragteam.train.run_folder import check_train_out, prepare_out_dir, resolve_init, write_config
from ragteam.train.train_config import TrainConfig, resolved_lr

__all__ = [
    "SCHEDULERS",
    "Start",
    "jsonl_log_callback",
    "score_only_trained_tokens_on_cpu",
    "setup_libraries",
    "start_training",
    "tensorboard_available",
    "train_and_report",
    "trainer_arguments",
]


SCHEDULERS = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
"""`--lr-schedule` -> transformers' scheduler name (its `constant` would ignore the warm-up)."""


def tensorboard_available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def _checkpointing_arg() -> str:
    """TrainingArguments' name for activation recomputation: `activation_checkpointing` in recent
    transformers, `gradient_checkpointing` before (5.17 on the GPU image we measured on)."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def trainer_arguments(cfg: TrainConfig, lr: float) -> dict[str, Any]:
    """Keyword arguments shared by SFTConfig, DPOConfig and RewardConfig (all TrainingArguments)."""
    import torch

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    return dict(
        output_dir=str(cfg.out),
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        num_train_epochs=cfg.epochs,
        learning_rate=lr,
        lr_scheduler_type=SCHEDULERS[cfg.lr_schedule],
        warmup_steps=cfg.warmup_steps or cfg.warmup_ratio,  # below 1: a share of the steps, rounded up
        weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        seed=cfg.seed,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_strategy="steps",
        logging_steps=cfg.log_steps,
        logging_first_step=True,
        report_to=(["tensorboard"] if cfg.tensorboard and tensorboard_available() else [])
        + (["wandb"] if cfg.report_to == "wandb" else []),  # into the run `train_and_report` opens
        disable_tqdm=not cfg.progress,
        use_cpu=cfg.device == "cpu",
        bf16=cfg.bf16,  # TRL's configs default to bf16=True; off unless asked (CPU)
        **{_checkpointing_arg(): cfg.gradient_checkpointing},  # TRL's default is on; off: faster on CPU
        dataloader_num_workers=0,
        dataloader_pin_memory=cfg.device != "cpu" and torch.cuda.is_available(),
        save_only_model=False,  # optimizer and scheduler state too, so --resume continues exactly
    )


def train_and_report(trainer: Any, cfg: TrainConfig, opts: Config, resume_from: Path | None) -> None:
    """`trainer.train()`, from `resume_from` when resuming, inside the W&B run of `--report-to wandb` (opened
    in OUT/wandb with the resolved config, finished when training ends). The terminal shows ragteam's step
    lines (`StepLines`) instead of transformers' raw log dicts."""
    config = {**cfg.model_dump(mode="json", exclude={"overwrite"}), **opts.model_dump(mode="json")}
    from ragteam.train.step_lines import use_step_lines

    use_step_lines(trainer, type(opts).__name__.removesuffix("Options").lower(), cfg.progress)
    main = trainer.is_world_process_zero()
    with wandb_run(cfg.report_to, Path(cfg.out), config, resume_from is not None, main=main):
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def setup_libraries() -> None:
    """Quiet transformers' and datasets' info chatter, and score only trained tokens on CPU (see below)."""
    import datasets
    import transformers

    if os.environ.get("TRANSFORMERS_VERBOSITY") != "error":  # quiet_libraries (the CLI) asked for less
        transformers.logging.set_verbosity_warning()
    if os.environ.get("DATASETS_VERBOSITY") != "error":
        datasets.logging.set_verbosity_warning()
    score_only_trained_tokens_on_cpu()


def score_only_trained_tokens_on_cpu() -> bool:
    """Make TRL's fused LM head score only the positions that carry a label on CPU too; True when active.

    Why: TRL's SFT and DPO losses run the LM head (a 49k-word vocabulary for SmolLM2) in chunks over the
    hidden states. On Triton devices TRL first keeps only the positions with a label ("compact"); elsewhere
    it scores every position, prompt included, because on XLA/Neuron a varying number of positions would
    recompile the graph. CPU has no such issue, and an SFT or DPO row trains a short reply after a long
    prompt, so scoring every position spends about a third of a CPU step on logits that are thrown away
    (measured: SmolLM2, batch 4, 1.5x faster steps). The loss and gradients are the same either way (masked
    positions contribute zero); only the rows fed to the head change. TRL decides this through
    `trl.trainer.utils._use_triton`, which this wraps to answer True for CPU tensors (the kernels' own
    choice of Triton vs torch code is a separate reference, left untouched). Without that private name
    (another TRL version) nothing changes.
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        return False
    if getattr(original, "_ragteam_compact_cpu", False):
        return True

    def use_compact(device) -> bool:
        return device.type == "cpu" or original(device)

    use_compact._ragteam_compact_cpu = True
    trl_utils._use_triton = use_compact
    return True


def jsonl_log_callback(out: str | Path):
    """A TrainerCallback appending each logged step to `out/log.jsonl`: {"step", "epoch", "time", ...}."""
    from transformers import TrainerCallback

    path = Path(out) / "log.jsonl"

    class JsonlLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            row = {"step": state.global_step, "epoch": state.epoch, "time": round(time.time(), 3)}
            row.update({k: v for k, v in logs.items() if isinstance(v, int | float | str)})
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    return JsonlLog()


@dataclass
class Start:
    """What a trainer knows once its opening phases are done (`start_training`)."""

    rows: list[Any]
    resume_from: Path | None  # the checkpoint to resume from, None for a fresh run
    lr: float
    init: Path  # the resolved initial model folder


def start_training(
    cfg: TrainConfig,
    trainer: str,
    read_rows: Callable[[str], list[Any]],
    model: str,
    flag: str = "--policy.model",
) -> Start:
    """The phases every trainer opens with, in order: `--out` checked (`check_train_out`); libraries set up;
    every row validated before any model loads; the output folder prepared (fresh, or the checkpoint to
    resume from); the learning rate and the start model (`model`, given as `flag`) resolved; the resolved
    config written."""
    check_train_out(trainer, cfg)
    setup_libraries()
    rows = read_rows(cfg.data)
    resume_from = prepare_out_dir(cfg)
    lr = resolved_lr(cfg, trainer)
    init = resolve_init(model, flag)
    write_config(cfg.out, f"train {trainer}", cfg, lr, init)
    return Start(rows, resume_from, lr, init)
