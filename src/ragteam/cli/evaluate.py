"""`ragteam eval`: evaluate a workflow on a benchmark file (traces, metrics, statistics, plots; resumable).

    ragteam eval --workflow standard-rag --data hotpotqa-dev-500.jsonl --out runs/srag --limit 50

Writes into --out: episodes.jsonl (one episode tree per question, streamed), metrics.json, predictions.jsonl,
report.md, strategy.png / depth.png (Fig. 6 count) / policy-acts.png and config.yaml (and skipped.jsonl: the lines of records skipped with
--skip-bad). Run the same command again to resume an interrupted eval.

The corpus: `--corpus distractor` (default: the --data file's own paragraphs, gold included), `--corpus pooled`
(every benchmark and corpus file beside --data, deduplicated; built once under $RAGTEAM_HOME) or
`--corpus FILE` (any {id, title, text} / FlashRAG passage file). The report states the corpus, its size,
whether it holds the questions' gold paragraphs and their recall@k.
"""

from __future__ import annotations

import sys

from ragteam.eval.run import EvalConfig, run_eval

Config = EvalConfig
"""Evaluate one workflow on a benchmark file: EM, F1, cover-EM (MC accuracy, judge) and statistics (the
library's config, `ragteam.EvalConfig`)."""


def run(cfg: EvalConfig) -> int:
    from ragteam.outdir import run_lock

    try:
        with run_lock(cfg.out, "eval"):  # one writer per run folder (ragteam.outdir)
            run_eval(cfg)
    except KeyboardInterrupt:
        print(
            f"\nragteam eval: interrupted; finished episodes are in {cfg.out}/episodes.jsonl; "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    return 0
