"""Chunked prefill (`ragteam.llm.decoder`, "Chunked prefill"): an input longer than `prefill_chunk` tokens runs in
chunks over the KV cache, so the prefill's memory grows linearly with the input, and gives what one pass gives:
the same next-token logits (float tolerance), forced-prefix log-probs and greedy tokens, with left padding in
a batch of rows of different lengths, and a forced prefix that spans chunks."""

from __future__ import annotations

import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, Sampling
from ragteam.llm.decoder import PREFILL_CHUNK
from ragteam.llm.local import LocalChatModel

CHUNK = 16  # several chunks for each prompt below, in the tiny model's context


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    # no prefix cache: each run must prefill the whole prompt for the paths to be compared
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, prefix_cache_mb=0)


def _requests(words: list[int], prefix: str = "") -> list[ChatRequest]:
    return [
        ChatRequest(
            [{"role": "user", "content": "question " + "with some words " * n}],
            Sampling(max_tokens=6, temperature=0),
            prefix=prefix,
        )
        for n in words
    ]


def _rows(model: LocalChatModel, reqs: list[ChatRequest]):
    """Each request's one row, as `chat` builds them (prompt, forced prefix, sampling)."""
    return [model._rows_for(i, r)[0] for i, r in enumerate(reqs)]


def _run(model: LocalChatModel, chunk: int | None, reqs: list[ChatRequest]):
    model.prefill_chunk = chunk
    try:
        return model.chat(reqs)
    finally:
        model.prefill_chunk = PREFILL_CHUNK


@pytest.mark.parametrize("prefix", ["", "The answer, given at some length, is that the"])
def test_chunked_prefill_gives_the_one_pass_logits(tiny, prefix):
    reqs = _requests([3, 20, 9, 41], prefix)  # rows of different lengths: left padding in one batch
    rows = _rows(tiny, reqs)
    lengths = [len(r.inputs) for r in rows]
    assert max(lengths) > 4 * CHUNK  # several chunks
    assert len(set(lengths)) == len(lengths)  # left padding in every row but the longest
    if prefix:
        assert rows[0].forced > CHUNK  # the forced prefix's scores span chunks
    with torch.no_grad():
        tiny.prefill_chunk = None
        _, one_pass, attn1, pos1 = tiny._prefill(rows)
        one_pass_lp = [list(r.logprobs) for r in rows]
        tiny.prefill_chunk = CHUNK
        _, chunked, attn2, pos2 = tiny._prefill(rows)
        tiny.prefill_chunk = PREFILL_CHUNK
    torch.testing.assert_close(chunked, one_pass, rtol=1e-4, atol=1e-4)
    assert torch.equal(attn1, attn2) and torch.equal(pos1, pos2)
    assert all(len(r.logprobs) == r.forced for r in rows)
    for r, lp in zip(rows, one_pass_lp):
        assert r.logprobs == pytest.approx(lp, abs=1e-4)


@pytest.mark.parametrize("prefix", ["", "The answer, given at some length, is that the"])
def test_chunked_prefill_decodes_the_one_pass_tokens(tiny, prefix):
    reqs = _requests([41, 3, 20, 9], prefix)
    one_pass, chunked = _run(tiny, None, reqs), _run(tiny, CHUNK, reqs)
    default = tiny.chat(reqs)  # every prompt shorter than the default chunk: one pass, as before chunking
    assert all(isinstance(r, list) for r in one_pass + chunked + default), one_pass + chunked + default
    for a, b, c in zip(one_pass, chunked, default):
        assert a[0].completion_ids == b[0].completion_ids == c[0].completion_ids
        assert a[0].text == b[0].text
        assert b[0].logprobs == pytest.approx(a[0].logprobs, abs=1e-4)
        assert c[0].logprobs == a[0].logprobs


def test_a_chunk_of_one_token_and_bad_values(tiny):
    reqs = _requests([7, 2], "Yes")
    one_pass, per_token = _run(tiny, None, reqs), _run(tiny, 1, reqs)
    assert [r[0].completion_ids for r in per_token] == [r[0].completion_ids for r in one_pass]
    with pytest.raises(ValueError, match="prefill_chunk"):
        LocalChatModel.from_model(tiny.model, tiny.tokenizer, prefill_chunk=0)


def test_the_cli_default_is_the_decoders():
    from ragteam.cli.serve_llm import Config

    assert Config().prefill_chunk == PREFILL_CHUNK
