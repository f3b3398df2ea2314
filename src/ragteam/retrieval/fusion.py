"""Rank fusion of several ranked lists: pure functions over (rows, scores) arrays, best first.

- `rrf`: reciprocal-rank fusion, `sum_i w_i / (c + rank_i)` (Cormack et al., 2009; c = 60).
- `convex`: a weighted sum of per-list min-max normalized scores, `sum_i w_i * (s_i - min_i) / (max_i - min_i)`,
  where a document missing from a list gets that list's normalized score 0 (its own list's minimum).
  Bruch et al. (2023, "An analysis of fusion functions for hybrid retrieval") find this convex combination
  beats RRF in and out of domain once its one weight is set on a few questions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Ranked = tuple[np.ndarray, np.ndarray]  # (rows int64, scores float32), best first


def _finish(scores: dict[int, float], k: int) -> Ranked:
    if not scores or k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    rows = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    order = np.lexsort((rows, -vals))[:k]  # ties: lower row first, for reproducible rankings
    return rows[order], vals[order].astype(np.float32)


def rrf(lists: Sequence[Ranked], k: int, c: float = 60.0, weights: Sequence[float] | None = None) -> Ranked:
    """Top-`k` of the reciprocal-rank fusion of `lists` (rank 1 = best); `weights` default to 1."""
    weights = weights or [1.0] * len(lists)
    fused: dict[int, float] = {}
    for (rows, _), w in zip(lists, weights):
        for rank, row in enumerate(rows.tolist(), start=1):
            fused[row] = fused.get(row, 0.0) + w / (c + rank)
    return _finish(fused, k)


def minmax(scores: np.ndarray) -> np.ndarray:
    """Scores rescaled to [0, 1] within their list (all 1 when the list holds one distinct value)."""
    if scores.size == 0:
        return scores.astype(np.float64)
    lo, hi = float(scores.min()), float(scores.max())
    if hi - lo <= 1e-12:
        return np.ones(scores.shape, dtype=np.float64)
    return (scores.astype(np.float64) - lo) / (hi - lo)


def convex(lists: Sequence[Ranked], weights: Sequence[float], k: int) -> Ranked:
    """Top-`k` of `sum_i weights[i] * minmax(list_i)`; a row absent from list i contributes 0 for it."""
    fused: dict[int, float] = {}
    for (rows, scores), w in zip(lists, weights):
        for row, s in zip(rows.tolist(), minmax(scores).tolist()):
            fused[row] = fused.get(row, 0.0) + w * s
    return _finish(fused, k)
