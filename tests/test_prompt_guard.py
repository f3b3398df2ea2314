"""A prompt too long for the context is refused before the model thread sees it, so it cannot stall other
requests (`ragteam.serve.llm_prompt.PromptGuard`). Before, a 3.9 MB prompt (under the 4 MB body limit) was
tokenized in the decoding thread for seconds before its 400, and every request batched after it waited."""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest
from conftest import TEST_DEVICE

from ragteam.llm.local import LocalChatModel
from ragteam.serve.llm import make_app
from ragteam.serve.llm_prompt import PromptGuard
from ragteam.serve.testing import BackgroundServer

HUGE = "the river flows " * 243_750  # 3.9 MB of text
GOOD = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=32)


async def _good_latencies(url: str, clients: int, extra: list | None = None) -> tuple[list[float], list]:
    """Seconds each of `clients` concurrent good requests took, with the `extra` bodies sent alongside."""
    async with httpx.AsyncClient(timeout=120) as c:

        async def one(body: dict) -> tuple[float, httpx.Response]:
            start = time.monotonic()
            r = await c.post(f"{url}/v1/chat/completions", json=body)
            return time.monotonic() - start, r

        bad = [asyncio.ensure_future(one(b)) for b in extra or []]
        await asyncio.sleep(0.05 if bad else 0)  # the long prompt first: it reached the server before them
        good = await asyncio.gather(*(one(GOOD) for _ in range(clients)))
        assert all(r.status_code == 200 for _, r in good), [r.text[:200] for _, r in good]
        return [t for t, _ in good], [await b for b in bad]


def test_guard_bounds_without_tokenizing_and_tokenizes_the_middle_off_thread(tiny):
    guard = PromptGuard.for_model(tiny)
    assert guard is not None and guard.max_chars_per_token == 13  # the tiny BPE's longest token
    assert asyncio.run(guard.problem(["short"])) is None
    started = time.monotonic()
    assert "at least 300000 tokens" in asyncio.run(guard.problem(["x" * 3_900_000]))
    assert time.monotonic() - started < 0.5 and guard.tokenized == 0
    middle = asyncio.run(guard.problem(["the river flows " * 5000]))  # 80,000 characters, 20,000 tokens
    assert "at least" in middle and guard.tokenized == 1
    assert asyncio.run(guard.problem(["the river flows " * 600])) is None  # 9,600 characters, 2,400 tokens


def test_a_huge_prompt_does_not_stall_good_requests(tiny):
    with BackgroundServer(make_app(tiny, "tiny", batch_wait_ms=5, max_tokens_limit=16)) as srv:
        asyncio.run(_good_latencies(srv.url, 4))  # warm-up
        calm, _ = asyncio.run(_good_latencies(srv.url, 20))
        loaded, [(bad_s, bad)] = asyncio.run(
            _good_latencies(srv.url, 20, [{**GOOD, "messages": [{"role": "user", "content": HUGE}]}])
        )
        assert bad.status_code == 400 and "the model's context holds 8192" in bad.json()["error"]["message"]
        p95_calm, p95_loaded = np.percentile(calm, 95), np.percentile(loaded, 95)
        assert p95_loaded <= 2 * p95_calm + 0.3, (p95_calm, p95_loaded)
        assert bad_s < 5, bad_s  # reading 3.9 MB and counting characters, no tokenization
        health = httpx.get(f"{srv.url}/health").json()
        assert health["prompt_guard"] == {"tokenized": 0, "refused": 1}
