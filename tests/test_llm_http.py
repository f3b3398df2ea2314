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
from ragteam.serve.listen import bind_socket
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer, ServerProcess


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
        (b'{"messages": [{"role": "user", "content": "hi"}], "logprobs": "maybe"}', 400, "logprobs"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "logprobs": 1}', 400, "logprobs"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 21}', 400, "top_logprobs"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": -1}', 400, "top_logprobs"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": "x"}', 400, "top_logprobs"),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2, "max_tokens": 2}',
            400,
            "top_logprobs needs logprobs: true",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "return_token_ids": "yes"}',
            400,
            "return_token_ids",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "return_tokens_as_token_ids": 2}',
            400,
            "return_tokens_as_token_ids",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "continue_final_message": true, '
            b'"add_generation_prompt": false, "max_tokens": 2}',
            400,
            "final assistant message",
        ),
        (
            b'{"messages": [{"role": "assistant", "content": "A"}], "continue_final_message": true, '
            b'"max_tokens": 2}',
            400,
            "add_generation_prompt",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false, '
            b'"max_tokens": 2}',
            400,
            "add_gen",
        ),
        (
            b'{"messages": [{"role": "user", "content": "hi"}], "sample_after_prefix": "no"}',
            400,
            "sample_after",
        ),
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


def _assert_scored_like_local(tiny: LocalChatModel, completions: list[Completion]) -> None:
    """Each completion's log-probs are the local model's on its prompt and completion ids, to 1e-4."""
    assert all(c.prompt_ids and c.completion_ids and c.logprobs is not None for c in completions)
    rescored = tiny.logprobs([c.prompt_ids for c in completions], [c.completion_ids for c in completions])
    for c, lp in zip(completions, rescored):
        assert c.completion_tokens == len(c.completion_ids) == len(c.logprobs)
        assert c.logprobs == pytest.approx(lp, abs=1e-4)


def test_http_token_ids_and_logprobs_equal_local(tiny, client):
    reqs = [
        _req("What is the capital of France?", max_tokens=12),
        _req("hi", max_tokens=9, stop=["e"]),
        _req("Search query: river", temperature=1.0, top_p=0.9, max_tokens=10, n=3, seed=11),
    ]
    over_http, local = client.chat(reqs), tiny.chat(reqs)
    for h, loc in zip(over_http, local):
        for c, lc in zip(h, loc, strict=True):
            assert c.prompt_ids == lc.prompt_ids and c.completion_ids == lc.completion_ids
            assert c.logprobs == pytest.approx(lc.logprobs, abs=1e-4)
            assert c.forced_tokens == 0 and c.logprobs_temperature == 1.0
        _assert_scored_like_local(tiny, h)


def test_forced_prefix_over_http_equals_local(tiny, client):
    msgs = [{"role": "user", "content": "Which city is the capital of France?"}]
    reqs = [
        ChatRequest(msgs, Sampling(max_tokens=6), prefix="The answer is"),
        ChatRequest(msgs, Sampling(temperature=1.0, max_tokens=6, n=2, seed=3), prefix="Thought:"),
        ChatRequest(msgs, Sampling(max_tokens=6), prefix="yes", sample_after_prefix=False),
    ]
    over_http, local = client.chat(reqs), tiny.chat(reqs)
    for req, h, loc in zip(reqs, over_http, local):
        for c, lc in zip(h, loc, strict=True):
            assert c.text == lc.text and c.text.startswith(req.prefix)
            assert c.completion_ids == lc.completion_ids and c.forced_tokens == lc.forced_tokens > 0
            assert c.finish_reason == lc.finish_reason
        _assert_scored_like_local(tiny, h)
    [closed] = over_http[2]
    assert closed.text == "yes" and closed.completion_ids[-1] in tiny.eos_ids
    assert closed.forced_tokens == len(closed.completion_ids) - 1


