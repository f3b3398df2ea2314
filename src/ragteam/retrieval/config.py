"""Typed settings of a retriever: which kind, which index folder or service, and its knobs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ragteam.config import Config
from ragteam.retrieval.build_config import Normalize, Pooling, QueryPrefix


class RetrieverConfig(Config):
    """How to open a retriever (`factory.open_retriever`)."""

    kind: Literal["bm25", "dense", "hybrid", "remote"] = Field(
        "hybrid",
        description="bm25 (tantivy, English stemming), dense (all-MiniLM-L6-v2, or --retriever.dense-model), "
        "hybrid (both, score fusion), "
        "or remote (a Search-R1 /retrieve service at --url). hybrid is the default: on HotpotQA-500 it finds "
        "both supporting paragraphs in the top 10 for 0.882 of questions, BM25 0.860, dense 0.736",
    )
    index: str | None = Field(None, description="index folder built by `ragteam index`")
    url: str | None = Field(None, description="base URL of a remote retrieval service (kind remote)")
    dense_backend: Literal["exact", "faiss", "ivf", "hnsw"] = Field(
        "exact",
        description="dense search: exact (every vector, memory-mapped shards), ivf or hnsw (that faiss index, "
        "built by `ragteam index --dense.index ivf|hnsw`), or faiss (the approximate index built last; a HNSW "
        "graph built on first use when the folder has none)",
    )
    nprobe: int | None = Field(None, ge=1, description="ivf: lists searched per query (default: the index's)")
    ef_search: int | None = Field(None, ge=1, description="hnsw: search breadth (default: the index's)")
    fusion: Literal["convex", "rrf"] = Field(
        "convex",
        description="hybrid fusion: convex (weighted min-max normalized scores) or rrf (reciprocal rank)",
    )
    dense_weight: float = Field(
        0.4,
        ge=0.0,
        le=1.0,
        description="hybrid: weight of the dense list (BM25 gets 1 - this); chosen on PopQA",
    )
    depth: int = Field(100, ge=1, description="hybrid: candidates taken from each retriever before fusion")
    device: str = Field("cpu", description="device of the query encoder (dense, hybrid): cpu or cuda")
    dense_model: str | None = Field(
        None,
        description="dense encoder folder (none: the one the index was built with, all-MiniLM-L6-v2 unless "
        "`ragteam index --dense.model` said otherwise): a sentence-transformers folder (BGE: its pooling is "
        "read from it) or a transformers folder with --retriever.pooling (Contriever-MSMARCO: mean, "
        "--no-retriever.normalize); an index built here from --data or --corpus is built with it",
    )
    pooling: Pooling = None
    normalize: Normalize = None
    query_prefix: QueryPrefix = None
    timeout: float = Field(30.0, gt=0, description="remote: seconds per HTTP request")
    retries: int = Field(3, ge=0, description="remote: retries on connection errors, timeouts and 5xx/429")

    @model_validator(mode="after")
    def _url_means_remote(self) -> RetrieverConfig:
        """`--retriever.url URL` alone means the remote service (it was silently unused under the default kind)."""
        if self.url and self.kind != "remote":
            if "kind" in self.model_fields_set:
                raise ValueError(
                    f"retriever.url is read only by retriever.kind remote, not {self.kind!r}: drop one of the two"
                )
            object.__setattr__(self, "kind", "remote")
        return self
