"""Client of Search-R1's retrieval service: `POST {url}/retrieve {queries[], topk, return_scores}`.

Search-R1's `retrieval_server.py` answers `{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`
when `return_scores` is true and `{"result": [[{"id", "contents"}, ...], ...]}` otherwise; its documents are
corpus rows, FlashRAG's `{id, contents}` ("title\\ntext") or `{id, title, text}`. This client always asks
for scores and reads every one of those shapes, so it works against Search-R1's servers and ours.
Connection errors, timeouts, 429 and 5xx are retried with exponential backoff; other errors name the URL.
A service that requires a key (`ragteam serve retriever --api-key`) gets `Authorization: Bearer KEY`, the key
given to the client or $RAGTEAM_API_KEY.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ragteam.data.formats.flashrag import split_contents
from ragteam.types import Doc, Hit, doc_id

RETRYABLE_STATUS = {429, 500, 502, 503, 504}


class RetrievalServiceError(RuntimeError):
    """The retrieval service failed or answered something that is not a /retrieve response."""


def _endpoint(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"retrieval service URL must start with http:// or https://, got {url!r}")
    return url if url.endswith("/retrieve") else url + "/retrieve"


def parse_document(item: Any, where: str) -> Hit:
    """One entry of a /retrieve result list -> Hit (score 0.0 when the service sent none)."""
    score = 0.0
    doc = item
    if isinstance(item, dict) and isinstance(item.get("document"), dict):
        doc = item["document"]
        raw = item.get("score", 0.0)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise RetrievalServiceError(f"{where}: 'score' is not a number ({raw!r})")
        score = float(raw)
    if not isinstance(doc, dict):
        raise RetrievalServiceError(f"{where}: a document must be an object, got {type(doc).__name__}")
    if isinstance(doc.get("text"), str):
        title, text = str(doc.get("title") or ""), doc["text"]
    elif isinstance(doc.get("contents"), str):
        title, text = split_contents(doc["contents"])
    else:
        raise RetrievalServiceError(f"{where}: a document needs 'contents' or 'text' (keys: {sorted(doc)})")
    raw_id = doc.get("id", doc.get("doc_id"))
    did = str(raw_id) if raw_id is not None else doc_id(title, text)
    return Hit(Doc(id=did, title=title, text=text), score)


def parse_response(payload: Any, n_queries: int, url: str) -> list[list[Hit]]:
    """A /retrieve response body -> one hit list per query; RetrievalServiceError naming `url` otherwise."""
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list):
        raise RetrievalServiceError(f"{url}: response has no 'result' list: {str(payload)[:200]}")
    result = payload["result"]
    if len(result) != n_queries:
        raise RetrievalServiceError(f"{url}: asked {n_queries} queries, got {len(result)} result lists")
    out: list[list[Hit]] = []
    for i, items in enumerate(result):
        if not isinstance(items, list):
            raise RetrievalServiceError(f"{url}: result[{i}] is not a list")
        out.append([parse_document(item, f"{url}: result[{i}][{j}]") for j, item in enumerate(items)])
    return out


class RemoteRetriever:
    """A `Retriever` over HTTP. Queries are sent `max_queries` per request (the server's limit)."""

    name = "remote"

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_queries: int = 256,
        client: httpx.Client | None = None,
        api_key: str | None = None,
    ):
        self.url = _endpoint(url)
        self.retries = retries
        self.backoff = backoff
        self.max_queries = max_queries
        self._client = client or httpx.Client(timeout=timeout)
        key = api_key or os.environ.get("RAGTEAM_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}

    def _post(self, body: dict[str, Any]) -> Any:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                resp = self._client.post(self.url, json=body, headers=self._headers)
            except httpx.TimeoutException as e:
                last = f"timed out ({type(e).__name__})"
                continue
            except httpx.TransportError as e:
                last = f"cannot connect ({type(e).__name__}: {e})"
                continue
            if resp.status_code in RETRYABLE_STATUS:
                last = f"HTTP {resp.status_code}: {resp.text[:300]}"
                continue
            if resp.status_code >= 400:
                raise RetrievalServiceError(f"{self.url}: HTTP {resp.status_code}: {resp.text[:300]}")
            try:
                return resp.json()
            except ValueError:
                raise RetrievalServiceError(
                    f"{self.url}: response is not JSON: {resp.text[:200]!r}"
                ) from None
        raise RetrievalServiceError(f"{self.url}: {last} (after {self.retries + 1} attempts)")

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """For each query, the service's top-`k` hits best first."""
        out: list[list[Hit]] = []
        for start in range(0, len(queries), self.max_queries):
            chunk = list(queries[start : start + self.max_queries])
            body = {"queries": chunk, "topk": int(k), "return_scores": True}
            out.extend(parse_response(self._post(body), len(chunk), self.url))
        return out

    def health(self) -> dict[str, Any]:
        """GET /health of the service (ours answers it; Search-R1's does not)."""
        resp = self._client.get(self.url[: -len("/retrieve")] + "/health", headers=self._headers)
        resp.raise_for_status()
        return resp.json()

    def close(self) -> None:
        self._client.close()
