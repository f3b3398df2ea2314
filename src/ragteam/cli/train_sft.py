"""`ragteam train sft`: supervised fine-tuning on SFT rows, loss on the assistant's reply (see cli/train.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, run_trainer, trained
from ragteam.precedence import Layer
from ragteam.train.sft import SFTOptions, preset_layers
from ragteam.train.train_config import TrainConfig


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

    @classmethod
    def layers(cls, given: dict[str, Any]) -> list[Layer]:
        """The preset's values under the config file and flags (`ragteam.train.sft.preset_layers`)."""
        return preset_layers(given)


def train(cfg: Config) -> Path:
    """What the command does, for Python (`ragteam.train_sft`): --out checked, the model trained; returns
    the output folder. The preset is part of `cfg` already (resolved when it was built)."""
    from ragteam.train.sft import train_sft

    return trained("sft", cfg, train_sft, cfg.sft)


def run(cfg: Config) -> int:
    return run_trainer("sft", cfg, lambda: train(cfg))
