"""`ragteam train dpo`: direct preference optimization on ranked process pairs (see cli/train.py)."""

from __future__ import annotations

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, common, run_trainer
from ragteam.train.common import TrainConfig
from ragteam.train.dpo import DPOOptions


class Config(TrainConfig):
    """Prefer chosen over rejected replies (pairs.jsonl rows; formats in `ragteam.train.data`)."""

    dpo: DPOOptions = Field(default_factory=DPOOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def run(cfg: Config) -> int:
    from ragteam.train.dpo import train_dpo

    return run_trainer("dpo", cfg, lambda: train_dpo(common(cfg), cfg.dpo))
