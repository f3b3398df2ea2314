"""`ragteam train critic`: a process reward model scoring (state, reply), Bradley-Terry on pairs."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, run_trainer, trained
from ragteam.train.common import TrainConfig
from ragteam.train.critic import CriticOptions


class Config(TrainConfig):
    """Train a critic on ranked pairs (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    critic: CriticOptions = Field(default_factory=CriticOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def train(cfg: Config) -> Path:
    """What the command does, for Python (`ragteam.train_critic`): --out checked, the model trained; returns the
    output folder."""
    from ragteam.train.critic import train_critic

    return trained("critic", cfg, train_critic, cfg.critic)


def run(cfg: Config) -> int:
    return run_trainer("critic", cfg, lambda: train(cfg))
