"""Memory-safe batching (issue 23, item 2), over a real loopback server with the tiny model: decoding batches
formed by a token budget, a long request decoded apart from the short ones it arrived with, and a batch that
runs out of memory run again row by row, so only the request that cannot fit alone fails (413 naming its size
and the budget) while the requests batched with it get the answers they get alone.

Out of memory is simulated through the decoder's `batch_hook` (called with each decoding batch's rows before
it runs), never by exhausting the machine's memory."""

from __future__ import annotations

import weakref
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, Sampling
from ragteam.llm.decoder import Row
from ragteam.llm.local import LocalChatModel
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer

MAX_TOKENS = 4
SHORT = [f"short question {i}" for i in range(4)]
LONG = "a long question " + "with many words " * 120


@pytest.fixture()
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)


def _body(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": MAX_TOKENS, "temperature": 0}


def _ask_together(url: str, texts: list[str]) -> list[httpx.Response]:
    """All `texts` at once, one client each, so the server gathers them into one batch (batch_wait_ms)."""
    with ThreadPoolExecutor(len(texts)) as pool:
        return list(
            pool.map(lambda t: httpx.post(url + "/v1/chat/completions", json=_body(t), timeout=120), texts)
        )


def _tokens(model: LocalChatModel, text: str) -> int:
    return model.count_tokens([{"role": "user", "content": text}])


def _alone(model: LocalChatModel, text: str) -> str:
    [result] = model.chat([ChatRequest([{"role": "user", "content": text}], Sampling(max_tokens=MAX_TOKENS))])
    assert isinstance(result, list), result
    return result[0].text


def test_a_long_request_among_short_ones_is_decoded_apart(tiny):
    long_tokens = _tokens(tiny, LONG)
    short_tokens = max(_tokens(tiny, t) for t in SHORT)
    assert long_tokens > 4 * short_tokens  # the premise: "long" is long next to the short ones
    # room for the long request alone, not for it and one more row padded to its width; all the short ones fit
    tiny.max_batch_tokens = long_tokens + MAX_TOKENS + 10
    batches: list[list[int]] = []
    tiny.batch_hook = lambda rows: batches.append([len(r.inputs) for r in rows])
    app = make_app(tiny, "tiny", batch_wait_ms=500)
    with BackgroundServer(app) as srv:
        replies = _ask_together(srv.url, [*SHORT[:2], LONG, *SHORT[2:]])
        assert [r.status_code for r in replies] == [200] * 5, [r.text for r in replies]
        assert httpx.get(srv.url + "/health", timeout=10).json()["max_batch_tokens"] == tiny.max_batch_tokens
    assert app.state.batcher.batch_sizes == {5: 1}  # the server gathered all five into one batch ...
    assert sorted(map(len, batches)) == [1, 4]  # ... and decoded the long one apart from the four short ones
    assert [long_tokens] in batches
    assert all(n <= short_tokens for batch in batches if len(batch) == 4 for n in batch)
    for text, reply in zip([*SHORT[:2], LONG, *SHORT[2:]], replies):  # the answers they get alone
        assert reply.json()["choices"][0]["message"]["content"] == _alone(tiny, text)


def test_plan_batches_keeps_the_row_cap_without_a_budget(tiny):
    """No budget: batches of max_batch_size rows, as before the budget existed."""
    rows = [
        Row(0, j, [1] * n, [1] * n, "", 0, False, Sampling(max_tokens=4), 4, None)
        for j, n in enumerate(range(1, 40))
    ]
    assert [len(b) for b in tiny.plan_batches(rows)] == [16, 16, 7]
    tiny.max_batch_tokens = 100  # rows x (longest input + longest max_new) <= 100
    for batch in tiny.plan_batches(rows):
        assert len(batch) == 1 or len(batch) * (max(len(r.inputs) for r in batch) + 4) <= 100


def _out_of_memory_when(condition):
    def hook(rows: list[Row]) -> None:
        if condition(rows):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    return hook


@pytest.mark.slow  # serve llm in a process of its own
def test_out_of_memory_fails_only_the_request_that_cannot_fit_alone(tiny):
    huge = "this one does not fit " * 5
    huge_ids = tiny.prompt_ids([{"role": "user", "content": huge}])
    batches: list[int] = []

    def hook(rows: list[Row]) -> None:
        batches.append(len(rows))
        _out_of_memory_when(lambda rows: any(r.prompt_ids == huge_ids for r in rows))(rows)

    tiny.batch_hook = hook
    app = make_app(tiny, "tiny", batch_wait_ms=500)
    texts = [*SHORT[:2], huge, *SHORT[2:]]
    with BackgroundServer(app) as srv:
        replies = _ask_together(srv.url, texts)
        codes = [r.status_code for r in replies]
        assert codes == [200, 200, 413, 200, 200], [r.text for r in replies]
        error = replies[2].json()["error"]
        assert "does not fit in memory" in error["message"] and "tokens" in error["message"]
        assert "OutOfMemoryError" in error["message"] and error["code"] == 413
        # the server goes on serving, the same requests answered as before
        tiny.batch_hook = None
        again = httpx.post(srv.url + "/v1/chat/completions", json=_body(SHORT[0]), timeout=60)
        assert again.status_code == 200
    assert batches[0] == 5 and batches[1:] == [1] * 5  # one batch of five, then each row alone
    tiny.batch_hook = None
    for text, reply in zip(texts, replies):
        if reply.status_code == 200:  # the answers they get alone: the retried rows restarted cleanly
            assert reply.json()["choices"][0]["message"]["content"] == _alone(tiny, text)


def test_a_batch_out_of_memory_only_together_answers_every_request(tiny):
    """Memory that runs out only for the whole batch: run row by row, every request is answered, seeded samples
    the same as alone (the rows restart with their generators reseeded)."""
    tiny.batch_hook = _out_of_memory_when(lambda rows: len(rows) > 1)
    reqs = [
        ChatRequest([{"role": "user", "content": t}], Sampling(temperature=1.0, max_tokens=6, n=2, seed=7))
        for t in SHORT
    ]
    together = tiny.chat(reqs)
    tiny.batch_hook = None
    alone = [tiny.chat([r])[0] for r in reqs]
    assert all(isinstance(r, list) for r in together), together
    assert [[c.completion_ids for c in r] for r in together] == [[c.completion_ids for c in r] for r in alone]


def test_a_row_that_fits_alone_is_answered_after_its_batch_ran_out_of_memory(tiny):
    """The failed attempt's memory is given back before the rows are retried: each attempt allocates its
    working memory in the hook's frame, which the out-of-memory error's traceback holds; a retry that starts
    while any earlier attempt's memory is alive finds no room (as a real 8k-token row did, 413 although it
    gets 200 alone)."""
    attempts: list[weakref.ref] = []

    def hook(rows: list[Row]) -> None:
        if any(alive() is not None for alive in attempts):
            raise torch.OutOfMemoryError(
                "out of memory (simulated: an earlier attempt's memory is still held)"
            )
        working_memory = torch.ones(1 << 16)  # what this attempt allocates before it runs out
        attempts.append(weakref.ref(working_memory))
        if len(rows) > 1:
            raise torch.OutOfMemoryError(f"out of memory (simulated: {working_memory.numel()} floats held)")

    tiny.batch_hook = hook
    texts = [LONG, *SHORT]
    with BackgroundServer(make_app(tiny, "tiny", batch_wait_ms=500)) as srv:
        replies = _ask_together(srv.url, texts)
    assert [r.status_code for r in replies] == [200] * len(texts), [r.text for r in replies]
    assert len(attempts) == 1 + len(texts)  # the shared batch, then each row alone
    tiny.batch_hook = None
    for text, reply in zip(texts, replies):
        assert reply.json()["choices"][0]["message"]["content"] == _alone(tiny, text)


def test_serve_llm_builds_its_model_through_the_one_model_builder():
    """`serve llm`'s `--model.*` group (ModelConfig's local fields) becomes the `ModelConfig` every command's
    model is built from, and its token budget and prefill chunk reach the local model through
    `build_chat_model`; an HTTP model takes neither."""
    from ragteam.cli import serve_llm
    from ragteam.llm.config import ModelConfig
    from ragteam.llm.factory import build_chat_model

    cfg = serve_llm.Config(
        model={"model": "tiny", "device": TEST_DEVICE, "max_batch_size": 3},
        max_batch_tokens=512,
        prefill_chunk=64,
    )
    described = cfg.model.chat_model_config()
    assert described == ModelConfig(backend="local", model="tiny", device=TEST_DEVICE, max_batch_size=3)
    model = build_chat_model(
        described, max_batch_tokens=cfg.max_batch_tokens, prefill_chunk=cfg.prefill_chunk
    )
    assert isinstance(model, LocalChatModel)
    assert (model.max_batch_size, model.max_batch_tokens, model.prefill_chunk) == (3, 512, 64)
    remote = ModelConfig(backend="openai", base_url="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(ValueError, match="max_batch_tokens apply to a local model only"):
        build_chat_model(remote, max_batch_tokens=512)
