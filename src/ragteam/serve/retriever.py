"""Serve a retriever over HTTP with Search-R1's contract: `POST /retrieve {queries[], topk, return_scores}`.

Concurrent requests are not served one after another: each request's queries go into a queue, and one
worker takes everything that arrived within `batch_window_ms` (or while the previous search ran), runs ONE
batched search in a worker thread, and hands each request its slice. The event loop never blocks, so
requests keep being accepted and validated while a search runs.

Input is validated by hand (not by a pydantic model) so that every problem gets a 4xx JSON answer
`{"error": "...", "field": "..."}` naming the field: malformed JSON (400), a body over the size limit (413),
wrong types, too many or too long queries, text that is not encodable (a lone surrogate such as `"\\ud800"`
is valid JSON but no UTF-8 string), `topk` out of range, NaN, infinite or of more digits than Python converts
(a 5,000-digit `topk` is a 422 naming `topk`, not a parser failure) (422). A batched search that fails is
run again one request at a time, so a request that breaks the retriever gets its own 500 and the requests
batched with it are answered as if it had not been there: one client never sees another client's error. A
500 is answered by the route itself (a JSON body, the connection kept). The server keeps serving.
`GET /health` reports the retriever and counters.

`api_key` makes every route but /health require `Authorization: Bearer KEY` (401 otherwise); the API docs
routes are off unless asked for (`docs=True`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ragteam.retrieval.base import Retriever
from ragteam.serve.batcher import Pending, RequestBatcher, lifespan_of, settle
from ragteam.serve.guard import (
    BearerAuth,
    BigNumber,
    BodyError,
    check_read_timeout,
    loads_json,
    read_body,
)
from ragteam.types import Hit


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_queries: int = 256
    max_query_chars: int = 4096
    max_topk: int = 100
    default_topk: int = 3  # Search-R1's default when `topk` is absent or null
    max_body_bytes: int = 2_000_000


class RequestError(Exception):
    """A request the server refuses: HTTP `status` with a message naming the `field`."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def validate_request(payload: Any, limits: Limits) -> tuple[list[str], int, bool]:
    """Check a decoded /retrieve body; return (queries, topk, return_scores) or raise RequestError (422)."""
    if not isinstance(payload, dict):
        raise RequestError(422, f"the body must be a JSON object, got {type(payload).__name__}")
    queries = payload.get("queries")
    if not isinstance(queries, list):
        raise RequestError(422, "'queries' must be a list of strings", "queries")
    if not queries:
        raise RequestError(422, "'queries' is empty; send at least one query", "queries")
    if len(queries) > limits.max_queries:
        raise RequestError(
            422,
            f"'queries' holds {len(queries)} queries; at most {limits.max_queries} per request",
            "queries",
        )
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise RequestError(422, f"queries[{i}] must be a string, got {type(q).__name__}", f"queries[{i}]")
        try:
            q.encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate: valid JSON, but the retriever cannot read it
            raise RequestError(
                422,
                f"queries[{i}] is not valid Unicode text ({e.reason} at character {e.start})",
                f"queries[{i}]",
            ) from None
        if len(q) > limits.max_query_chars:
            raise RequestError(
                422,
                f"queries[{i}] has {len(q)} characters; at most {limits.max_query_chars}",
                f"queries[{i}]",
            )
    topk = payload.get("topk")
    if topk is None:
        topk = limits.default_topk
    if isinstance(topk, BigNumber):
        raise RequestError(422, f"'topk' must be between 1 and {limits.max_topk}, got {topk!r}", "topk")
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise RequestError(422, f"'topk' must be an integer, got {_shown(topk)}", "topk")
    if not 1 <= topk <= limits.max_topk:
        raise RequestError(422, f"'topk' must be between 1 and {limits.max_topk}, got {topk}", "topk")
    return_scores = payload.get("return_scores", False)
    if return_scores is None:
        return_scores = False
    if not isinstance(return_scores, bool):
        raise RequestError(
            422, f"'return_scores' must be true or false, got {_shown(return_scores)}", "return_scores"
        )
    return queries, topk, return_scores


def _shown(value: Any) -> str:
    """A client's value for an error message: JSON, cut to 50 characters (a `BigNumber` by its digits)."""
    if isinstance(value, BigNumber):
        return repr(value)
    try:
        return json.dumps(value)[:50]
    except (TypeError, ValueError):  # a BigNumber inside a list or object
        return type(value).__name__


def document(hit: Hit) -> dict[str, Any]:
    """A hit's passage as Search-R1 clients read it (`contents` = title\\ntext), plus title and text."""
    return {"id": hit.doc.id, "contents": hit.doc.contents, "title": hit.doc.title, "text": hit.doc.text}


def format_result(hits: list[list[Hit]], return_scores: bool) -> dict[str, Any]:
    """Search-R1's response body for one request."""
    if return_scores:
        return {"result": [[{"document": document(h), "score": h.score} for h in row] for row in hits]}
    return {"result": [[document(h) for h in row] for row in hits]}


