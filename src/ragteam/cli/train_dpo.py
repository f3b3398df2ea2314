"""`ragteam train dpo`: direct preference optimization on ranked process pairs (see cli/train.py)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ragteam.cli.train import TrainerCommand, run, train
from ragteam.train.dpo import DPOOptions

__all__ = ["Config", "run", "train"]


class Config(TrainerCommand):
    """Prefer chosen over rejected replies (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    KIND: ClassVar[str] = "dpo"
    TRAINER: ClassVar[str] = "ragteam.train.dpo:train_dpo"

    dpo: DPOOptions = Field(default_factory=DPOOptions)
