"""`ragteam collect sft|process`: roll out a workflow with a teacher (the policy sampled, `--policy.*`) and write
training rows from the trees.

    ragteam collect sft --workflow c3po --data hotpotqa-train.jsonl --out runs/c3po-sft --limit 500
        [--policy.model smollm2] [--tree c3po|samples] [--samples 4] [--accept cover_em|em|f1>=0.5|judge]
    ragteam collect sft --workflow mmoa --data hotpotqa-train.jsonl --out runs/mmoa-sft [--samples 4]
        [--candidates 10] [--min-overlap 1]
    ragteam collect process --workflow gym:react --data hotpotqa-train.jsonl --out runs/react-pairs
        [--candidates 4] [--ranker llm|rollout|prm] [--accept cover_em]

Writes into --out: sft.jsonl (SFT rows; for `process`, the chosen actions of correct trajectories),
pairs.jsonl (`process`: chosen vs lower-ranked candidates), episodes.jsonl (the trees; run the same
command again to resume), summary.json and config.yaml. Train on them with `ragteam train sft --data
OUT/sft.jsonl` or `ragteam train dpo|prm --data OUT/pairs.jsonl`.
"""

from __future__ import annotations

import sys

from ragteam.collect.config import CollectConfig

Config = CollectConfig
RENAMED = {"--teacher.": "--policy."}
"""The teacher's former group, named in the error (`ragteam.cli.main`): the teacher is the policy sampled."""
"""Collect training rows: SFT by rejection sampling / MMOA-RAG heuristics, or RAG-Gym process pairs (the
library's config, `ragteam.CollectConfig`)."""


def run(cfg: CollectConfig) -> int:
    from ragteam.collect.run import run_collect
    from ragteam.outdir import run_lock

    try:
        with run_lock(cfg.out, "collect"):  # one writer per run folder (ragteam.outdir)
            run_collect(cfg)
    except KeyboardInterrupt:
        print(
            f"\nragteam collect: interrupted; finished episodes are in {cfg.out}/episodes.jsonl; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    return 0
