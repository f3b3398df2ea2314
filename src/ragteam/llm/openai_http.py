"""OpenAI-compatible chat backend over HTTP (vLLM, SGLang, OpenAI, `ragteam serve llm`).

`chat()` is a synchronous batch call: it sends the batch's requests concurrently (at most `concurrency` in
flight, on a thread pool sharing one httpx connection pool) and returns when all have answered. A request that
fails on a connection error, a timeout, HTTP 429 or 5xx is retried with exponential backoff (plus jitter,
honouring Retry-After); after `retries` retries, or at once on another 4xx, it becomes a `ModelError` naming
the endpoint. One bad request never raises or sinks the others.

`n` samples are asked for with the `n` parameter; when a server returns fewer choices, the missing samples are
requested one at a time (with seed + j when a seed was given). Usage counts come from the server; with n > 1
the completion tokens are split evenly over the choices (the API reports only their sum).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx

from ragteam.llm.base import ChatRequest, ChatResult, Completion, ModelError

RETRY_STATUS = frozenset({408, 409, 425, 429})


def normalize_base_url(base_url: str) -> str:
    """Strip trailing slashes; a bare `http://host:port` gets the conventional `/v1`."""
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must look like http://host:port/v1, got {base_url!r}")
    if parts.path in ("", "/"):
        url += "/v1"
    return url


def error_message(resp: httpx.Response) -> str:
    """The server's error text: OpenAI's `{"error": {"message"}}`, FastAPI's `{"detail"}`, or the raw body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500].strip() or resp.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]


class OpenAIChatModel:
    """A ChatModel that calls `POST {base_url}/chat/completions` of an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 16,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        api_key: str | None = None,
    ) -> None:
        if concurrency < 1 or retries < 0 or timeout <= 0:
            raise ValueError("need concurrency >= 1, retries >= 0 and timeout > 0")
        self.base_url = normalize_base_url(base_url)
        self.endpoint = f"{self.base_url}/chat/completions"
        self.name = model
        self.model = model
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.concurrency = concurrency
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.stats = {"requests": 0, "http_calls": 0, "retries": 0, "errors": 0}
        self._stats_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._init_lock = threading.Lock()

    # picklable (e.g. to ship to a Ray worker): the client and the pool are rebuilt on first use
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_client", "_pool", "_init_lock", "_stats_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client, self._pool = None, None
        self._init_lock, self._stats_lock = threading.Lock(), threading.Lock()

    def _resources(self) -> tuple[httpx.Client, ThreadPoolExecutor]:
        with self._init_lock:
            if self._client is None:
                key = self._api_key or os.environ.get(self.api_key_env)
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                self._client = httpx.Client(
                    headers=headers,
                    timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                    limits=httpx.Limits(
                        max_connections=self.concurrency, max_keepalive_connections=self.concurrency
                    ),
                )
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="openai-chat")
            assert self._pool is not None
            return self._client, self._pool

    def close(self) -> None:
        """Close the HTTP connections and the worker threads (the model reopens them if used again)."""
        with self._init_lock:
            if self._client is not None:
                self._client.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._client, self._pool = None, None

    def _count(self, key: str, k: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += k

    # ---- the ChatModel interface ---------------------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Send every request concurrently; per request its completions or a ModelError, in input order."""
        if not requests:
            return []
        _, pool = self._resources()
        futures = [pool.submit(self._answer, req) for req in requests]
        return [f.result() for f in futures]

    def _answer(self, req: ChatRequest) -> ChatResult:
        self._count("requests")
        try:
            s = req.sampling
            got = self._call(req, s.n, s.seed)
            if isinstance(got, ModelError):
                self._count("errors")
                return got
            completions = list(got[: s.n])
            j = len(completions)
            while len(completions) < s.n:  # the server gave fewer choices than asked for
                more = self._call(req, 1, None if s.seed is None else s.seed + j)
                if isinstance(more, ModelError):
                    self._count("errors")
                    return more
                if not more:
                    return ModelError(f"server returned no choices (asked for n={s.n})", where=self.endpoint)
                completions.extend(more[:1])
                j += 1
            return completions
        except Exception as e:  # noqa: BLE001 - never raise out of a batch
            self._count("errors")
            return ModelError(f"{type(e).__name__}: {e}", where=self.endpoint)

    def _payload(self, req: ChatRequest, n: int, seed: int | None) -> dict[str, Any]:
        s = req.sampling
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in req.messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "n": n,
        }
        if s.stop:
            payload["stop"] = list(s.stop)
        if seed is not None:
            payload["seed"] = seed
        return payload

    def _call(self, req: ChatRequest, n: int, seed: int | None) -> list[Completion] | ModelError:
        """One chat-completions call with retries; its choices as Completions, or a ModelError."""
        client, _ = self._resources()
        payload = self._payload(req, n, seed)
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
            wait: float | None = None
            try:
                self._count("http_calls")
                resp = client.post(self.endpoint, json=payload)
            except httpx.TransportError as e:  # connect / read / write errors and timeouts
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            else:
                if resp.status_code == 200:
                    try:
                        return self._completions(resp.json())
                    except (ValueError, KeyError, TypeError, IndexError) as e:
                        return ModelError(
                            f"malformed response ({type(e).__name__}: {e})", where=self.endpoint
                        )
                last = f"HTTP {resp.status_code}: {error_message(resp)}"
                if resp.status_code < 500 and resp.status_code not in RETRY_STATUS:
                    return ModelError(last, where=self.endpoint)
                wait = _retry_after(resp)
            if attempt < self.retries:
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (1 + 0.25 * random.random())
                time.sleep(wait if wait is not None and wait <= self.max_backoff else delay)
        return ModelError(
            f"failed after {self.retries + 1} attempts; last error: {last}", where=self.endpoint
        )

    @staticmethod
    def _completions(body: dict[str, Any]) -> list[Completion]:
        choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
        usage = body.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens", 0) or 0)
        total_completion = int(usage.get("completion_tokens", 0) or 0)
        per_choice = total_completion // max(1, len(choices))
        out = []
        for c in choices:
            message = c.get("message") or {}
            out.append(
                Completion(
                    text=message.get("content") or "",
                    finish_reason=c.get("finish_reason") or "stop",
                    prompt_tokens=prompt_tokens,
                    completion_tokens=per_choice,
                )
            )
        return out


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