def test_logprobs_payload_shape(tiny, server):
    url = f"{server.url}/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The answer"}]
    resp = httpx.post(
        url,
        json={
            "messages": msgs,
            "continue_final_message": True,
            "add_generation_prompt": False,
            "max_tokens": 3,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    [choice] = body["choices"]
    forced = len(tiny.prefix_ids("The answer"))
    assert choice["message"]["content"].startswith("The answer") and choice["forced_tokens"] == forced
    entries = choice["logprobs"]["content"]
    # up to 3 sampled tokens (fewer if the model ends its turn: greedy ties may break either way when the
    # server batches this request with another one's padding)
    assert len(entries) == len(choice["token_ids"]) == body["usage"]["completion_tokens"]
    assert forced < len(entries) <= forced + 3
    assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert all(e["top_logprobs"] == [] and e["logprob"] <= 0 for e in entries)
    assert body["prompt_token_ids"] == tiny.prompt_ids(msgs[:1])
    # without the extras: text tokens, no ids; without logprobs: null, as OpenAI
    plain = httpx.post(
        url, json={"messages": msgs[:1], "max_tokens": 2, "logprobs": True, "temperature": 0}
    ).json()
    [choice] = plain["choices"]
    assert "token_ids" not in choice and "prompt_token_ids" not in plain and choice["forced_tokens"] == 0
    entries = choice["logprobs"]["content"]
    assert len(entries) == plain["usage"]["completion_tokens"]
    for e in entries:  # a token's bytes are its text's UTF-8, or null where it holds part of a character
        assert e["bytes"] is None and "\ufffd" in e["token"] or bytes(e["bytes"]).decode() == e["token"]
    if all(e["bytes"] is not None for e in entries):
        assert "".join(e["token"] for e in entries) == choice["message"]["content"]
    without = httpx.post(url, json={"messages": msgs[:1], "max_tokens": 2}).json()
    assert without["choices"][0]["logprobs"] is None


def _vllm_like_app(rejects: frozenset[str] = frozenset(), tokenize: bool = False) -> FastAPI:
    """A server that answers like vLLM (continuation only, prefix counted as prompt), or like a server that
    rejects the fields in `rejects` with a 400 naming them (OpenAI's 'Unrecognized request argument').
    Canned: the prompt is [1, 2, 3], the reply "ok" = [7, 8] (or the one allowed id). `tokenize`: a vLLM
    `/tokenize` that spells every prompt [3] and the chat template's end-of-turn 9."""
    app = FastAPI()
    app.state.bodies = []

    if tokenize:

        @app.post("/tokenize")
        async def tokenize_route(request: Request):
            body = await request.json()
            if "messages" in body:  # the template writes 9 after an assistant message's content
                return {"tokens": [1, 2] if body["continue_final_message"] else [1, 2, 9, 4]}
            return {"tokens": [3]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        app.state.bodies.append(body)
        unknown = sorted(k for k in rejects if k in body)
        if unknown:
            message = f"Unrecognized request argument supplied: {', '.join(unknown)}"
            return JSONResponse({"error": {"message": message}}, 400)
        as_ids = body.get("return_tokens_as_token_ids")
        allowed = body.get("allowed_token_ids")
        content = "" if allowed else "ok"
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        if body.get("logprobs"):
            tokens = (
                [f"token_id:{allowed[0]}"]
                if allowed
                else ["token_id:7", "token_id:8"]
                if as_ids
                else ["o", "k"]
            )
            choice["logprobs"] = {
                "content": [
                    {"token": t, "logprob": lp, "top_logprobs": []} for t, lp in zip(tokens, [-0.5, -0.25])
                ]
            }
        out = {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = [1, 2, 3]
        if body.get("prompt_logprobs") is not None:
            out["prompt_logprobs"] = [
                None,
                {"2": {"logprob": -1.5}},
                {"3": {"logprob": -2.0}, "5": {"logprob": -0.1}},
            ]
        return out

    return app


def test_client_reads_vllm_ids_and_keeps_the_prefix_text():
    with BackgroundServer(_vllm_like_app()) as srv:
        model = OpenAIChatModel(srv.url, "m", retries=0)
        [[p]] = model.chat([_req("q")])
        assert p.text == "ok" and p.completion_ids == [7, 8] and p.logprobs == [-0.5, -0.25]
        assert p.prompt_ids == [1, 2, 3] and p.forced_tokens == 0
        [[c]] = model.chat([ChatRequest([{"role": "user", "content": "q"}], Sampling(), prefix="A: ")])
        # vLLM counts the prefix as prompt; without /tokenize its ids cannot be told from the prompt's, so the
        # completion keeps its text and no ids (tests/test_forced_prefix_http.py: the exact record)
        assert c.text == "A: ok" and c.forced_tokens == 0
        assert c.completion_ids is None and c.logprobs is None and c.prompt_ids is None
        sent = srv.app.state.bodies[-1]
        assert sent["messages"][-1] == {"role": "assistant", "content": "A: "}
        assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
        assert sent["logprobs"] is True and sent["top_logprobs"] == 0 and sent["return_token_ids"] is True
        assert sent["prompt_logprobs"] == 0  # the prefix's log-probs, were its ids known
        bodies = srv.app.state.bodies
        closed = ChatRequest([{"role": "user", "content": "q"}], prefix="B", sample_after_prefix=False)
        [[b]] = model.chat([closed])  # a server that ignores sample_after_prefix samples one token
        assert b.text == "B" and b.completion_ids is None  # the reply asked for: the prefix alone
        assert bodies[-1]["max_tokens"] == 1 and bodies[-1]["sample_after_prefix"] is False
        assert "allowed_token_ids" not in bodies[-1]  # no /tokenize: end-of-turn unknown
        plain = OpenAIChatModel(srv.url, "m", retries=0, logprobs=False)
        [[p]] = plain.chat([_req("q")])
        assert p.text == "ok" and p.completion_ids is None and p.logprobs is None and p.prompt_ids is None
        assert not {"logprobs", "top_logprobs", "return_token_ids"} & set(bodies[-1])


def test_client_records_a_vllm_forced_prefix_as_completion_tokens():
    """With /tokenize: the prefix's ids move from the prompt to the head of the completion, their log-probs
    from prompt_logprobs; a closed prefix asks end-of-turn as the only allowed token."""
    with BackgroundServer(_vllm_like_app(tokenize=True)) as srv:
        model = OpenAIChatModel(srv.url, "m", retries=0)
        [[c]] = model.chat([ChatRequest([{"role": "user", "content": "q"}], Sampling(), prefix="A: ")])
        assert c.text == "A: ok" and c.forced_tokens == 1 and c.prompt_ids == [1, 2]
        assert c.completion_ids == [3, 7, 8] and c.logprobs == [-2.0, -0.5, -0.25]
        assert c.prompt_tokens == 2 and c.completion_tokens == 3
        closed = ChatRequest([{"role": "user", "content": "q"}], prefix="B", sample_after_prefix=False)
        [[b]] = model.chat([closed])
        assert srv.app.state.bodies[-1]["allowed_token_ids"] == [9]
        assert b.text == "B" and b.finish_reason == "stop" and b.forced_tokens == 1
        assert b.prompt_ids == [1, 2] and b.completion_ids == [3, 9] and b.logprobs == [-2.0, -0.5]
        # the prefixes "A: " and "B", and one message rendered open and closed (end-of-turn): then cached
        assert model.stats["tokenize_calls"] == 4
        model.chat([closed])
        assert model.stats["tokenize_calls"] == 4


@pytest.mark.parametrize(
    ("rejects", "has_logprobs"),
    [
        (frozenset({"return_tokens_as_token_ids", "return_token_ids"}), True),  # OpenAI's API
        (frozenset({"logprobs", "top_logprobs", "return_tokens_as_token_ids", "return_token_ids"}), False),
        (frozenset({"logprobs"}), False),
    ],
)
def test_client_drops_the_extras_a_server_rejects_and_remembers(rejects, has_logprobs):
    with BackgroundServer(_vllm_like_app(rejects)) as srv:
        model = OpenAIChatModel(srv.url, "m", retries=0)
        [[first]] = model.chat([_req("q", n=1)])
        bodies = srv.app.state.bodies
        assert len(bodies) == 2 and not rejects & set(bodies[-1])
        [[second]] = model.chat([_req("q")])
        assert len(bodies) == 3 and not rejects & set(bodies[-1])  # asked without them at once
        for c in (first, second):
            assert c.text == "ok" and c.completion_ids is None and c.prompt_ids is None
            assert c.logprobs == ([-0.5, -0.25] if has_logprobs else None) and c.completion_tokens == 2
        clone = pickle.loads(pickle.dumps(model))  # remembered across pickling, too
        clone.chat([_req("q")])
        assert len(bodies) == 4


def test_config_and_factory(server):
    local = build_chat_model(ModelConfig(model="tiny", device=TEST_DEVICE, max_batch_size=3))
    assert isinstance(local, LocalChatModel) and local.max_batch_size == 3
    remote = build_chat_model(ModelConfig(backend="openai", model="tiny-served", base_url=server.url))
    assert isinstance(remote, OpenAIChatModel) and remote.endpoint == f"{server.url}/v1/chat/completions"
    no_logprobs = build_chat_model(
        ModelConfig(backend="openai", model="x", base_url=server.url, logprobs=False)
    )
    assert remote.logprobs and not no_logprobs.logprobs
    assert remote.chat([_req("hi", max_tokens=2)])[0][0].completion_tokens == 2
    with pytest.raises(ValueError, match="base_url"):
        build_chat_model(ModelConfig(backend="openai", model="x"))
    assert normalize_base_url("http://h:1/") == "http://h:1/v1"
    assert normalize_base_url("https://api.example.com/v1/") == "https://api.example.com/v1"
    with pytest.raises(ValueError, match="base_url"):
        normalize_base_url("localhost:8000")


@pytest.mark.slow  # serve llm in a process of its own
def test_serve_llm_command_serves_the_tiny_model(tiny):
    with ServerProcess(
        ["llm", "--model.model", "tiny", "--model.device", TEST_DEVICE, "--served-name", "tiny-cli"],
        timeout=60,
    ) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and not srv.url.endswith(":0")
        models = httpx.get(srv.url + "/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "tiny-cli"
        client = OpenAIChatModel(srv.url, "tiny-cli", retries=0)
        [[c]] = client.chat([_req("hi", max_tokens=3)])
        assert c.completion_tokens == 3 and c.finish_reason == "length"
        # token ids and log-probs over HTTP, from another process: the local model's on the same tokens
        [sampled, forced] = client.chat(
            [
                _req("Search query: river", temperature=1.0, max_tokens=8, n=2, seed=5),
                ChatRequest(
                    [{"role": "user", "content": "hi"}], Sampling(max_tokens=4), prefix="The answer is"
                ),
            ]
        )
        local = tiny.chat([_req("Search query: river", temperature=1.0, max_tokens=8, n=2, seed=5)])[0]
        assert [h.completion_ids for h in sampled] == [loc.completion_ids for loc in local]
        _assert_scored_like_local(tiny, [*sampled, *forced])
        assert forced[0].text.startswith("The answer is") and forced[0].forced_tokens > 0
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
