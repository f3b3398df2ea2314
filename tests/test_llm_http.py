"""OpenAI-compatible server (`make_app`, as `ragteam serve llm` runs it) and the HTTP client, on loopback."""

from __future__ import annotations

import pickle

import httpx
import pytest
from conftest import TEST_DEVICE
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ragteam.llm.base import ChatRequest, Completion, ModelError, Sampling
from ragteam.llm.config import ModelConfig
from ragteam.llm.factory import build_chat_model
from ragteam.llm.local import LocalChatModel
from ragteam.llm.openai_http import OpenAIChatModel, normalize_base_url
from ragteam.llm.server import make_app
from ragteam.serving import BackgroundServer, ServerProcess, bind_socket


def _req(text: str, **sampling) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], Sampling(**sampling))


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)


@pytest.fixture(scope="module")
def server(tiny):
    app = make_app(tiny, "tiny-served", batch_wait_ms=30.0, max_n=4, max_tokens_limit=64)
    with BackgroundServer(app) as srv:
        yield srv


@pytest.fixture()
def client(server):
    c = OpenAIChatModel(server.url, "tiny-served", concurrency=8, timeout=30, retries=0)
    yield c
    c.close()


def test_http_answers_equal_local_answers(tiny, client):
    reqs = [
        _req("What is the capital of France?", max_tokens=12),
        _req("hi", max_tokens=9, stop=["e"]),
        _req("Search query: river", temperature=1.0, top_p=0.9, max_tokens=10, n=3, seed=11),
    ]
    over_http = client.chat(reqs)
    local = tiny.chat(reqs)
    for h, loc in zip(over_http, local):
        assert [c.text for c in h] == [c.text for c in loc]
        assert [c.finish_reason for c in h] == [c.finish_reason for c in loc]
        assert h[0].prompt_tokens == loc[0].prompt_tokens > 0
    assert over_http[0][0].completion_tokens == 12
    assert len(over_http[2]) == 3 and len({c.text for c in over_http[2]}) == 3


def test_concurrent_requests_are_batched(server, client):
    batcher = server.app.state.batcher
    before = batcher.batch_sizes.copy()
    results = client.chat([_req(f"question number {i}", max_tokens=6) for i in range(8)])
    assert all(isinstance(r, list) and r[0].completion_tokens == 6 for r in results)
    new = batcher.batch_sizes - before  # the batches this call produced: 8 requests in fewer than 8 batches
    assert sum(size * count for size, count in new.items()) == 8
    assert max(new) > 1, new
    health = httpx.get(f"{server.url}/health").json()
    assert health["max_batch_seen"] >= max(new) and health["requests"] >= 8


