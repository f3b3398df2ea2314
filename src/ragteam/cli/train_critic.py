"""`ragteam train critic`: a process reward model scoring (state, reply), Bradley-Terry on pairs."""

from __future__ import annotations

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, common, run_trainer
from ragteam.train.common import TrainConfig
from ragteam.train.critic import CriticOptions


class Config(TrainConfig):
    """Train a critic on ranked pairs (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    critic: CriticOptions = Field(default_factory=CriticOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def run(cfg: Config) -> int:
    from ragteam.train.critic import train_critic

    return run_trainer("critic", cfg, lambda: train_critic(common(cfg), cfg.critic))
