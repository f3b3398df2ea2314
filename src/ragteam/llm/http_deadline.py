"""Deadlines and size limits for HTTP clients (`openai_http.OpenAIChatModel`): an attempt ends by its deadline,
from connecting to the reply's last byte, and a reply is read up to a limit, never whole first.

httpx's timeouts bound each socket read, so a server that trickles its reply one byte every few seconds kept
a client waiting for minutes past `--llm.timeout`. `DeadlineBackend` is httpcore's network backend with every
connect, read and write cut to the time the current thread's attempt has left (`with deadline(seconds):`);
`deadline_transport` puts it under an httpx client. `read_reply` reads a streamed reply up to a byte limit.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every connection of a `deadline_transport` used by this thread in the block ends within `seconds`."""
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = None


MAX_REPLY_BYTES = 64_000_000
"""The largest reply read: n=16 replies of 4,096 tokens with log-probs are under 10 MB; 300 MB is no reply."""

_deadline = threading.local()  # `at`: the monotonic time the current thread's HTTP attempt must end by


def _time_left(timeout: float | None, kind: type[Exception]) -> float | None:
    """`timeout` cut to what the current attempt has left; `kind` (a timeout error) once nothing is left."""
    end = getattr(_deadline, "at", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise kind("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most the time its attempt has left."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with the current attempt's deadline applied to connecting and to every
    read and write (module docstring). Why not httpx's timeouts alone: they bound each read, so a reply
    that trickles one byte every few seconds never times out."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport(**kwargs: Any) -> httpx.HTTPTransport:
    """An httpx transport whose connections honour the per-thread attempt deadline (`DeadlineBackend`)."""
    transport = httpx.HTTPTransport(**kwargs)
    pool = transport._pool  # httpx builds the pool itself; the backend is the one part it does not expose
    pool._network_backend = DeadlineBackend(pool._network_backend)
    return transport


TRANSFER_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class ReplyTooLarge(Exception):
    """A reply over `max_reply_bytes`: refused, not retried (the same request would get it again)."""


def read_reply(resp: httpx.Response, limit: int) -> bytes:
    """The body of a streamed `resp`, at most `limit` bytes (ReplyTooLarge beyond, from Content-Length when
    it says so, else once that many arrived)."""
    declared = resp.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ReplyTooLarge(f"a reply of {int(declared)} bytes; at most {limit} are read")
    chunks, size = [], 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise ReplyTooLarge(f"a reply of more than {limit} bytes; at most {limit} are read")
        chunks.append(chunk)
    return b"".join(chunks)
