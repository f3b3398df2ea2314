"""`ragteam index`: build an index folder from a corpus file or from a dataset's paragraphs.

    ragteam index --corpus wiki18-sample-1000.jsonl --out indexes/wiki18
    ragteam index --data hotpotqa-dev-500.jsonl --out indexes/hotpot --kinds bm25

The folder holds the passages (docs.jsonl), a tantivy BM25 index and/or all-MiniLM-L6-v2 embeddings, and
a manifest; `ragteam search` and `ragteam serve retriever` open it. A progress bar runs while embedding.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import Field

from ragteam.config import Config as BaseConfig


class Config(BaseConfig):
    """Settings of `ragteam index`."""

    corpus: str | None = Field(
        None, description="passage file: JSONL {id, title, text} or FlashRAG {id, contents} (or .gz, DPR TSV)"
    )
    data: str | None = Field(
        None,
        description="a benchmark file whose records carry paragraphs (HotpotQA, 2Wiki, MuSiQue, PopQA): "
        "its paragraphs are pooled (deduplicated by title+text) into the corpus",
    )
    format: str | None = Field(None, description="reader format of --data (default: detected)")
    out: str = Field(
        ..., description="index folder to write (created; a folder of the same corpus gains kinds)"
    )
    kinds: list[Literal["bm25", "dense"]] = Field(
        default_factory=lambda: ["bm25", "dense"], description="what to build: bm25, dense or both"
    )
    batch_size: int = Field(64, ge=1, description="passages per embedding batch")
    overwrite: bool = Field(False, description="replace a folder that holds an index of another corpus")
    skip_bad: bool = Field(
        False, description="skip (and count) malformed records of --corpus / --data instead of stopping"
    )
    progress: bool = Field(True, description="show a progress bar while embedding")


def run(cfg: Config) -> int:
    from ragteam.retrieval.index import build_index

    if bool(cfg.corpus) == bool(cfg.data):
        raise ValueError(
            "give exactly one of --corpus FILE (passages) or --data FILE (a dataset's paragraphs)"
        )
    if cfg.corpus:
        from ragteam.data.corpus import read_corpus

        errors: list[str] = []
        docs = read_corpus(cfg.corpus, skip_bad=cfg.skip_bad, errors=errors)
        source = cfg.corpus
        _report_skipped(cfg.corpus, len(errors), errors)
    else:
        from ragteam.data.corpus import pool_corpus
        from ragteam.data.questions import read_questions

        qset = read_questions(cfg.data, cfg.format, skip_bad=cfg.skip_bad)
        _report_skipped(cfg.data, qset.skipped, qset.errors)
        docs = pool_corpus(qset.questions)
        if not docs:
            raise ValueError(f"{cfg.data}: its {qset.format} records carry no paragraphs to index")
        source = f"pooled from {cfg.data} ({qset.format}, {len(qset)} questions)"
    print(f"indexing {len(docs)} passages ({', '.join(cfg.kinds)}) into {cfg.out}", file=sys.stderr)
    folder = build_index(
        docs,
        cfg.out,
        kinds=cfg.kinds,
        overwrite=cfg.overwrite,
        progress=cfg.progress,
        batch_size=cfg.batch_size,
        source=source,
    )
    took = ", ".join(f"{k} {s:.1f} s" for k, s in folder.manifest.get("build_seconds", {}).items())
    print(f"{folder.path}: {len(folder)} passages, kinds {', '.join(folder.kinds)} ({took})")
    return 0


def _report_skipped(path: str, skipped: int, errors: list[str]) -> None:
    """With --skip-bad: how many records of `path` were skipped, and the first few reasons, on stderr."""
    if skipped:
        print(f"{path}: skipped {skipped} malformed records (--skip-bad):", file=sys.stderr)
        for message in errors[:5]:
            print(f"  {message}", file=sys.stderr)
