"""`ragteam search`: search an index folder and print the ranked passages.

ragteam search "who portrayed Corliss Archer" --index indexes/hotpot --k 5
ragteam search "..." --index indexes/hotpot --kind bm25 --json
"""

from __future__ import annotations

import json
import textwrap
import warnings
from typing import Literal

from pydantic import Field

from ragteam.config import Config as BaseConfig

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"')

    class Config(BaseConfig):
        """Settings of `ragteam search`."""

        query: str = Field(..., description="the search query", json_schema_extra={"positional": True})
        index: str | None = Field(None, description="index folder built by `ragteam index`")
        url: str | None = Field(None, description="search a remote /retrieve service instead (kind remote)")
        k: int = Field(5, ge=1, le=1000, description="how many passages to show")
        kind: Literal["bm25", "dense", "hybrid", "remote"] | None = Field(
            None,
            description="retriever (default: hybrid when the folder has both indexes, else the one it has)",
        )
        json: bool = Field(False, description="print the hits as JSON (id, title, text, score)")
        width: int = Field(100, ge=40, description="wrap readable output at this many columns")


def format_hits(query: str, kind: str, hits: list, width: int = 100) -> str:
    """Readable ranking: rank, score, title and id, then the start of the passage, indented."""
    lines = [f"{len(hits)} hits for {query!r} ({kind})"]
    for rank, h in enumerate(hits, start=1):
        lines.append(f"{rank:>3}. [{h.score:.4f}] {h.doc.title or '(no title)'}  ({h.doc.id})")
        text = (
            h.doc.text if len(h.doc.text) <= 3 * width else h.doc.text[: 3 * width].rsplit(" ", 1)[0] + " ..."
        )
        lines.extend(textwrap.wrap(text, width=width, initial_indent="     ", subsequent_indent="     "))
    return "\n".join(lines)


def run(cfg: Config) -> int:
    from ragteam.retrieval.config import RetrieverConfig
    from ragteam.retrieval.factory import open_retriever
    from ragteam.retrieval.index import read_manifest

    if not cfg.query.strip():
        raise ValueError("the query is empty")
    kind = cfg.kind
    if kind is None:
        if cfg.url and not cfg.index:
            kind = "remote"
        elif cfg.index:
            kinds = read_manifest(cfg.index).get("kinds", [])
            kind = "hybrid" if {"bm25", "dense"} <= set(kinds) else (kinds[0] if kinds else "bm25")
        else:
            raise ValueError("give --index DIR (built by `ragteam index`) or --url URL")
    retriever = open_retriever(RetrieverConfig(kind=kind, index=cfg.index, url=cfg.url))
    hits = retriever.search([cfg.query], cfg.k)[0]
    if cfg.json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
    else:
        print(format_hits(cfg.query, kind, hits, cfg.width))
    return 0
