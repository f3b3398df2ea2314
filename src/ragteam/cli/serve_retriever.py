"""`ragteam serve retriever`: serve an index folder with Search-R1's `POST /retrieve` contract.

    ragteam serve retriever --index indexes/hotpot --kind hybrid --port 8001
    curl -s localhost:8001/retrieve -d '{"queries": ["Kiss and Tell actress"], "topk": 3, "return_scores": true}'

Concurrent requests are gathered into one batched search; bad input gets a 4xx JSON answer naming the field.
`--api-key KEY` (or $RAGTEAM_API_KEY) makes clients send `Authorization: Bearer KEY`.
`--port 0` picks a free port; once listening it prints `serving on http://HOST:PORT` (`ragteam.serve.listen`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.serve.guard import MAX_WAIT_MS
from ragteam.serve.listen import ServerConfig


class Config(ServerConfig):
    """Settings of `ragteam serve retriever`."""

    index: str = Field(..., description="index folder built by `ragteam index`")
    kind: Literal["bm25", "dense", "hybrid"] | None = Field(
        None,
        description="retriever to serve (default: hybrid when the folder has both indexes, else its one)",
    )
    dense_backend: Literal["exact", "faiss", "ivf", "hnsw"] = Field(
        "exact",
        description="dense search: exact, ivf or hnsw (built by `ragteam index --dense.index`), or faiss "
        "(the approximate index built last)",
    )
    nprobe: int | None = Field(None, ge=1, description="ivf: lists searched per query (default: the index's)")
    ef_search: int | None = Field(None, ge=1, description="hnsw: search breadth (default: the index's)")
    max_queries: int = Field(256, ge=1, description="most queries accepted in one request")
    max_query_chars: int = Field(4096, ge=1, description="longest query accepted, in characters")
    max_topk: int = Field(100, ge=1, description="largest topk accepted")
    max_body_bytes: int = Field(2_000_000, ge=1024, description="largest request body accepted, in bytes")
    batch_window_ms: float = Field(
        2.0, ge=0, le=MAX_WAIT_MS, description="how long to gather concurrent requests into a batch"
    )
    max_batch: int = Field(512, ge=1, description="most queries searched in one batch")


def run(cfg: Config) -> int:
    from ragteam.retrieval.config import RetrieverConfig
    from ragteam.retrieval.factory import retriever_from_index
    from ragteam.retrieval.index import open_index
    from ragteam.serve.guard import resolve_api_key
    from ragteam.serve.listen import serve
    from ragteam.serve.retriever import Limits, make_app

    folder = open_index(cfg.index)
    kind = cfg.kind or ("hybrid" if {"bm25", "dense"} <= set(folder.kinds) else folder.kinds[0])
    settings = RetrieverConfig(
        kind=kind, dense_backend=cfg.dense_backend, nprobe=cfg.nprobe, ef_search=cfg.ef_search
    )
    retriever = retriever_from_index(folder, settings)
    if kind != "bm25":  # load the query encoder now, not on the first request
        retriever.search(["warm up"], 1)
    limits = Limits(
        max_queries=cfg.max_queries,
        max_query_chars=cfg.max_query_chars,
        max_topk=cfg.max_topk,
        max_body_bytes=cfg.max_body_bytes,
    )
    app = make_app(
        retriever,
        limits,
        batch_window_ms=cfg.batch_window_ms,
        max_batch=cfg.max_batch,
        api_key=resolve_api_key(cfg.api_key),
        docs=cfg.docs,
        read_timeout=cfg.read_timeout,
    )
    serve(
        app,
        cfg.host,
        cfg.port,
        log_level=cfg.log_level,
        announce=[f"ragteam: {kind} retriever over {len(folder)} passages of {folder.path}"],
        read_timeout=cfg.read_timeout,
        max_connections=cfg.max_connections,
    )
    return 0
