"""Running a server for a test, a benchmark or a notebook: `BackgroundServer` runs an app in a thread on an
ephemeral loopback port, `ServerProcess` runs a `ragteam serve ...` command as a subprocess on one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import IO, Any, Self

from ragteam.serve.guard import MAX_CONNECTIONS, READ_TIMEOUT_S
from ragteam.serve.listen import bind_socket, url_of, uvicorn_config


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
