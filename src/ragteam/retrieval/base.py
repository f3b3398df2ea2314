"""The retriever interface: many queries in, ranked hits with scores out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragteam.types import Hit


@runtime_checkable
class Retriever(Protocol):
    """A batched retriever. Implementations: BM25, dense, hybrid, remote (`POST /retrieve`)."""

    name: str

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """Return, for each query, its top-`k` hits best first (fewer if the corpus is smaller)."""
        ...
