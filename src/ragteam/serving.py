"""Running ragteam's HTTP apps (the /retrieve service, the OpenAI-compatible LLM server) with uvicorn.

`serve` is what the `ragteam serve ...` commands call: it binds first, so `--port 0` picks a free port, and the
first line it prints is `serving on http://HOST:PORT` (scripts and tests read the port from it).
`BackgroundServer` runs an app in a thread on an ephemeral loopback port, and `ServerProcess` runs a
`ragteam serve ...` command as a subprocess on one, for tests, benchmarks and notebooks.

Hostile clients. Both apps may require an API key (`BearerAuth`: OpenAI's `Authorization: Bearer KEY`,
from `--api-key` or $RAGTEAM_API_KEY); `serve` warns on stderr when it listens beyond loopback without one.
A connection must send a complete request head within `read_timeout` seconds of opening (or of its previous
response), and `read_body` gives the body as long again, so a client trickling bytes cannot hold a
connection forever; `max_connections` caps open connections (more get 503). `read_body` checks
Content-Length before reading a byte and stops a streamed body at the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, Literal, Self

from pydantic import Field

from ragteam.config import Config

API_KEY_ENV = "RAGTEAM_API_KEY"  # the key a server requires when --api-key is not given
READ_TIMEOUT_S = 30.0  # a request's head, then its body, must arrive within this many seconds
MAX_CONNECTIONS = 512  # open connections at most; the next request is answered 503


class ServerConfig(Config):
    """What `ragteam serve llm` and `ragteam serve retriever` share: where to listen and how to guard it."""

    host: str = Field("127.0.0.1", description="interface to listen on (0.0.0.0 for every interface)")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: pick a free one)")
    api_key: str | None = Field(
        None,
        description="require 'Authorization: Bearer KEY' on every route but /health "
        "(default: $RAGTEAM_API_KEY; unset: no key, and a warning when --host is not loopback)",
    )
    docs: bool = Field(False, description="serve FastAPI's /docs, /redoc and /openapi.json")
    read_timeout: float = Field(
        READ_TIMEOUT_S, gt=0, description="seconds a client has to send a request's head, then its body"
    )
    max_connections: int = Field(
        MAX_CONNECTIONS, ge=1, description="open connections at most; requests beyond answered 503"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "warning", description="uvicorn log level"
    )


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one.

    An unknown host or a port in use is a ValueError that says so (the CLI prints it, no traceback)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except socket.gaierror as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: unknown host {host!r} ({e.strerror})") from None
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ValueError(
                f"cannot listen on {host}:{port}: the port is in use (choose another --port; 0 picks a free one)"
            ) from None
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def is_loopback(sock: socket.socket) -> bool:
    """Whether a bound socket is reachable only from this machine."""
    try:
        return ipaddress.ip_address(sock.getsockname()[0]).is_loopback
    except ValueError:
        return False


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


def openai_error_body(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`. A message quoting a
    client's text that is no UTF-8 (a lone surrogate) keeps it escaped, so the answer can be encoded."""
    return {"error": {"message": encodable(message), "type": kind, "param": param, "code": status}}


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


