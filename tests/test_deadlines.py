"""`OpenAIChatModel`'s `timeout` is a deadline for each HTTP attempt, from connecting to the reply's last byte,
and a request's attempts together take at most `max_call_seconds`; replies are read up to `max_reply_bytes`.
Before, the timeout bounded each socket read: a server trickling its body a byte every 3 s kept `ask
--llm.timeout 10 --llm.retries 1` waiting for about 750 s, and a 300 MB reply was read whole, then refused."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ragteam.llm.base import ChatRequest, ModelError, Sampling
from ragteam.llm.openai_http import OpenAIChatModel

TRICKLE_FOR_S = 30.0  # how long a trickling server goes on (old code: each attempt waited all of it)
REPLY = json.dumps(
    {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}
).encode()


def _serve(handler: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback HTTP server that answers every connection with `handler(conn)` in its own thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # closed: the test is over
                return
            threading.Thread(target=_handle, args=(conn,), daemon=True).start()

    def _handle(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)  # the request (small enough to arrive in one piece)
            try:
                handler(conn)
            except OSError:  # the client hung up: what a deadline does
                pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        listener.close()


def _trickle(data: bytes, head: bytes = b"") -> Callable[[socket.socket], None]:
    def handler(conn: socket.socket) -> None:
        conn.sendall(head)
        end = time.monotonic() + TRICKLE_FOR_S
        for i in range(len(data)):
            if time.monotonic() > end:
                return
            conn.sendall(data[i : i + 1])
            time.sleep(0.3)

    return handler


def _headers(length: int) -> bytes:
    return f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n".encode()


def _ask(model: OpenAIChatModel) -> tuple[object, float]:
    started = time.monotonic()
    [result] = model.chat([ChatRequest([{"role": "user", "content": "hi"}], Sampling(max_tokens=4))])
    return result, time.monotonic() - started


@pytest.fixture
def server(request) -> Iterator[str]:
    yield from _serve(request.param)


@pytest.mark.parametrize(
    "server",
    [
        _trickle(REPLY * 100, _headers(len(REPLY) * 100)),  # the body, a byte every 0.3 s
        _trickle(_headers(len(REPLY)) + REPLY),  # the status line and headers too
    ],
    indirect=True,
)
def test_a_trickling_reply_is_cut_at_the_deadline_retries_included(server):
    model = OpenAIChatModel(server, "m", timeout=1.5, retries=1, backoff=0.1, max_backoff=0.1)
    assert model.max_call_seconds == pytest.approx(2 * 1.5 + 0.1)
    result, took = _ask(model)
    assert isinstance(result, ModelError), result
    assert "failed after 2 attempts" in result.message and "no complete reply within 1.5 s" in result.message
    assert took < model.max_call_seconds + 1.0, took
    assert model.stats["http_calls"] == 2


def _huge_declared(conn: socket.socket) -> None:
    conn.sendall(_headers(300_000_000) + b"{")


def _huge_chunked(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(200):  # 13 MB, more than the client's limit below
        conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")


@pytest.mark.parametrize("server", [_huge_declared, _huge_chunked], indirect=True)
def test_a_reply_over_the_size_limit_is_refused_without_reading_it_whole(server):
    model = OpenAIChatModel(server, "m", timeout=20, retries=2, max_reply_bytes=1_000_000)
    result, took = _ask(model)
    assert isinstance(result, ModelError) and "at most 1000000 are read" in result.message, result
    assert model.stats["http_calls"] == 1 and took < 10  # not retried: the same request gets the same reply


@pytest.mark.parametrize("server", [lambda c: c.sendall(_headers(len(REPLY)) + REPLY)], indirect=True)
def test_a_prompt_reply_within_the_deadline_reads_as_before(server):
    result, _ = _ask(OpenAIChatModel(server, "m", timeout=5, retries=0, logprobs=False))
    assert not isinstance(result, ModelError) and result[0].text == "hi"


def test_timeouts_are_finite_and_positive():
    for bad in (math.inf, math.nan, 0, -1):
        with pytest.raises(ValueError, match="timeout must be a finite number > 0"):
            OpenAIChatModel("http://127.0.0.1:1/v1", "m", timeout=bad)
