"""Integration: the packaged SmolLM2-135M-Instruct GGUF, converted once, answers through the local backend."""

from __future__ import annotations

import pytest
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, Sampling
from ragteam.llm.cache import is_complete, models_dir
from ragteam.llm.config import ModelConfig
from ragteam.llm.factory import build_chat_model
from ragteam.llm.smollm2 import FOLDER_NAME, smollm2_gguf_path, smollm2_model_dir


@pytest.mark.slow
def test_smollm2_converts_once_and_answers_greedily(capfd):
    assert smollm2_gguf_path().stat().st_size > 50_000_000
    was_cached = is_complete(models_dir() / FOLDER_NAME)
    folder = smollm2_model_dir()
    err = capfd.readouterr().err
    if was_cached:
        assert "converting" not in err  # reused, not converted again
    else:
        assert "converting" in err and "converted SmolLM2-135M-Instruct in" in err  # reported, not silent
    assert (folder / "model.safetensors").stat().st_size > 400_000_000  # float32 weights
    assert smollm2_model_dir() == folder and "converting" not in capfd.readouterr().err

    model = build_chat_model(ModelConfig(model="smollm2", device=TEST_DEVICE))
    question = [{"role": "user", "content": "What is the capital of France? Answer in a few words."}]
    other = [{"role": "user", "content": "Say hello."}]
    batched = model.chat(
        [ChatRequest(question, Sampling(max_tokens=8)), ChatRequest(other, Sampling(max_tokens=8))]
    )
    [[alone]] = model.chat([ChatRequest(question, Sampling(max_tokens=8))])
    answer = batched[0][0]
    assert "Paris" in answer.text
    assert answer.completion_ids == alone.completion_ids  # left padding does not change the greedy answer
    assert (
        answer.prompt_ids[:2] == model.tokenizer("<|im_start|>system", add_special_tokens=False)["input_ids"]
    )
    [ref] = model.logprobs([answer.prompt_ids], [answer.completion_ids])
    assert max(abs(a - b) for a, b in zip(answer.logprobs, ref)) < 1e-4
