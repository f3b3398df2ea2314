"""`ragteam eval-retrieval`: recall@k of supporting paragraphs for bm25, dense and hybrid.

    ragteam eval-retrieval --data hotpotqa-dev-500.jsonl --k 10 --json

The corpus is the paragraphs pooled from every record of the file (deduplicated by title+text), so a
question's supporting paragraphs compete with all the other questions' paragraphs; its indexes are built
once and cached under $RAGTEAM_HOME/indexes. `recall@k`: a question counts only when ALL its supporting
paragraphs are in the top k; `support_recall@k`: the fraction of supporting paragraphs found. `--json` prints
`{"bm25": {"recall@10": ..., "support_recall@10": ...}, "dense": {...}, "hybrid": {...}}`.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Literal

from pydantic import Field

from ragteam.config import Config as BaseConfig

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"')

    class Config(BaseConfig):
        """Settings of `ragteam eval-retrieval`."""

        data: str = Field(
            ...,
            description="benchmark file whose records carry paragraphs "
            "(HotpotQA, 2WikiMultihopQA, MuSiQue, PopQA)",
        )
        format: str | None = Field(None, description="reader format of --data (default: detected)")
        skip_bad: bool = Field(False, description="skip (and count) malformed records instead of stopping")
        k: int = Field(10, ge=1, le=1000, description="cut-off of the ranking")
        kinds: list[Literal["bm25", "dense", "hybrid"]] = Field(
            default_factory=lambda: ["bm25", "dense", "hybrid"], description="retrievers to evaluate"
        )
        fusion: Literal["convex", "rrf"] = Field("convex", description="hybrid fusion method")
        dense_weight: float = Field(0.4, ge=0.0, le=1.0, description="hybrid: weight of the dense list")
        depth: int = Field(100, ge=1, description="hybrid: candidates per retriever before fusion")
        json: bool = Field(False, description="print only the JSON object of recalls")


def run(cfg: Config) -> int:
    from ragteam.data.questions import read_questions
    from ragteam.retrieval.config import RetrieverConfig
    from ragteam.retrieval.evaluate import evaluate_retriever
    from ragteam.retrieval.factory import KIND_NEEDS, dataset_index, retriever_from_index

    qset = read_questions(cfg.data, cfg.format, skip_bad=cfg.skip_bad)
    if qset.skipped:
        print(f"{cfg.data}: skipped {qset.skipped} malformed records", file=sys.stderr)
    if not any(q.supporting_ids for q in qset.questions):
        raise ValueError(
            f"{cfg.data}: no {qset.format} record names supporting paragraphs; nothing to evaluate"
        )
    needed = sorted({part for kind in cfg.kinds for part in KIND_NEEDS[kind]})
    folder = dataset_index(cfg.data, qset.format, kinds=needed, questions=qset.questions)
    report: dict[str, dict[str, float]] = {}
    details: dict[str, dict] = {}
    for kind in cfg.kinds:
        rcfg = RetrieverConfig(kind=kind, fusion=cfg.fusion, dense_weight=cfg.dense_weight, depth=cfg.depth)
        scores = evaluate_retriever(retriever_from_index(folder, rcfg), qset.questions, cfg.k)
        report[kind] = {key: scores[key] for key in (f"recall@{cfg.k}", f"support_recall@{cfg.k}")}
        details[kind] = scores
    n = next(iter(details.values()))
    print(
        f"{cfg.data} ({qset.format}): {n['questions']} questions with supporting paragraphs "
        f"({n['skipped']} without), pooled corpus of {len(folder)} passages, index {folder.path}",
        file=sys.stderr,
    )
    if cfg.json:
        print(json.dumps(report))
        return 0
    print(
        f"{'retriever':<10} {'recall@' + str(cfg.k):>12} {'support_recall@' + str(cfg.k):>20} {'seconds':>9}"
    )
    for kind, scores in details.items():
        print(
            f"{kind:<10} {scores[f'recall@{cfg.k}']:>12.4f} {scores[f'support_recall@{cfg.k}']:>20.4f} "
            f"{scores['seconds']:>9.2f}"
        )
    return 0
