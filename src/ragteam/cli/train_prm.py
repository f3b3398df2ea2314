"""`ragteam train prm`: a process reward model scoring (state, reply), Bradley-Terry on pairs (see cli/train.py)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ragteam.cli.train import TrainerCommand, run, train
from ragteam.train.prm import PRMOptions

__all__ = ["Config", "run", "train"]


class Config(TrainerCommand):
    """Train a process reward model on ranked pairs (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    KIND: ClassVar[str] = "prm"
    TRAINER: ClassVar[str] = "ragteam.train.prm:train_prm"

    prm: PRMOptions = Field(default_factory=PRMOptions)
