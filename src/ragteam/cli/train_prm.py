"""`ragteam train prm`: a process reward model scoring (state, reply), Bradley-Terry on pairs (see cli/train.py)."""

from __future__ import annotations

from ragteam.cli.train import run_trainer
from ragteam.train.prm import PRMTrainConfig, train_prm

__all__ = ["RENAMED", "Config", "run"]

Config = PRMTrainConfig
RENAMED = {"--init": "--prm.model"}
"""The start model's former spelling, named in the error: a PRM starts from `--prm.model`."""


def run(cfg: PRMTrainConfig) -> int:
    return run_trainer("prm", cfg, lambda: train_prm(cfg), lambda out: f"--prm.model {out}")
