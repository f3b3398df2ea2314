"""Guarding a server against hostile clients, before any route reads a request.

Both kinds of apps may require an API key (`BearerAuth`: OpenAI's `Authorization: Bearer KEY`, from
`--api-key` or $RAGTEAM_API_KEY). `read_body` gives a body within `read_timeout` seconds, checks
Content-Length before reading a byte and stops a streamed body at the limit, so a client trickling bytes or
sending 400 MB cannot hold the server; `loads_json` parses it with numbers of more digits than Python converts
kept as a `BigNumber`, so validation names the field. `until_disconnect` cancels the work of a client that
has gone. Where the server listens and how connections are capped: `ragteam.serve.listen`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

API_KEY_ENV = "RAGTEAM_API_KEY"  # the key a server requires when --api-key is not given
READ_TIMEOUT_S = 30.0  # a request's head, then its body, must arrive within this many seconds
MAX_CONNECTIONS = 512  # open connections at most; the next request is answered 503
MAX_READ_TIMEOUT_S = 3600.0  # the longest `read_timeout` a server takes: longer is a client holding a socket
MAX_WAIT_MS = (
    60_000.0  # the longest batch wait a server takes: a request should not wait a minute for company
)


def resolve_api_key(flag: str | None) -> str | None:
    """The key a server requires: `--api-key`, else $RAGTEAM_API_KEY; None (no key) when neither is set."""
    key = flag if flag else os.environ.get(API_KEY_ENV)
    return key or None


class BearerAuth:
    """ASGI middleware: every HTTP request but those to `open_paths` must carry `Authorization: Bearer KEY`.

    Why here and not in a route: the check runs before the body is read, so a client without the key cannot
    make the server read (or parse) anything. `error(message)` is the JSON body of the 401, in the app's
    own error shape. The key is compared in constant time.
    """

    def __init__(
        self,
        app: Any,
        key: str,
        error: Callable[[str], dict[str, Any]],
        open_paths: Sequence[str] = ("/health",),
    ) -> None:
        if not key:
            raise ValueError("BearerAuth needs a non-empty key")
        self.app, self.key, self.error, self.open_paths = app, key.encode("utf-8"), error, set(open_paths)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key):
            await self.app(scope, receive, send)
            return
        why = "invalid API key" if header else "missing API key: send the header 'Authorization: Bearer KEY'"
        body = json.dumps(self.error(why)).encode("utf-8")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def check_read_timeout(seconds: float) -> float:
    """`seconds` as a server's `read_timeout`, or ValueError: finite and in (0, MAX_READ_TIMEOUT_S] (`inf`
    made the uvicorn config fail with a traceback, and would let a client hold a connection for good)."""
    from ragteam.config import check_number

    return check_number("read_timeout", seconds, 0, MAX_READ_TIMEOUT_S, low_open=True)


def encodable(text: str) -> str:
    """`text`, with what UTF-8 cannot encode (lone surrogates from JSON's `\\ud800`) written as escapes."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class BigNumber:
    """An integer literal of a request body with more digits than Python converts to an int
    (`sys.get_int_max_str_digits()`, 4300): `loads_json` puts this in its place, so that validation names
    the field (a 4xx) instead of the parser failing the whole body, or, in a handler that did not expect it,
    the server failing with a 500."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<a number of {self.digits} digits>"


def _parse_int(literal: str) -> int | BigNumber:
    digits = len(literal.lstrip("-"))
    if digits > min(4300, sys.get_int_max_str_digits() or 4300):  # converting more is slow, or refused
        return BigNumber(digits)
    return int(literal)


def loads_json(raw: bytes | str) -> Any:
    """`json.loads`, except that an integer of more than 4300 digits becomes a `BigNumber` (see there).

    Raises what `json.loads` raises for text that is not JSON (ValueError, RecursionError)."""
    return json.loads(raw, parse_int=_parse_int)


class BodyError(Exception):
    """A request body the server will not read: HTTP `status` (400, 408, 413) and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


async def read_body(request: Any, limit: int, timeout: float | None = READ_TIMEOUT_S) -> bytes:
    """The body of a starlette `request`, at most `limit` bytes, received within `timeout` seconds.

    Content-Length is checked before anything is read (a 400 MB upload is refused at once, not after
    arriving); a body without one (chunked) is cut at `limit`. Raises BodyError."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise BodyError(400, f"Content-Length is not a number: {declared[:40]!r}")
        if int(declared) > limit:
            raise BodyError(413, f"request body of {int(declared)} bytes exceeds the limit of {limit} bytes")
    from starlette.requests import ClientDisconnect

    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyError(413, f"request body exceeds the limit of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise BodyError(408, f"request body not received within {timeout:g} s") from None
    except ClientDisconnect:  # nobody to answer; a quiet 400 instead of a logged traceback
        raise BodyError(400, "the client disconnected before sending its whole body") from None
    return b"".join(chunks)


class ClientGone(Exception):
    """The client disconnected before its answer was ready (`until_disconnect` cancelled the work)."""


async def until_disconnect(request: Any, work: Any) -> Any:
    """The result of the coroutine `work`, unless the client of `request` disconnects first: then `work` is
    cancelled and ClientGone raised. Call it after the body was read.

    Why: a generation queued or running for a client that has gone is work nobody will read; cancelling it
    (a queued request is dropped from its batch, a running one stopped where the backend allows) frees the
    model for the clients still waiting. Once the body is read, the server's `receive` only returns when
    the connection closes (`http.disconnect`)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if watcher.done() and not watcher.cancelled():
            watcher.exception()  # retrieved, so asyncio does not log it: the connection is gone either way
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if task.cancelled():
        raise ClientGone("the client disconnected")
    return task.result()


async def _disconnected(request: Any) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
