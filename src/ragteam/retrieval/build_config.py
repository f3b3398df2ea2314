"""Typed settings of an index build: how BM25 is written and how embeddings are stored and searched.

They are `ragteam index`'s nested flags (`--bm25.heap-mb`, `--dense.index ivf`, `--dense.nprobe`, ...) and
the keyword arguments `index.build_index` takes. The defaults suit the benchmark corpora (thousands of
passages: exact search, one shard); docs/scaling.md says what to pick for millions. The dense
encoder's pooling, normalisation and query prefix (`Pooling`, `Normalize`, `QueryPrefix`) are field types
shared with the retriever's settings (`retrieval.config.RetrieverConfig`), which import them from here.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator

from ragteam.config import Config

# The dense encoder's settings that an index records and its searches must repeat, declared once for both
# their uses: `DenseBuild` (`--dense.*`: a build embeds its passages with them and records them) and
# `RetrieverConfig` (`--retriever.*`: a search embeds its queries with them, and an index built from --data or
# --corpus is built with them). So each description says what None means in both: the value the index records
# when one is searched, else (a build, or an index too old to record it) what a sentence-transformers folder
# declares. A search whose values differ from the recorded ones is an error (`dense.check_settings`). They are
# field types, not a base class, so each config lists them where they belong among its own fields.
Pooling = Annotated[
    Literal["mean", "cls"] | None,
    Field(
        description="dense encoder: token states -> one vector: mean over the tokens (Contriever) or cls, the "
        "first token (BGE); none: the one the index records (searching it), else what a sentence-transformers "
        "folder declares (a plain transformers folder must say)",
    ),
]
Normalize = Annotated[
    bool | None,
    Field(
        description="dense encoder: L2-normalise the vectors (search by cosine: BGE, MiniLM) or not (dot "
        "product: Contriever); none: what the index records (searching it), else what a sentence-transformers "
        "folder declares, else not",
    ),
]
QueryPrefix = Annotated[
    str | None,
    Field(
        description="dense encoder: text put before each query, never a passage (BGE: 'Represent this sentence "
        "for searching relevant passages: '), recorded in an index built with it; none: the one the index "
        "records (searching it), else the folder's `query` prompt, else nothing",
    ),
]


class BM25Build(Config):
    """How the tantivy BM25 index is written."""

    heap_mb: int = Field(
        256,
        ge=16,
        description="tantivy writer memory budget in MB (all threads together): when it fills, the writer "
        "flushes a segment to disk, so this bounds the BM25 build's memory whatever the corpus size",
    )
    threads: int | None = Field(
        None, ge=1, description="tantivy indexing threads (default: up to 4, at most the CPU count)"
    )


class DenseBuild(Config):
    """How passages are embedded, stored (row shards of .npy) and indexed for search."""

    index: Literal["flat", "ivf", "hnsw"] = Field(
        "flat",
        description="search structure: flat (none: exact search over the memory-mapped shards), ivf (faiss "
        "inverted lists on disk, memory-mapped; bounded memory) or hnsw (faiss graph held in memory; "
        "fastest). Adding one to a folder that already has embeddings builds only the structure",
    )
    dtype: Literal["float32", "float16"] = Field(
        "float32", description="stored embedding type: float16 halves the disk and page cache a corpus needs"
    )
    shard_rows: int = Field(
        131_072,
        ge=1,
        description="passages per embedding shard (one .npy each): a finished shard survives a crash, and "
        "--dense.part splits shards between processes",
    )
    codec: Literal["flat", "fp16", "sq8"] = Field(
        "flat",
        description="how ivf/hnsw store vectors: flat (float32), fp16 or sq8 (8-bit scalar quantizer, 4x "
        "smaller); with fp16/sq8 the top k are rescored exactly from the shards",
    )
    nlist: int | None = Field(
        None, ge=1, description="ivf: number of lists (default: 4 sqrt(n) rounded to a power of two)"
    )
    nprobe: int = Field(
        64,
        ge=1,
        description="ivf: lists scanned per query (recorded as the folder's default); docs/scaling.md has "
        "the recall each value reached",
    )
    train_sample: int | None = Field(
        None, ge=1, description="ivf: passages sampled to train the centroids (default: 50 per list)"
    )
    hnsw_m: int = Field(32, ge=4, description="hnsw: neighbours per node")
    ef_construction: int = Field(80, ge=8, description="hnsw: candidate list size while building")
    ef_search: int = Field(
        256,
        ge=1,
        description="hnsw: candidate list size per query (recorded as the folder's default); clustered "
        "corpora need large values (docs/scaling.md)",
    )
    device: str = Field("cpu", description="device that embeds the passages: cpu, cuda or cuda:N")
    model: str | None = Field(
        None,
        description="encoder folder (none: the packaged all-MiniLM-L6-v2): a sentence-transformers folder "
        "(its pooling and normalisation are read from it; BGE) or a transformers folder with --dense.pooling "
        "(Contriever: --dense.pooling mean --no-dense.normalize); recorded in the index, whose queries use it",
    )
    pooling: Pooling = None
    normalize: Normalize = None
    query_prefix: QueryPrefix = None
    part: str | None = Field(
        None,
        description="I/N: embed only the shards whose number modulo N is I (0-based), for N processes (e.g. one "
        "per GPU) on one folder; the run that finds every shard done (the last part, or a run without "
        "--dense.part) finishes the index",
    )

    @field_validator("part")
    @classmethod
    def _check_part(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            i, n = (int(x) for x in v.split("/"))
        except ValueError:
            raise ValueError(f"part must look like I/N (e.g. 0/8), got {v!r}") from None
        if not 0 <= i < n:
            raise ValueError(f"part {v!r}: need 0 <= I < N")
        return v

    def part_of(self) -> tuple[int, int] | None:
        """(I, N) of `part`, or None when this process embeds every shard."""
        if self.part is None:
            return None
        i, n = (int(x) for x in self.part.split("/"))
        return i, n

    def lists_for(self, n: int) -> int:
        """IVF list count for `n` vectors: the setting, else 4 sqrt(n) as a power of two (at most n)."""
        if self.nlist:
            return min(self.nlist, n)
        return max(1, min(n, 2 ** round(math.log2(max(1.0, 4 * math.sqrt(n))))))

    def sample_for(self, n: int, nlist: int) -> int:
        """IVF training rows: the setting, else 50 per list (faiss warns below 39), at most n."""
        return min(n, self.train_sample or 50 * nlist)
