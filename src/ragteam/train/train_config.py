"""The settings the TRL-based trainers (SFT, DPO, PRM) share, and the LoRA settings PPO shares with them:
data, output, LoRA, schedule, checkpoints, logging; each trainer's default learning rate; the model a
trainer starts from, spelled as every command spells a model (`--policy.model`, `--prm.model`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ragteam.config import Config
from ragteam.train.report import REPORT_TO_HELP, ReportTo

__all__ = [
    "DEFAULT_LR",
    "LLAMA_LORA_TARGETS",
    "OVERWRITE_HELP",
    "LoraFields",
    "StartModel",
    "TrainConfig",
    "TrainInputs",
    "lora_config",
    "resolved_lr",
]


LLAMA_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraFields(Config):
    """LoRA settings, one set for every trainer (`--lora ...` on sft/dpo/prm, `--ppo.lora ...` on PPO)."""

    lora: bool = Field(False, description="train a LoRA adapter instead of every weight")
    lora_r: int = Field(16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r)")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA branch")
    lora_targets: list[str] = Field(
        default_factory=lambda: list(LLAMA_LORA_TARGETS),
        description="module names that get adapters: every attention and MLP projection of a "
        "llama-architecture model",
    )


def lora_config(cfg: LoraFields, task_type: str):
    """peft's LoraConfig from the config's lora_* fields (`task_type`: CAUSAL_LM or SEQ_CLS)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type=task_type,
    )


class TrainInputs(Config):
    """What a trainer reads and writes (first in `--help`)."""

    data: str = Field(description="training rows: sft.jsonl (train sft) or pairs.jsonl (train dpo|prm)")
    out: str = Field(description="output folder: final model, checkpoints, log.jsonl, config.yaml")


START_MODEL_HELP = "the model to start from: 'smollm2' (packaged), 'tiny' (test model) or a model folder"


class StartModel(Config):
    """The policy a TRL trainer starts from (`--policy.model`): ModelConfig's field name, so the weights a
    command trains are named as those it runs (`eval --policy.model runs/sft`)."""

    model: str = Field("smollm2", description=START_MODEL_HELP)


OVERWRITE_HELP = (
    "write into a non-empty --out that holds files this command did not write (another command's run, "
    "someone's files); a folder holding this trainer's own checkpoints or model still needs --resume"
)


DEFAULT_LR: dict[str, dict[str, float]] = {
    "sft": {"full": 2e-5, "lora": 2e-4},
    "dpo": {"full": 1e-6, "lora": 1e-5},
    "prm": {"full": 1e-5, "lora": 1e-4},
}
"""Each trainer's peak learning rate when `--lr` is not given, for full fine-tuning and for LoRA: the one
table the trainers and `--lr`'s help read (PPO's are its own fields, `--ppo.lr` / `--ppo.value-lr`)."""


def _lr(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


_LR_HELP = ", ".join(f"{t} {_lr(v['full'])} (LoRA {_lr(v['lora'])})" for t, v in DEFAULT_LR.items())


class TrainConfig(LoraFields, TrainInputs):  # fields in reverse base order: inputs, LoRA, then these
    """Settings every TRL trainer shares: data, output, LoRA, schedule, checkpoints, logging (the model it
    starts from and its own options are the trainer's config's: `SFTConfig`, `DPOConfig`, `PRMTrainConfig`)."""

    max_steps: int | None = Field(
        None, ge=1, description="stop after this many optimizer steps (overrides --epochs)"
    )
    epochs: float = Field(1.0, gt=0, description="passes over the data")
    lr: float | None = Field(
        None,
        gt=0,
        description="peak learning rate (after warm-up, then --lr-schedule); default per trainer: "
        + _LR_HELP,
    )
    lr_schedule: Literal["linear", "cosine", "constant"] = Field(
        "linear",
        description="learning rate after warm-up: linear (decay to 0 at the last step), cosine (half a cosine "
        "to 0; C-3PO Table 6) or constant",
    )
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps (or --warmup-ratio, not both)")
    warmup_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="linear warm-up over this share of the optimizer steps, rounded up (C-3PO Table 6: 0.03)",
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    batch_size: int = Field(4, ge=1, description="rows (sft) or pairs (dpo, prm) per forward")
    grad_accum: int = Field(1, ge=1, description="forwards per optimizer step")
    max_length: int | None = Field(
        None,
        ge=16,
        description="most tokens of a training row (prompt + reply); longer rows are dropped, with a warning "
        "past a tenth of them (default: the longest row's, so none is dropped; lower it to bound memory)",
    )
    seed: int = Field(
        0, description="seed of initialisation (LoRA, the PRM's score head), shuffling and dropout"
    )
    save_steps: int = Field(100, ge=1, description="write a checkpoint every N optimizer steps")
    save_total_limit: int | None = Field(2, ge=1, description="checkpoints kept (oldest deleted; none: all)")
    resume: bool = Field(False, description="continue from the newest checkpoint in --out")
    log_steps: int = Field(1, ge=1, description="log loss and metrics every N optimizer steps")
    tensorboard: bool = Field(True, description="write TensorBoard events to OUT/runs (when installed)")
    report_to: ReportTo = Field("none", description=REPORT_TO_HELP)
    progress: bool = Field(True, description="show progress bars")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto picks cuda when available")
    bf16: bool = Field(False, description="bf16 mixed precision (GPUs that support it)")
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, ~30% slower"
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads (default: torch's choice)")

    @model_validator(mode="after")
    def _one_warmup(self) -> TrainConfig:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} and warmup_ratio={self.warmup_ratio}: give one of the two"
            )
        return self


def resolved_lr(cfg: TrainConfig, trainer: str) -> float:
    """`--lr`, or the trainer's default for full fine-tuning / LoRA (`DEFAULT_LR`)."""
    return cfg.lr if cfg.lr is not None else DEFAULT_LR[trainer]["lora" if cfg.lora else "full"]
