"""`ragteam train sft`: supervised fine-tuning on SFT rows, loss on the assistant's reply (see cli/train.py)."""

from __future__ import annotations

from pydantic import Field

from ragteam.cli.train import OVERWRITE_HELP, common, run_trainer
from ragteam.train.common import TrainConfig
from ragteam.train.sft import SFTOptions


class Config(TrainConfig):
    """Fine-tune the policy on target replies (sft.jsonl rows; formats in `ragteam.train.data`)."""

    sft: SFTOptions = Field(default_factory=SFTOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def run(cfg: Config) -> int:
    from ragteam.train.sft import train_sft

    return run_trainer("sft", cfg, lambda: train_sft(common(cfg), cfg.sft))
