"""Running ragteam's HTTP apps with uvicorn: `serve` is what the `ragteam serve ...` commands call.

It binds first, so `--port 0` picks a free port, and the first line it prints is `serving on http://HOST:PORT`
(scripts and tests read the port from it); it warns on stderr when it listens beyond loopback without an API
key. A connection must send a complete request head within `read_timeout` seconds of opening (or of its
previous response), so a client sending a byte now and then cannot hold a connection forever;
`max_connections` caps open connections (more get 503). Test harnesses that run a server: `ragteam.serve.testing`.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import sys
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from ragteam.config import Config
from ragteam.serve.guard import (
    API_KEY_ENV,
    MAX_CONNECTIONS,
    MAX_READ_TIMEOUT_S,
    READ_TIMEOUT_S,
    check_read_timeout,
)


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
        READ_TIMEOUT_S,
        gt=0,
        le=MAX_READ_TIMEOUT_S,
        description="seconds a client has to send a request's head, then its body",
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

    check_read_timeout(read_timeout)
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
