"""`serve team` on loopback (issue 23, items 2 and 5): it builds its indexes and loads its models before it
announces the port, with progress; `/health` says when it is ready; the first question loads nothing; and a
question whose model call runs out of memory alone is a 413 while the questions batched with it are answered.
Out of memory is simulated through the local decoder's `batch_hook`, never by exhausting memory."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.assemble.build import build_team
from ragteam.cli.serve_team import Config
from ragteam.retrieval import encoder
from ragteam.serve.team import make_app, warm_up
from ragteam.serve.testing import BackgroundServer, ServerProcess

TINY = {"model": "tiny", "device": TEST_DEVICE, "threads": 1}
GOOD = ["Who portrayed Corliss Archer?", "Who directed Doctor Strange?", "Who wrote Hamlet?"]


def _config(data, kind: str) -> Config:
    return Config(
        workflow="standard-rag",
        data=str(data),
        topk=2,
        policy=TINY,
        llm=TINY,
        retriever={"kind": kind},
        rollout={"max_tokens": 12, "llm_max_tokens": 8},
    )


def _ask(url: str, question: str) -> httpx.Response:
    body = {"model": "standard-rag", "messages": [{"role": "user", "content": question}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120)


def _encoder_loads() -> int:
    return encoder._load_model.cache_info().misses + encoder._load_transformer.cache_info().misses


@pytest.mark.slow  # real MiniLM: a hybrid index and its query encoder
def test_health_is_ready_and_the_first_question_loads_nothing(hotpot_small):
    encoder._load_model.cache_clear()  # the query encoder of a hybrid retriever loads on its first search
    encoder._load_transformer.cache_clear()
    parts = build_team(_config(hotpot_small, "hybrid"), data=str(hotpot_small))
    lines: list[str] = []
    startup = warm_up(parts.engine, say=lines.append)
    assert set(startup) == {"retriever", "llm"}  # standard-rag asks the LLM only: no policy built
    assert any("retriever" in line and "ready" in line for line in lines), lines
    loaded = _encoder_loads()
    assert loaded >= 1  # the warm-up loaded the query encoder
    app = make_app(parts.engine, parts.workflow, "standard-rag", startup=startup)
    with BackgroundServer(app) as srv:
        health = httpx.get(srv.url + "/health", timeout=10)
        assert health.status_code == 200
        assert health.json()["ready"] is True and health.json()["startup_s"] == startup
        assert _ask(srv.url, GOOD[0]).status_code == 200
    assert _encoder_loads() == loaded  # the first question waited on no startup work


@pytest.mark.slow  # serve team in a process of its own
def test_serve_team_announces_progress_before_the_port_and_reports_ready(hotpot_small):
    args = ["team", "--workflow", "standard-rag", "--data", str(hotpot_small), "--retriever.kind", "bm25"]
    args += ["--topk", "2", "--rollout.llm-max-tokens", "8"]
    args += ["--max-batch-tokens", "4096", "--prefill-chunk", "16"]
    args += [*"--policy.model tiny --llm.model tiny --llm.threads 1 --llm.device".split(), TEST_DEVICE]
    with ServerProcess(args, timeout=120) as srv:
        said = "\n".join(srv.lines)
        order = [
            said.index(part)
            for part in (
                "building team",
                "team built",
                "retriever bm25 ready",
                "LLM tiny ready",
                "serving on",
            )
        ]
        assert order == sorted(order), said  # each part ready before the port is announced
        health = httpx.get(srv.url + "/health", timeout=10).json()
        assert health["ready"] is True and health["status"] == "ok"
        assert set(health["startup_s"]) == {"retriever", "llm"}
        assert _ask(srv.url, GOOD[0]).status_code == 200


@pytest.mark.slow  # serve team in a process of its own
def test_a_question_that_runs_out_of_memory_alone_is_a_413_and_the_others_are_answered(hotpot_small):
    parts = build_team(_config(hotpot_small, "bm25"), data=str(hotpot_small))
    model = parts.llm
    poison = "Which question is too large for this server's memory?"

    def out_of_memory(rows) -> None:  # any decoding batch holding the poisoned question runs out of memory
        if any(poison in model.tokenizer.decode(r.prompt_ids) for r in rows):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (simulated)")

    model.batch_hook = out_of_memory
    app = make_app(parts.engine, parts.workflow, "standard-rag", batch_wait_ms=500)
    questions = [GOOD[0], poison, *GOOD[1:]]
    with BackgroundServer(app) as srv:
        with ThreadPoolExecutor(len(questions)) as pool:
            replies = list(pool.map(lambda q: _ask(srv.url, q), questions))
        assert [r.status_code for r in replies] == [200, 413, 200, 200], [r.text for r in replies]
        assert "does not fit in memory" in replies[1].json()["error"]["message"]
        assert app.state.batcher.batch_sizes == {4: 1}  # all four shared one engine run
        model.batch_hook = None
        assert _ask(srv.url, poison).status_code == 200  # the server goes on serving