def openai_error(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> Any:
    """An OpenAI-shaped error response with that status."""
    from fastapi.responses import JSONResponse

    return JSONResponse(openai_error_body(status, message, kind, param), status)


def validation_message(e: Any) -> tuple[str, str | None]:
    """A pydantic ValidationError as one message naming every bad field, and the first field's path."""
    parts, first = [], None
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        first = first or loc
        got = f" (got {err['input']!r})" if isinstance(err.get("input"), BigNumber) else ""
        parts.append(f"{loc}: {err['msg']}{got}")
    return "invalid request: " + "; ".join(parts), first


async def read_openai_body(
    request: Any, body_type: type, served_name: str, max_body_bytes: int, read_timeout: float
) -> Any:
    """The request's body as `body_type` (a pydantic model with a `model` field), or the 4xx response that
    says why not: body too large or too slow, not JSON, not an object, a bad field, another model's name."""
    from pydantic import ValidationError

    try:
        raw = await read_body(request, max_body_bytes, read_timeout)
    except BodyError as e:
        return openai_error(e.status, e.message)
    try:
        data = loads_json(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return openai_error(400, f"request body is not valid JSON: {e}")
    except RecursionError:
        return openai_error(400, "request body is not valid JSON: nested too deeply")
    if not isinstance(data, dict):
        return openai_error(400, "request body must be a JSON object")
    try:
        body = body_type.model_validate(data)
    except ValidationError as e:
        message, param = validation_message(e)
        return openai_error(400, message, param=param)
    if body.model is not None and body.model != served_name:
        from ragteam.config import short_repr

        return openai_error(
            404,
            f"model {short_repr(body.model)} not found; this server serves {served_name!r}",
            "not_found_error",
            "model",
        )
    return body


def openai_app(title: str, batcher: Any, served_name: str, docs: bool, api_key: str | None) -> Any:
    """The FastAPI app both OpenAI-shaped servers (`serve llm`, `serve team`) start from: its lifespan runs
    `batcher.run()` (the loop that gathers requests into batches) and cancels it at shutdown, the interactive
    docs only when asked for, and, with an API key, `Authorization: Bearer` checked before any route with
    OpenAI's 401 body. The caller adds its routes."""
    from fastapi import FastAPI

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        task = asyncio.create_task(batcher.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = FastAPI(
        title=title,
        lifespan=lifespan,
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.batcher = batcher
    app.state.served_name = served_name
    app.state.api_key_required = bool(api_key)
    if api_key:
        app.add_middleware(
            BearerAuth,
            key=api_key,
            error=lambda message: openai_error_body(401, message, "invalid_api_key"),
        )
    return app


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


def _deadline_protocol(read_timeout: float) -> type:
    """uvicorn's h11 protocol, closing a connection that has not sent a complete request head within
    `read_timeout` seconds of opening or of its last response.

    Why: uvicorn's keep-alive timer is cancelled by any byte received, so a client sending a byte now and
    then (slowloris) would hold its connection, and one of `max_connections`, forever."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeadlineH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(read_timeout, self._head_late)

        def _head_late(self) -> None:
            cycle = getattr(self, "cycle", None)
            waiting_for_head = cycle is None or cycle.response_complete
            if waiting_for_head and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

    return DeadlineH11Protocol


def uvicorn_config(
    app: Any,
    log_level: str = "warning",
    read_timeout: float = READ_TIMEOUT_S,
    max_connections: int | None = MAX_CONNECTIONS,
    **kwargs: Any,
) -> Any:
    """The uvicorn.Config both `serve` and `BackgroundServer` run: request-head deadline, connection cap."""
    import uvicorn

    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=min(30, max(1, int(read_timeout))),
        limit_concurrency=max_connections,
        http=_deadline_protocol(read_timeout),
        **kwargs,
    )


def url_of(sock: socket.socket) -> str:
    """`http://HOST:PORT` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "warning",
    announce: Sequence[str] = (),
    read_timeout: float = READ_TIMEOUT_S,
    max_connections: int | None = MAX_CONNECTIONS,
) -> None:
    """Run `app` with uvicorn until interrupted. Prints the `announce` lines, then `serving on URL`, on stdout.

    Warns on stderr when listening beyond loopback while the app requires no API key
    (`app.state.api_key_required`, set by the apps' `make_app`)."""
    import uvicorn

    sock = bind_socket(host, port)
    if not is_loopback(sock) and not getattr(getattr(app, "state", None), "api_key_required", False):
        print(
            f"ragteam: warning: listening on {url_of(sock)} without an API key: anyone who reaches this "
            f"port can use the server (set --api-key or ${API_KEY_ENV})",
            file=sys.stderr,
            flush=True,
        )
    for line in announce:
        print(line, flush=True)
    print(f"serving on {url_of(sock)}", flush=True)
    config = uvicorn_config(app, log_level, read_timeout=read_timeout, max_connections=max_connections)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on 127.0.0.1 and an ephemeral port (tests, notebooks).

    with BackgroundServer(make_app(model, "tiny")) as srv:
        OpenAIChatModel(srv.url + "/v1", "tiny").chat(...)
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        read_timeout: float = READ_TIMEOUT_S,
        max_connections: int | None = MAX_CONNECTIONS,
    ) -> None:
        import uvicorn

        self.app = app
        self._sock = bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = url_of(self._sock)
        config = uvicorn_config(
            app,
            read_timeout=read_timeout,
            max_connections=max_connections,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self, timeout: float = 30.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving and close the port (in-flight requests get a connection error)."""
        self.server.should_exit = True
        self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ServerProcess:
    """`ragteam serve KIND ARGS... --port 0` as a subprocess, once it listens; `url` is where.

    with ServerProcess(["retriever", "--index", "indexes/hotpot"]) as srv:
        RemoteRetriever(srv.url).search(["query"], 5)

    The announce lines (and the `serving on` line) are in `lines`; stderr goes to a temporary file whose tail is
    quoted if the server exits before it listens or does not listen within `timeout` seconds.
    """

    def __init__(
        self, args: Sequence[str], timeout: float = 120.0, env: dict[str, str] | None = None
    ) -> None:
        self.args = [*args, "--port", "0"]
        self.timeout = timeout
        self.env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.lines: list[str] = []
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._drain: threading.Thread | None = None

    def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def start(self) -> Self:
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8")
        cmd = [sys.executable, "-m", "ragteam.cli.main", "serve", *self.args]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=self.env
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + self.timeout
        watchdog = threading.Timer(self.timeout, self.proc.kill)  # a silent server would block readline
        watchdog.start()
        try:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                if line.startswith("serving on "):
                    self.url = line.split()[-1]
                    # keep reading what it prints, so a full pipe never blocks the server
                    self._drain = threading.Thread(target=self._read_rest, daemon=True)
                    self._drain.start()
                    return self
        finally:
            watchdog.cancel()
        timed_out = time.monotonic() >= deadline
        self.stop()
        why = f"did not listen within {self.timeout:.0f} s" if timed_out else "exited before listening"
        raise RuntimeError(f"`ragteam serve {' '.join(self.args)}` {why}; stderr:\n{self.stderr_tail()}")

    def stderr_tail(self, chars: int = 2000) -> str:
        """The last `chars` characters the server wrote to stderr."""
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-chars:]

    def stop(self) -> None:
        """Terminate the server (kill it if it does not stop within 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._drain is not None:
            self._drain.join(timeout=10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._stderr is not None:
            self._stderr.close()
