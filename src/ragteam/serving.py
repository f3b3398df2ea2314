"""Running ragteam's HTTP apps (the /retrieve service, the OpenAI-compatible LLM server) with uvicorn.

`serve` is what the `ragteam serve ...` commands call: it binds first, so `--port 0` picks a free port, and the
first line it prints is `serving on http://HOST:PORT` (scripts and tests read the port from it).
`BackgroundServer` runs an app in a thread on an ephemeral loopback port, and `ServerProcess` runs a
`ragteam serve ...` command as a subprocess on one, for tests, benchmarks and notebooks.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import IO, Any, Self


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


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
) -> None:
    """Run `app` with uvicorn until interrupted. Prints the `announce` lines, then `serving on URL`, on stdout."""
    import uvicorn

    sock = bind_socket(host, port)
    for line in announce:
        print(line, flush=True)
    print(f"serving on {url_of(sock)}", flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=30)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread on 127.0.0.1 and an ephemeral port (tests, notebooks).

    with BackgroundServer(make_app(model, "tiny")) as srv:
        OpenAIChatModel(srv.url + "/v1", "tiny").chat(...)
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.app = app
        self._sock = bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = url_of(self._sock)
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
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
