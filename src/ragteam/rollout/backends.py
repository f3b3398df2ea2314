"""The engine's batched calls to the policy, the LLM server and the retriever (they run in worker threads).

Each call takes every request of its kind gathered in one tick and returns one result per request, never
raising: a backend that raises or answers with the wrong number of results becomes a `ModelError` (or the
exception) per request, so the engine can fail the paths concerned and go on with the others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from time import perf_counter
from typing import Any

from ragteam.llm.base import ChatModel, ChatRequest, ChatResult, ModelError
from ragteam.protocol import Retrieve
from ragteam.retrieval.base import Retriever
from ragteam.types import Hit

# Retriever errors that concern one request's input: isolated by re-asking each request alone. Any other
# error (connection, timeout) fails every path of the batch at once.
INPUT_ERRORS = (ValueError, TypeError, KeyError, IndexError)


def batch_job(
    name: str, backend: Any, plans: list[Any], counts: Counter
) -> Callable[[], tuple[list[Any], float]]:
    """A no-argument call serving every plan (`plan.Plan`) of one kind in one batch: `name` is policy, llm
    or retriever, `backend` the model or retriever. Returns (one result per plan, seconds) when called; the
    batch is counted in `counts` (the engine's `calls`) now, in the engine's thread."""
    if name == "retriever":
        reqs = [p.request for p in plans]
        n_queries = sum(len(r.queries) for r in reqs)
        if n_queries:
            counts["retrieve_batches"] += 1
            counts["retrieve_queries"] += n_queries
        return lambda: search(backend, reqs)
    flat = [req for p in plans for req in p.chat]
    counts[f"{name}_batches"] += 1
    counts[f"{name}_requests"] += len(flat)
    if name == "policy":
        counts["policy_samples"] += sum(req.sampling.n for req in flat)

    def job() -> tuple[list[Any], float]:
        out, seconds = chat(backend, flat)
        per_plan, start = [], 0
        for p in plans:  # regroup: a plan's completions in order, or its first error
            mine = out[start : start + len(p.chat)]
            start += len(p.chat)
            error = next((r for r in mine if isinstance(r, ModelError)), None)
            per_plan.append(error if error is not None else [c for r in mine for c in r])
        return per_plan, seconds

    return job


def elapsed(t0: float) -> float:
    """Seconds since `t0`, rounded as traces store them (so a tree loads back equal)."""
    return round(perf_counter() - t0, 6)


def chat(model: ChatModel, requests: list[ChatRequest]) -> tuple[list[ChatResult], float]:
    """One batched chat call; a raising backend or a wrong-length answer becomes a ModelError per request."""
    t0 = perf_counter()
    where = getattr(model, "name", type(model).__name__)
    try:
        out = list(model.chat(requests))
        if len(out) != len(requests):
            out = [ModelError(f"returned {len(out)} results for {len(requests)} requests", where)] * len(
                requests
            )
    except Exception as e:
        out = [ModelError(f"{type(e).__name__}: {e}", where)] * len(requests)
    return out, elapsed(t0)


def search(retriever: Retriever, reqs: list[Retrieve]) -> tuple[list[Any], float]:
    """One search over all requests' queries at the largest k, each cut to its own k; results per request
    (a `list[list[Hit]]`, or the exception that concerns that request)."""
    t0 = perf_counter()
    queries = [q for r in reqs for q in r.queries]
    if not queries:
        return [[] for _ in reqs], elapsed(t0)
    try:
        hits = _search_checked(retriever, queries, max(r.k for r in reqs))
    except INPUT_ERRORS as e:
        if len(reqs) == 1:
            return [e], elapsed(t0)
        out: list[Any] = []
        for r in reqs:  # isolate the request(s) whose input the retriever rejects
            try:
                out.append(_search_checked(retriever, list(r.queries), r.k) if r.queries else [])
            except Exception as e_one:
                out.append(e_one)
        return out, elapsed(t0)
    except Exception as e:
        return [e] * len(reqs), elapsed(t0)
    out = []
    start = 0
    for r in reqs:
        out.append([ranked[: r.k] for ranked in hits[start : start + len(r.queries)]])
        start += len(r.queries)
    return out, elapsed(t0)


def _search_checked(retriever: Retriever, queries: list[str], k: int) -> list[list[Hit]]:
    hits = retriever.search(queries, k)
    if len(hits) != len(queries):
        raise RuntimeError(f"retriever returned {len(hits)} result lists for {len(queries)} queries")
    return [list(ranked) for ranked in hits]