def test_models_and_health(server):
    models = httpx.get(f"{server.url}/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny-served"]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (b'{"model": "tiny-served"}', 400, "messages"),
        (b'{"messages": []}', 400, "messages"),
        (b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400, "role"),
        (b'{"messages": [{"role": "user"}]}', 400, "content"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "n": 0}', 400, "n"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "n": 5}', 400, "n must be between 1 and 4"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 65}', 400, "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}', 400, "max_tokens"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 3}', 400, "temperature"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 0}', 400, "top_p"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}', 400, "stream"),
        (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}', 404, "gpt-9"),
    ],
)
def test_bad_input_gets_4xx_with_a_message_and_the_server_keeps_serving(server, body, status, needle):
    resp = httpx.post(
        f"{server.url}/v1/chat/completions", content=body, headers={"content-type": "application/json"}
    )
    assert resp.status_code == status
    assert needle in resp.json()["error"]["message"]
    ok = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "tiny-served", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_openai_payload_shape(server):
    resp = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={
            "model": "tiny-served",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            ],
            "max_completion_tokens": 3,
            "n": 2,
            "temperature": 0.8,
            "seed": 1,
            "stop": "\n",
            "frequency_penalty": 0,  # unknown fields are ignored, as OpenAI clients send many
        },
    )
    body = resp.json()
    assert resp.status_code == 200
    assert body["object"] == "chat.completion" and body["model"] == "tiny-served"
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(
        c["message"]["role"] == "assistant" and c["finish_reason"] in ("stop", "length")
        for c in body["choices"]
    )
    u = body["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] <= 6


def test_client_retries_then_names_the_endpoint_when_the_server_is_down():
    with bind_socket("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]  # nothing listens there any more
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "x", retries=2, backoff=0.01, timeout=5)
    out = model.chat([_req("hi"), _req("there")])
    assert all(isinstance(r, ModelError) for r in out)
    assert out[0].where == f"http://127.0.0.1:{port}/v1/chat/completions"
    assert "failed after 3 attempts" in out[0].message and "ConnectError" in out[0].message
    assert model.stats["http_calls"] == 6 and model.stats["retries"] == 4 and model.stats["errors"] == 2


def _flaky_app() -> FastAPI:
    """A real server that fails twice with 503, answers 400 for 'bad', gives only one choice, checks the key."""
    app = FastAPI()
    app.state.calls = 0

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.calls += 1
        if request.headers.get("authorization") != "Bearer sekret":
            return JSONResponse({"error": {"message": "bad key"}}, 401)
        if body["messages"][0]["content"] == "bad":
            return JSONResponse({"error": {"message": "no such thing"}}, 400)
        if body["messages"][0]["content"] == "flaky" and app.state.calls <= 2:
            return JSONResponse({"error": {"message": "overloaded"}}, 503)
        if body["messages"][0]["content"] == "busy":
            return JSONResponse({"detail": "slow down"}, 429)
        text = f"seed={body.get('seed')} n={body['n']}"
        return {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }

    return app


def test_client_retries_5xx_stops_on_4xx_fills_missing_choices_and_sends_the_key(monkeypatch):
    monkeypatch.setenv("RAGTEAM_TEST_KEY", "sekret")
    app = _flaky_app()
    with BackgroundServer(app) as srv:
        model = OpenAIChatModel(srv.url, "m", api_key_env="RAGTEAM_TEST_KEY", retries=3, backoff=0.01)
        [flaky] = model.chat([_req("flaky")])
        assert [c.text for c in flaky] == ["seed=None n=1"] and app.state.calls == 3
        [bad] = model.chat([_req("bad")])
        assert isinstance(bad, ModelError) and "HTTP 400: no such thing" in bad.message
        assert app.state.calls == 4  # a 4xx is not retried
        [busy] = model.chat([_req("busy")])
        assert isinstance(busy, ModelError) and "429: slow down" in busy.message and app.state.calls == 8
        [three] = model.chat([_req("ok", n=3, seed=10)])
        assert [c.text for c in three] == ["seed=10 n=3", "seed=11 n=1", "seed=12 n=1"]
        assert all(c.prompt_tokens == 5 for c in three)
        unkeyed = OpenAIChatModel(srv.url, "m", api_key_env="RAGTEAM_NO_SUCH_KEY", retries=0)
        [denied] = unkeyed.chat([_req("ok")])
        assert isinstance(denied, ModelError) and "401" in denied.message and srv.url in denied.where
        clone = pickle.loads(pickle.dumps(model))  # picklable for worker processes
        assert clone.chat([_req("ok")])[0][0].text == "seed=None n=1"


def test_config_and_factory(server):
    local = build_chat_model(ModelConfig(model="tiny", device=TEST_DEVICE, max_batch_size=3))
    assert isinstance(local, LocalChatModel) and local.max_batch_size == 3
    remote = build_chat_model(ModelConfig(backend="openai", model="tiny-served", base_url=server.url))
    assert isinstance(remote, OpenAIChatModel) and remote.endpoint == f"{server.url}/v1/chat/completions"
    assert remote.chat([_req("hi", max_tokens=2)])[0][0].completion_tokens == 2
    with pytest.raises(ValueError, match="base_url"):
        build_chat_model(ModelConfig(backend="openai", model="x"))
    assert normalize_base_url("http://h:1/") == "http://h:1/v1"
    assert normalize_base_url("https://api.example.com/v1/") == "https://api.example.com/v1"
    with pytest.raises(ValueError, match="base_url"):
        normalize_base_url("localhost:8000")


def test_serve_llm_command_serves_the_tiny_model():
    with ServerProcess(
        ["llm", "--model", "tiny", "--device", TEST_DEVICE, "--served-name", "tiny-cli"], timeout=60
    ) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and not srv.url.endswith(":0")
        models = httpx.get(srv.url + "/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "tiny-cli"
        client = OpenAIChatModel(srv.url, "tiny-cli", retries=0)
        [[c]] = client.chat([_req("hi", max_tokens=3)])
        assert c.completion_tokens == 3 and c.finish_reason == "length"
        assert any("tiny-cli" in line for line in srv.lines)  # the announce line names the served model


class _Fragile:
    """A ChatModel that crashes on 'boom' and returns a ModelError on 'fail' (server error paths)."""

    name = "fragile"
    max_batch_size = 4

    def chat(self, requests):
        texts = [r.messages[-1]["content"] for r in requests]
        if "boom" in texts:
            raise RuntimeError("kaboom")
        return [
            ModelError("cannot", where="fragile") if t == "fail" else [Completion(text=t.upper())]
            for t in texts
        ]


def test_model_failures_become_500_and_the_server_keeps_serving():
    with BackgroundServer(make_app(_Fragile(), "fragile", batch_wait_ms=0)) as srv:
        client = OpenAIChatModel(srv.url, "fragile", retries=0)
        boom, fail = client.chat([_req("boom")]), client.chat([_req("fail")])
        assert (
            isinstance(boom[0], ModelError) and "HTTP 500" in boom[0].message and "kaboom" in boom[0].message
        )
        assert isinstance(fail[0], ModelError) and "fragile: cannot" in fail[0].message
        assert client.chat([_req("fine")])[0][0].text == "FINE"
