"""`ragteam train sft`: supervised fine-tuning on SFT rows, loss on the assistant's reply (see cli/train.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, run_trainer, trained
from ragteam.train.common import TrainConfig
from ragteam.train.sft import SFTOptions


class Config(TrainConfig):
    """Fine-tune the policy on target replies (sft.jsonl rows; formats in `ragteam.train.data`)."""

    preset: Literal["c3po", "rag-gym"] | None = Field(
        None,
        description="a paper's SFT values (docs/training.md): c3po (Table 6: lr 4e-5, 3 epochs, cosine, "
        "warm-up ratio 0.03, 4096 tokens) or rag-gym (E.2: LoRA r 256, alpha 512 on the attention "
        "projections); flags and --config override it",
    )
    sft: SFTOptions = Field(default_factory=SFTOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def train(cfg: Config) -> Path:
    """What the command does, for Python (`ragteam.train_sft`): the preset applied, --out checked, the
    model trained; returns the output folder."""
    from ragteam.train.sft import train_sft, with_preset

    cfg = with_preset(cfg)
    return trained("sft", cfg, train_sft, cfg.sft)


def run(cfg: Config) -> int:
    from ragteam.train.sft import with_preset

    cfg = with_preset(cfg)  # the message names --lora as the preset sets it (applying it again is a no-op)
    return run_trainer("sft", cfg, lambda: train(cfg))
