"""`ragteam train sft|dpo|critic`: train the team's policy (SFT, DPO) or its critic on JSONL rows, on TRL.

    ragteam train sft    --data sft.jsonl   --out runs/sft    [--init smollm2] [--lora] [--sft.packing]
    ragteam train dpo    --data pairs.jsonl --out runs/dpo    --init runs/sft [--dpo.beta 0.1]
    ragteam train critic --data pairs.jsonl --out runs/critic [--init smollm2]
    ragteam train sft    --data sft.jsonl   --out runs/sft    --max-steps 400 --resume   # continue a run

Schedule: --epochs E or --max-steps N, --lr, --batch-size, --grad-accum, --max-length, --seed; checkpoints
every --save-steps into OUT/checkpoint-N. OUT also gets log.jsonl (every logged step), runs/ (TensorBoard)
and config.yaml. Use the result with `--policy.model OUT` (full fine-tune), `--policy.model INIT
--policy.lora OUT` (--lora), or `--critic.model OUT`. The row formats are in `ragteam.train.data`.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import Field

from ragteam.train.common import TrainConfig
from ragteam.train.critic import CriticOptions
from ragteam.train.dpo import DPOOptions
from ragteam.train.sft import SFTOptions


class Config(TrainConfig):
    """Train the policy (sft, dpo) or a critic on JSONL rows; see `ragteam.train.data` for the formats."""

    kind: Literal["sft", "dpo", "critic"] = Field(
        description="sft: learn target replies; dpo: prefer chosen over rejected; critic: a process reward "
        "model scoring (state, reply)",
        json_schema_extra={"positional": True},
    )
    sft: SFTOptions = Field(default_factory=SFTOptions)
    dpo: DPOOptions = Field(default_factory=DPOOptions)
    critic: CriticOptions = Field(default_factory=CriticOptions)


def run(cfg: Config) -> int:
    common = TrainConfig.model_validate(cfg.model_dump(exclude={"kind", "sft", "dpo", "critic"}))
    try:
        if cfg.kind == "sft":
            from ragteam.train.sft import train_sft

            out = train_sft(common, cfg.sft)
        elif cfg.kind == "dpo":
            from ragteam.train.dpo import train_dpo

            out = train_dpo(common, cfg.dpo)
        else:
            from ragteam.train.critic import train_critic

            out = train_critic(common, cfg.critic)
    except KeyboardInterrupt:
        print(
            f"\nragteam train: interrupted; continue from the newest checkpoint with the same command "
            f"and --resume (checkpoints in {cfg.out})",
            file=sys.stderr,
        )
        return 130
    use = {
        "sft": f"--policy.model {out}" if not cfg.lora else f"--policy.model {cfg.init} --policy.lora {out}",
        "dpo": f"--policy.model {out}" if not cfg.lora else f"--policy.model {cfg.init} --policy.lora {out}",
        "critic": f"--critic.model {out}",
    }[cfg.kind]
    print(f"ragteam train {cfg.kind}: saved to {out}; use it with {use}", file=sys.stderr)
    return 0
