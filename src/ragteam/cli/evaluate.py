"""`ragteam eval`: evaluate a workflow on a benchmark file (traces, metrics, statistics, plots; resumable).

    ragteam eval --workflow standard-rag --data hotpotqa-dev-500.jsonl --out runs/srag --limit 50

Writes into --out: episodes.jsonl (one episode tree per question, streamed), metrics.json, predictions.jsonl,
report.md, strategy.png / depth.png and config.yaml. Run the same command again to resume an interrupted eval.
"""

from __future__ import annotations

import sys

from ragteam.eval.run import EvalConfig, run_eval


class Config(EvalConfig):
    """Evaluate one workflow on a benchmark file: EM, F1, cover-EM (MC accuracy, judge) and statistics."""


def run(cfg: Config) -> int:
    try:
        run_eval(cfg)
    except KeyboardInterrupt:
        print(
            f"\nragteam eval: interrupted; finished episodes are in {cfg.out}/episodes.jsonl; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    return 0
