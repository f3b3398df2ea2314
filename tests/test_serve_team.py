"""`ragteam serve team` on loopback, spoken to with the official `openai` client: a C-3PO team of the tiny model
(policy and LLM) over a real BM25 index of HotpotQA paragraphs answers concurrent, streamed and traced
requests, shares engine runs between them, and refuses malformed or unauthorised requests with a 4xx."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from conftest import TEST_DEVICE

from ragteam.assemble.build import build_team
from ragteam.cli.serve_team import Config
from ragteam.rollout.tree import Episode
from ragteam.serve.listen import bind_socket
from ragteam.serve.team import make_app
from ragteam.serve.testing import BackgroundServer, ServerProcess

KEY = "team-secret"
CLIENTS = 32
TINY = {"model": "tiny", "device": TEST_DEVICE, "threads": 1}


def _config(data: Path, workflow: str = "c3po", **over) -> Config:
    return Config(
        workflow=workflow,
        data=str(data),
        topk=2,
        policy=TINY,
        llm=TINY,
        retriever={"kind": "bm25"},
        rollout={"max_tokens": 12, "llm_max_tokens": 8},
        **over,
    )


def _questions(data: Path) -> list[str]:
    return [json.loads(line)["question_text"] for line in data.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def team(hotpot_small):
    parts = build_team(_config(hotpot_small), data=str(hotpot_small))
    app = make_app(parts.engine, parts.workflow, "c3po", api_key=KEY, batch_wait_ms=50.0)
    with BackgroundServer(app) as srv:
        yield srv, parts


@pytest.fixture()
def client(team):
    srv, _ = team
    c = openai.OpenAI(base_url=srv.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
    yield c
    c.close()


def _ask(client: openai.OpenAI, question: str, **kw):
    return client.chat.completions.create(
        model="c3po", messages=[{"role": "user", "content": question}], **kw
    )


@pytest.mark.slow  # many concurrent clients
def test_32_concurrent_openai_requests_are_all_answered_in_shared_engine_runs(team, client, hotpot_small):
    srv, parts = team
    before = httpx.get(srv.url + "/health").json()
    questions = [_questions(hotpot_small)[i % 20] for i in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)

    def one(question: str):
        start.wait()
        return _ask(client, question, extra_body={"ragteam": {"trace": True}})

    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one, questions))
    for question, r in zip(questions, answers):
        assert r.model == "c3po" and r.object == "chat.completion"
        choice = r.choices[0]
        assert choice.finish_reason == "stop" and choice.message.role == "assistant"
        episode = Episode.from_dict(r.model_extra["ragteam"]["trace"])
        assert episode.question.question == question  # each client got its own question's episode
        assert choice.message.content == episode.answer
        assert r.model_extra["ragteam"]["status"] == episode.status != "failed"
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens > 0
    health = httpx.get(srv.url + "/health").json()
    assert health["requests"] - before["requests"] == CLIENTS
    assert health["max_run_seen"] > 1  # questions shared engine runs ...
    assert health["runs"] - before["runs"] < CLIENTS
    calls = parts.engine.calls  # ... so the engine sent their policy acts to the model in batches
    assert calls["policy_requests"] / calls["policy_batches"] > 1
    assert calls["retrieve_queries"] / calls["retrieve_batches"] > 1


def test_trace_is_the_episode_tree_only_when_asked(client, hotpot_small):
    question = _questions(hotpot_small)[0]
    plain = _ask(client, question)
    assert plain.model_extra["ragteam"] == {"status": plain.model_extra["ragteam"]["status"]}
    traced = _ask(client, question, extra_body={"ragteam": {"trace": True}})
    episode = Episode.from_dict(traced.model_extra["ragteam"]["trace"])
    assert episode.workflow == "c3po" and episode.question.question == question
    assert episode.policy_nodes()[0].role == "router"
    assert traced.choices[0].message.content == episode.answer == plain.choices[0].message.content
    calls = [n.completion for n in episode.nodes if n.completion is not None]
    assert traced.usage.completion_tokens == sum(c.completion_tokens for c in calls) > 0


def test_streamed_answer_is_the_answer_in_chunks(team, client, hotpot_small):
    srv, _ = team
    question = _questions(hotpot_small)[1]
    whole = _ask(client, question, extra_body={"ragteam": {"trace": True}})
    chunks = list(
        _ask(
            client,
            question,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ragteam": {"trace": True}},
        )
    )
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    final = [c for c in chunks if c.choices and c.choices[0].finish_reason][0]
    assert final.choices[0].finish_reason == "stop"
    assert Episode.from_dict(final.model_extra["ragteam"]["trace"]).answer == text
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    # on the wire: server-sent events ending with OpenAI's [DONE]
    body = {"model": "c3po", "stream": True, "messages": [{"role": "user", "content": question}]}
    raw = httpx.post(
        srv.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=120,
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.startswith("data: {") and raw.text.endswith("data: [DONE]\n\n")


def _post(srv, content: bytes | str, **headers) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json", **headers}
    return httpx.post(srv.url + "/v1/chat/completions", content=content, headers=headers, timeout=30)


@pytest.mark.parametrize(
    ("body", "status", "says", "param"),
    [
        (b'{"model": "c3po", "messages": [', 400, "not valid JSON", None),
        (b'["not", "an", "object"]', 400, "must be a JSON object", None),
        ({"model": "c3po"}, 400, "messages: Field required", "messages"),
        ({"messages": []}, 400, "messages: List should have at least 1 item", "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role", "messages.0.role"),
        ({"messages": [{"role": "system", "content": "be brief"}]}, 400, "no user message", "messages"),
        ({"messages": [{"role": "user", "content": "   "}]}, 400, "is empty", "messages.0.content"),
        ({"messages": [{"role": "user", "content": "q" * 9000}]}, 400, "at most 8000", "messages.0.content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            400,
            "the question must be text; it has image_url content",
            "messages.0.content",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 3}, 400, "n must be 1", "n"),
        ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, 400, "stream", "stream"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "ragteam": {"trcae": True}},
            400,
            "ragteam.trcae: Extra inputs are not permitted",
            "ragteam.trcae",
        ),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "'c3po'", "model"),
    ],
)
def test_malformed_request_gets_a_4xx_saying_why(team, body, status, says, param):
    srv, _ = team
    r = _post(srv, body if isinstance(body, bytes) else json.dumps(body))
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert says in error["message"] and error["param"] == param and error["code"] == status


def test_malformed_requests_through_the_openai_client_and_hostile_bytes(team, client):
    srv, _ = team
    with pytest.raises(openai.BadRequestError, match="no user message"):
        client.chat.completions.create(model="c3po", messages=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="this server serves 'c3po'"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.chat.completions.create(model="c3po", n=2, messages=[{"role": "user", "content": "hi"}])
    # valid JSON, but "\ud800" is a lone surrogate: no text the team can read
    r = _post(srv, b'{"messages": [{"role": "user", "content": "Who \\ud800?"}]}')
    assert r.status_code == 400 and "not valid Unicode" in r.json()["error"]["message"]
    # an oversize body is refused from its Content-Length, before it is read
    with socket.create_connection((srv.host, srv.port), timeout=10) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 50000000\r\n"
            + f"authorization: Bearer {KEY}\r\n\r\n{{}}".encode()
        )
        answer = b""
        while b"exceeds" not in answer and (more := s.recv(65536)):  # until the message, or closed
            answer += more
    assert answer.startswith(b"HTTP/1.1 413") and b"exceeds the limit of 1000000 bytes" in answer
    # the server keeps serving
    assert _ask(client, "Who portrayed Corliss Archer?").choices[0].finish_reason == "stop"


def test_api_key_is_required_on_every_route_but_health(team):
    srv, _ = team
    wrong = openai.OpenAI(base_url=srv.url + "/v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="invalid API key"):
        _ask(wrong, "Who portrayed Corliss Archer?")
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    wrong.close()
    bare = httpx.post(
        srv.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=10
    )
    assert bare.status_code == 401 and "missing API key" in bare.json()["error"]["message"]
    assert httpx.get(srv.url + "/health", timeout=10).status_code == 200


def test_models_lists_the_served_team(client):
    assert [m.id for m in client.models.list()] == ["c3po"]


def test_an_episode_that_cannot_answer_is_a_500_and_the_server_keeps_serving(hotpot_small):
    with bind_socket("127.0.0.1", 0) as sock:  # a port nobody listens on once closed
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    cfg = _config(hotpot_small, workflow="standard-rag")
    cfg.llm = {"backend": "openai", "model": "gone", "base_url": dead, "retries": 0, "timeout": 5}
    parts = build_team(cfg, data=str(hotpot_small))
    with BackgroundServer(make_app(parts.engine, parts.workflow, "standard-rag")) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="the team did not answer"):
            client.chat.completions.create(
                model="standard-rag", messages=[{"role": "user", "content": "Who wrote Hamlet?"}]
            )
        stream = client.chat.completions.create(
            model="standard-rag", stream=True, messages=[{"role": "user", "content": "Who wrote Hamlet?"}]
        )
        with pytest.raises(openai.APIError, match="the team did not answer"):
            list(stream)
        assert httpx.get(srv.url + "/health").json()["requests"] == 2
        client.close()


@pytest.mark.slow  # serve team in a process of its own
def test_serve_team_command_answers_the_openai_client(hotpot_small):
    args = ["team", "--workflow", "standard-rag", "--data", str(hotpot_small), "--retriever.kind", "bm25"]
    args += ["--topk", "2", "--rollout.llm-max-tokens", "8", "--served-name", "rag"]
    args += [
        "--policy.model",
        "tiny",
        "--llm.model",
        "tiny",
        "--llm.device",
        TEST_DEVICE,
        "--llm.threads",
        "1",
    ]
    with ServerProcess(args, env={"RAGTEAM_API_KEY": "from-env"}, timeout=120) as srv:
        assert any("team 'standard-rag'" in line and "as model 'rag'" in line for line in srv.lines)
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="from-env", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["rag"]
        r = client.chat.completions.create(
            model="rag", messages=[{"role": "user", "content": "Who portrayed Corliss Archer?"}]
        )
        assert r.choices[0].finish_reason == "stop" and r.model_extra["ragteam"]["status"] == "ok"
        client.close()
        assert httpx.get(srv.url + "/v1/models", timeout=10).status_code == 401


def test_a_question_whose_client_left_before_its_run_is_dropped(hotpot_small):
    """A client that disconnects while its question waits: its question never enters an engine run."""
    parts = build_team(_config(hotpot_small, workflow="standard-rag"), data=str(hotpot_small))
    gate = threading.Event()
    real_run = parts.engine.run

    def held_run(*args, **kwargs):  # the first run waits for the gate: later questions queue behind it
        gate.wait(30)
        return real_run(*args, **kwargs)

    parts.engine.run = held_run
    app = make_app(parts.engine, parts.workflow, "standard-rag", batch_wait_ms=0.0)
    with BackgroundServer(app) as srv:
        queue = app.state.batcher.queue
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(
                client.chat.completions.create,
                model="standard-rag",
                messages=[{"role": "user", "content": "Who wrote Hamlet?"}],
            )
            _wait(lambda: httpx.get(srv.url + "/health").json()["running"] == 1)
            body = json.dumps({"messages": [{"role": "user", "content": "Who left?"}]}).encode()
            host, port = srv.host, srv.port
            with socket.create_connection((host, port)) as s:  # sends, then hangs up without reading
                s.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                _wait(lambda: len(queue._queue) == 1)  # it waits behind the held run
            _wait(lambda: queue._queue[0].future.cancelled())  # the hang-up was seen
            gate.set()
            assert first.result().choices[0].finish_reason == "stop"
        _wait(lambda: httpx.get(srv.url + "/health").json()["dropped"] == 1)
        health = httpx.get(srv.url + "/health").json()
        assert health["requests"] == 1 and health["runs"] == 1
        client.close()


def _wait(condition, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
