"""`ragteam train sft`: supervised fine-tuning on SFT rows, loss on the assistant's reply (see cli/train.py)."""

from __future__ import annotations

from ragteam.cli.train import RENAMED, policy_use, run_trainer
from ragteam.train.sft import SFTConfig, train_sft

__all__ = ["RENAMED", "Config", "run"]

Config = SFTConfig


def run(cfg: SFTConfig) -> int:
    return run_trainer("sft", cfg, lambda: train_sft(cfg), policy_use(cfg))