class MicroBatcher(RequestBatcher[tuple[list[str], int]]):
    """Gathers the queries of concurrent requests (up to `max_batch` queries) into one batched search, run in
    a worker thread; each request gets its slice. `stats` holds the counters /health reports."""

    def __init__(self, retriever: Retriever, window_ms: float = 2.0, max_batch: int = 512):
        super().__init__(max_batch, window_ms)
        self.retriever = retriever
        self.stats = {"requests": 0, "queries": 0, "batches": 0, "errors": 0, "max_batch_requests": 0}

    def size(self, item: tuple[list[str], int]) -> int:
        return len(item[0])

    def fail(self, pending: Pending[tuple[list[str], int]], error: Exception) -> None:
        self.stats["errors"] += 1
        super().fail(pending, error)

    async def handle(self, batch: list[Pending[tuple[list[str], int]]]) -> None:
        """One batched search for `batch`; each request gets its slice. Raises if the retriever fails."""
        queries = [q for p in batch for q in p.item[0]]
        k = max(p.item[1] for p in batch)
        hits = await asyncio.to_thread(self.retriever.search, queries, k)
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["queries"] += len(queries)
        self.stats["max_batch_requests"] = max(self.stats["max_batch_requests"], len(batch))
        start = 0
        for p in batch:
            own, k = p.item
            settle(p.future, [row[:k] for row in hits[start : start + len(own)]])
            start += len(own)


@dataclass
class RetrieverServer:
    """What the routes of one retriever server read (`app.state.server`)."""

    retriever: Retriever
    limits: Limits
    batcher: MicroBatcher
    read_timeout: float


def make_app(
    retriever: Retriever,
    limits: Limits | None = None,
    batch_window_ms: float = 2.0,
    max_batch: int = 512,
    api_key: str | None = None,
    docs: bool = False,
    read_timeout: float = 30.0,
) -> FastAPI:
    """A FastAPI app serving `retriever` at POST /retrieve (Search-R1's contract) and GET /health.

    With `api_key`, every route but /health answers 401 unless the request carries `Authorization: Bearer
    KEY`. FastAPI's /docs, /redoc and /openapi.json are off unless `docs`: they describe the service to
    whoever finds the port. A body must arrive within `read_timeout` seconds (408 otherwise)."""
    check_read_timeout(read_timeout)
    batcher = MicroBatcher(retriever, window_ms=batch_window_ms, max_batch=max_batch)
    app = FastAPI(
        title="ragteam retriever",
        lifespan=lifespan_of(batcher),
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.batcher = batcher
    app.state.api_key_required = bool(api_key)
    app.state.server = RetrieverServer(retriever, limits or Limits(), batcher, read_timeout)
    if api_key:
        app.add_middleware(BearerAuth, key=api_key, error=lambda message: {"error": message})
    app.add_exception_handler(RequestError, _refused)
    app.add_exception_handler(Exception, _failed)
    app.add_api_route("/retrieve", retrieve, methods=["POST"])
    app.add_api_route("/health", health, methods=["GET"])
    return app


# ---- the routes: each reads its server from `request.app.state.server` ------------------------------------


def _refusal(exc: RequestError) -> JSONResponse:
    body = {"error": exc.message}
    if exc.field:
        body["field"] = exc.field
    return JSONResponse(body, status_code=exc.status)


async def _refused(request: Request, exc: RequestError) -> JSONResponse:
    return _refusal(exc)


async def _failed(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": f"retrieval failed: {type(exc).__name__}: {exc}"}, status_code=500)


async def retrieve(request: Request) -> JSONResponse:
    """`POST /retrieve`: a refusal (4xx naming the field) or a failure (500) is answered here, by the route:
    an app-level handler would drop the connection."""
    try:
        return await _retrieve(request.app.state.server, request)
    except RequestError as e:
        return _refusal(e)
    except Exception as e:  # noqa: BLE001 - answered here: an app-level handler would drop the connection
        return JSONResponse({"error": f"retrieval failed: {type(e).__name__}: {e}"}, status_code=500)


async def _retrieve(s: RetrieverServer, request: Request) -> JSONResponse:
    try:
        raw = await read_body(request, s.limits.max_body_bytes, s.read_timeout)
    except BodyError as e:
        raise RequestError(e.status, e.message) from None
    try:
        payload = loads_json(raw)
    except UnicodeDecodeError:
        raise RequestError(400, "the body is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise RequestError(400, f"malformed JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None
    except ValueError as e:  # anything else the parser refuses
        raise RequestError(400, f"malformed JSON: {e}") from None
    queries, topk, return_scores = validate_request(payload, s.limits)
    try:
        hits = await s.batcher.submit((queries, topk))
    except Exception as e:  # noqa: BLE001 - the retriever failed on this batch; answer, keep serving
        return JSONResponse({"error": f"retrieval failed: {type(e).__name__}: {e}"}, status_code=500)
    return JSONResponse(format_result(hits, return_scores))


async def health(request: Request) -> dict[str, Any]:
    """`GET /health`: the retriever, its size, the limits and the batching counters."""
    s: RetrieverServer = request.app.state.server
    size = len(s.retriever) if hasattr(s.retriever, "__len__") else None  # type: ignore[arg-type]
    return {
        "status": "ok",
        "retriever": s.retriever.name,
        "docs": size,
        "limits": s.limits.__dict__,
        **s.batcher.stats,
    }
