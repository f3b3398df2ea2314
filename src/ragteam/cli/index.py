"""`ragteam index`: build an index folder from a corpus file or from a dataset's paragraphs.

    ragteam index --corpus wiki18-sample-1000.jsonl --out indexes/wiki18
    ragteam index --data hotpotqa-dev-500.jsonl --out indexes/hotpot --kinds bm25
    ragteam index --corpus psgs_w100.tsv --out indexes/wiki --dense.index ivf --dense.dtype float16
    ragteam index --out indexes/wiki --kinds dense --dense.part 3/8 --dense.device cuda   # one GPU's share
    ragteam index --corpus psgs.jsonl --out indexes/contriever --dense.model DIR --dense.pooling mean \
        --no-dense.normalize                                  # another encoder (docs/byo.md): Contriever

The folder holds the passages (docs.jsonl), a tantivy BM25 index and/or dense embeddings in shards
(all-MiniLM-L6-v2, or the `--dense.model` folder with its pooling, recorded for the queries), optionally a
faiss IVF or HNSW index, and a manifest; `ragteam search` and `ragteam serve retriever`
open it. A corpus file is streamed (memory stays bounded for millions of passages; docs/scaling.md). Without
--corpus or --data, the kinds are added to the existing folder --out (its passages are already there).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

from ragteam.config import Config as BaseConfig
from ragteam.retrieval.build_config import BM25Build, DenseBuild

# What an index build leaves in its folder before the manifest (a build that stopped early); see outdir.py
INDEX_OWN = (".staging", "docs.jsonl", "docs.offsets.npy", "bm25", "dense")


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
        ...,
        description="index folder to write (created; a folder of the same corpus gains kinds; without "
        "--corpus/--data, the existing folder gains them)",
    )
    kinds: list[Literal["bm25", "dense"]] = Field(
        default_factory=lambda: ["bm25", "dense"], description="what to build: bm25, dense or both"
    )
    batch_size: int = Field(64, ge=1, description="passages per embedding batch")
    overwrite: bool = Field(
        False,
        description="replace a folder that holds an index of another corpus, or write into a non-empty "
        "folder that holds no index (its other files are kept)",
    )
    skip_bad: bool = Field(
        False,
        description="skip (and count) malformed records and repeated ids of --corpus / --data instead of "
        "stopping",
    )
    progress: bool = Field(True, description="show progress bars while indexing and embedding")
    bm25: BM25Build = Field(default_factory=BM25Build, description="BM25 build settings")
    dense: DenseBuild = Field(default_factory=DenseBuild, description="dense build settings")


def run(cfg: Config) -> int:
    from ragteam.retrieval.index import build_index

    if cfg.corpus and cfg.data:
        raise ValueError(
            "give exactly one of --corpus FILE (passages) or --data FILE (a dataset's paragraphs)"
        )
    if cfg.corpus or cfg.data:  # a folder holding someone else's files is not an index to write into
        from ragteam.outdir import check_out_dir
        from ragteam.retrieval.index import MANIFEST

        check_out_dir(cfg.out, "index", cfg.overwrite, own=INDEX_OWN, marker=MANIFEST)
    errors: list[str] = []
    if cfg.corpus:
        from ragteam.data.corpus import iter_corpus

        docs = iter_corpus(cfg.corpus, errors if cfg.skip_bad else None)  # (line, Doc) pairs, streamed
        source = cfg.corpus
        print(f"indexing {cfg.corpus} ({', '.join(cfg.kinds)}) into {cfg.out}", file=sys.stderr)
    elif cfg.data:
        from ragteam.data.corpus import pool_corpus
        from ragteam.data.questions import read_questions

        qset = read_questions(cfg.data, cfg.format, skip_bad=cfg.skip_bad)
        _report_skipped(cfg.data, qset.skipped, qset.errors)
        docs = pool_corpus(qset.questions)
        if not docs:
            raise ValueError(f"{cfg.data}: its {qset.format} records carry no paragraphs to index")
        source = f"pooled from {cfg.data} ({qset.format}, {len(qset)} questions)"
        print(f"indexing {len(docs)} passages ({', '.join(cfg.kinds)}) into {cfg.out}", file=sys.stderr)
    else:
        from ragteam.retrieval.index import MANIFEST

        if not (Path(cfg.out) / MANIFEST).is_file():
            raise ValueError(
                "give exactly one of --corpus FILE (passages) or --data FILE (a dataset's paragraphs), "
                f"or an existing index folder as --out to add kinds to ({cfg.out} is none)"
            )
        docs, source = None, None
        print(f"adding {', '.join(cfg.kinds)} to {cfg.out}", file=sys.stderr)
    folder = build_index(
        docs,
        cfg.out,
        kinds=cfg.kinds,
        overwrite=cfg.overwrite,
        progress=cfg.progress,
        batch_size=cfg.batch_size,
        source=source,
        dense=cfg.dense,
        bm25=cfg.bm25,
        skip_repeats=cfg.skip_bad,
        errors=errors,
    )
    if cfg.corpus:
        _report_skipped(cfg.corpus, len(errors), errors)
    took = ", ".join(f"{k} {s:.1f} s" for k, s in folder.manifest.get("build_seconds", {}).items())
    print(f"{folder.path}: {len(folder)} passages, kinds {', '.join(folder.kinds) or 'none'} ({took})")
    if cfg.dense.part and "dense" in cfg.kinds and "dense" not in folder.kinds:
        print(
            f"dense part {cfg.dense.part} embedded; other parts are still missing (the last part to finish "
            f"completes the index, or run `ragteam index --out {cfg.out} --kinds dense` once they are done)"
        )
    return 0


def _report_skipped(path: str, skipped: int, errors: list[str]) -> None:
    """With --skip-bad: how many records of `path` were skipped, and the first few reasons, on stderr."""
    if skipped:
        print(f"{path}: skipped {skipped} malformed records (--skip-bad):", file=sys.stderr)
        for message in errors[:5]:
            print(f"  {message}", file=sys.stderr)
