"""The LLM server's scheduling on loopback: a short request batched with a long one is answered when it ends, a
client that disconnects cancels its generation (queued or mid-batch), the operator's max-tokens cap and
`serve llm --model.threads`.

A long request on demand: the tiny model with its end-of-turn token made impossible (`never_ends`) decodes
until max_tokens, so "long" is a number of decoding steps, not a hope about random weights."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, ModelError, Sampling
from ragteam.llm.local import LocalChatModel
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer, ServerProcess

LONG = 1000  # decoding steps of the long request: seconds on a CPU, against 4 for the short ones


class _NoEndOfTurn(torch.nn.Module):
    """A causal LM whose banned tokens get -inf logits: it never ends a reply by itself."""

    def __init__(self, inner: torch.nn.Module, banned: list[int]) -> None:
        super().__init__()
        self.inner, self.banned = inner, banned
        self.config, self.generation_config = inner.config, inner.generation_config

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        out.logits[..., self.banned] = float("-inf")
        return out


@pytest.fixture(scope="module")
def never_ends() -> LocalChatModel:
    tiny = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)
    model = _NoEndOfTurn(tiny.model, sorted(tiny.eos_ids))
    return LocalChatModel.from_model(model, tiny.tokenizer, name="never-ends", max_batch_size=16)


def _body(text: str, max_tokens: int) -> dict:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def _send_and_keep_open(srv: BackgroundServer, body: dict) -> socket.socket:
    """A request whose client stays connected, not reading, until the test closes the socket."""
    data = json.dumps(body).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    s.sendall(head.encode() + data)
    return s


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_hooks_change_no_token_and_report_each_request_when_it_ends(never_ends):
    reqs = [
        ChatRequest([{"role": "user", "content": "a long one"}], Sampling(max_tokens=60)),
        ChatRequest([{"role": "user", "content": "short"}], Sampling(max_tokens=3)),
        ChatRequest(
            [{"role": "user", "content": "sampled"}], Sampling(temperature=1.0, max_tokens=5, n=2, seed=3)
        ),
    ]
    plain = never_ends.chat(reqs)
    order: list[int] = []
    hooked = never_ends.chat(reqs, cancelled=lambda i: False, on_result=lambda i, r: order.append(i))
    assert [[c.completion_ids for c in r] for r in hooked] == [[c.completion_ids for c in r] for r in plain]
    assert order == [1, 2, 0]  # as each request's rows finish: 3 steps, 5 steps, 60 steps
    assert [c.completion_tokens for c in hooked[0]] == [60]
    # a cancelled request leaves the batch at the next step; the others are untouched
    steps = {"n": 0}

    def cancel_first_after_ten(i: int) -> bool:
        steps["n"] += i == 0
        return i == 0 and steps["n"] > 10

    before = never_ends.stats["generated_tokens"]
    out = never_ends.chat(reqs, cancelled=cancel_first_after_ten)
    assert isinstance(out[0], ModelError) and "cancelled" in out[0].message
    assert [c.completion_ids for c in out[1]] == [c.completion_ids for c in plain[1]]
    assert never_ends.stats["generated_tokens"] - before < 60 + 3 + 2 * 5  # the long row stopped early


@pytest.fixture()
def server(never_ends):
    app = make_app(never_ends, "never-ends", batch_wait_ms=400.0, max_tokens_limit=LONG)
    with BackgroundServer(app) as srv:
        yield srv, app.state.batcher


def test_short_request_batched_with_a_long_one_is_answered_when_it_ends(server):
    srv, batcher = server
    done: dict[str, float] = {}
    replies: dict[str, dict] = {}

    def post(name: str, max_tokens: int) -> None:
        r = httpx.post(srv.url + "/v1/chat/completions", json=_body(name, max_tokens), timeout=120)
        replies[name], done[name] = r.json(), time.monotonic()

    long = threading.Thread(target=post, args=("long", LONG))
    long.start()
    time.sleep(0.05)  # well inside the 400 ms batching window: both go into one batch
    post("short", 4)
    assert long.is_alive()  # the short reply came back while the long request still decodes
    long.join(120)
    assert batcher.batch_sizes == {2: 1}  # one batch held both
    assert replies["short"]["usage"]["completion_tokens"] == 4
    assert replies["long"]["usage"]["completion_tokens"] == LONG
    assert done["short"] < done["long"]


def test_a_client_that_disconnects_cancels_its_generation_queued_or_running(server, never_ends):
    srv, batcher = server
    tokens0 = never_ends.stats["generated_tokens"]
    running = _send_and_keep_open(srv, _body("long and abandoned", LONG))
    _wait(lambda: never_ends.stats["generated_tokens"] - tokens0 > 50)  # it decodes
    queued = _send_and_keep_open(srv, _body("queued and abandoned", LONG))
    _wait(lambda: batcher.queue.qsize() == 1)  # waits behind the running batch
    queued.close()
    running.close()
    _wait(lambda: batcher.cancelled == 2)  # counted once the batch is over
    generated = never_ends.stats["generated_tokens"] - tokens0
    assert generated < LONG  # the running one stopped early, the queued one never started
    assert batcher.requests == 1 and batcher.batches == 1
    health = httpx.get(srv.url + "/health", timeout=10).json()
    assert health["cancelled"] == 2 and health["requests"] == 1
    # and the model is free again: a short request is answered at once
    r = httpx.post(srv.url + "/v1/chat/completions", json=_body("next", 4), timeout=60).json()
    assert r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 4
    assert never_ends.stats["generated_tokens"] - tokens0 == generated + 4


@pytest.mark.slow  # serve llm in a process of its own
def test_operator_cap_and_threads_flag_of_serve_llm():
    args = [
        "llm",
        "--model.model",
        "tiny",
        "--model.device",
        TEST_DEVICE,
        "--model.threads",
        "1",
        "--max-tokens-limit",
        "32",
    ]
    with ServerProcess(args, timeout=60) as srv:
        over = httpx.post(srv.url + "/v1/chat/completions", json=_body("hi", 33), timeout=30)
        assert over.status_code == 400
        assert over.json()["error"]["message"] == "max_tokens must be between 1 and 32, got 33"
        ok = httpx.post(srv.url + "/v1/chat/completions", json=_body("hi", 32), timeout=30)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] <= 32
