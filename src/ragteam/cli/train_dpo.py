"""`ragteam train dpo`: direct preference optimization on ranked process pairs (see cli/train.py)."""

from __future__ import annotations

from ragteam.cli.train import RENAMED, policy_use, run_trainer
from ragteam.train.dpo import DPOConfig, train_dpo

__all__ = ["RENAMED", "Config", "run"]

Config = DPOConfig


def run(cfg: DPOConfig) -> int:
    return run_trainer("dpo", cfg, lambda: train_dpo(cfg), policy_use(cfg))
