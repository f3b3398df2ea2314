"""`ragteam train dpo`: direct preference optimization on ranked process pairs (see cli/train.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, run_trainer, trained
from ragteam.train.common import TrainConfig
from ragteam.train.dpo import DPOOptions


class Config(TrainConfig):
    """Prefer chosen over rejected replies (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    dpo: DPOOptions = Field(default_factory=DPOOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def train(cfg: Config) -> Path:
    """What the command does, for Python (`ragteam.train_dpo`): --out checked, the model trained; returns the
    output folder."""
    from ragteam.train.dpo import train_dpo

    return trained("dpo", cfg, train_dpo, cfg.dpo)


def run(cfg: Config) -> int:
    return run_trainer("dpo", cfg, lambda: train(cfg))
