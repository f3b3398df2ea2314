"""`ragteam eval-retrieval`: recall@k of supporting paragraphs for bm25, dense and hybrid.

    ragteam eval-retrieval --data hotpotqa-dev-500.jsonl --k 10 --json

The corpus (`--corpus`, spelled as every command spells it) is by default `pooled`: the paragraphs pooled from
every record of the file (deduplicated by title+text), so a question's supporting paragraphs compete with all
the other questions' paragraphs; `pooled+FILE` joins a passage file (a Wikipedia sample), `pooled:DIR` pools a
folder. Its indexes are built once and cached under $RAGTEAM_HOME/indexes. `recall@k`: a question counts only when ALL its supporting
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
        corpus: str = Field(
            "pooled",
            description="the corpus searched: pooled (every paragraph of --data), pooled+FILE[+FILE] (joined "
            "with passage or benchmark files), pooled:DIR (every benchmark and corpus file of a folder); "
            "passages keep content ids, the ids the supporting paragraphs are named by",
        )
        json: bool = Field(False, description="print only the JSON object of recalls")


def run(cfg: Config) -> int:
    from ragteam.assemble.corpus import open_corpus, parse_corpus
    from ragteam.data.questions import read_questions
    from ragteam.retrieval.config import RetrieverConfig
    from ragteam.retrieval.evaluate import evaluate_retriever
    from ragteam.retrieval.factory import KIND_NEEDS, retriever_from_index

    qset = read_questions(cfg.data, cfg.format, skip_bad=cfg.skip_bad)
    if qset.skipped:
        print(f"{cfg.data}: skipped {qset.skipped} malformed records", file=sys.stderr)
    if not any(q.supporting_ids for q in qset.questions):
        raise ValueError(
            f"{cfg.data}: no {qset.format} record names supporting paragraphs; nothing to evaluate"
        )
    spec = parse_corpus(cfg.corpus)
    if spec.kind not in ("pooled", "folder"):
        raise ValueError(
            f"--corpus {cfg.corpus}: eval-retrieval matches supporting paragraphs by their content ids, which "
            "only pooled corpora keep (pooled, pooled+FILE, pooled:DIR); `ragteam eval --corpus` measures any "
            "corpus by content in its report"
        )
    needed = sorted({part for kind in cfg.kinds for part in KIND_NEEDS[kind]})
    corpus = open_corpus(spec, cfg.data, qset.format, qset.questions, needed)
    folder = corpus.index
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
        f"({n['skipped']} without), {corpus.name}: {len(folder)} passages, index {folder.path}",
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
