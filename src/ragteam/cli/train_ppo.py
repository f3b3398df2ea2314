"""`ragteam train ppo`: multi-agent PPO of the policy over a workflow's roles, from a recipe.

    ragteam train ppo --recipe mmoa --data hotpotqa.jsonl --limit 400 --policy.model runs/sft --out runs/ppo \
        [--iterations 20] [--questions-per-iteration 8] [--eval-data F --eval-offset 400 --eval-limit 100]
    ragteam train ppo ... --resume          # continue after the newest checkpoint

Recipes: c3po (tree rollouts, Monte Carlo credit), mmoa (shared F1 + penalties, Table 2 settings), gym
(Re2Search actor), c3po-no-tree (the ablation). Each recipe runs its paper's profile (`--profile paper`:
lengths, candidates, top-k, fusion, last step) and retrieves from the pooled corpus (`--corpus pooled`); any
setting of the recipe or the profile can be overridden by a flag, and OUT/config.yaml records every value.
The phases and the output folder are described in `ragteam.train.ppo`.
"""

from __future__ import annotations

import sys

from ragteam.cli.train import RENAMED, train_lock
from ragteam.train.ppo_config import PPOConfig

__all__ = ["RENAMED", "Config", "run"]

Config = PPOConfig
"""Multi-agent PPO on episode trees (one policy, every role, a centralized critic): the library's config,
resolved from flags by `ragteam.config.resolve` (defaults < profile < recipe < --config < flags)."""


def run(cfg: PPOConfig) -> int:
    """`ragteam.train.ppo.train_ppo` (--out checked, the iterations run) under the run lock, with messages."""
    from ragteam.train.ppo import train_ppo

    try:
        with train_lock("ppo", cfg):
            out = train_ppo(cfg)
    except KeyboardInterrupt:
        print(
            f"\nragteam train ppo: interrupted; continue with the same command and --resume "
            f"(checkpoints in {cfg.out})",
            file=sys.stderr,
        )
        return 130
    print(f"ragteam train ppo: saved to {out}; use it with --policy.model {out}", file=sys.stderr)
    return 0
