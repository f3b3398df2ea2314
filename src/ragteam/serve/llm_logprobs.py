"""OpenAI's `choice.logprobs` for a completion, `top_logprobs` by a forward pass over the served model."""

from __future__ import annotations

import contextlib
from typing import Any

from ragteam.llm.base import ChatModel, Completion

TopK = tuple[list[list[int]], list[list[float]]]  # per position: the k most likely ids, their log-probs


def choice_logprobs(
    c: Completion, tokenizer: Any, as_ids: bool, top: TopK | None = None
) -> dict[str, Any] | None:
    """OpenAI's `choice.logprobs` for a completion's tokens; None when the backend gave no ids or log-probs.

    `token` is the token's text (special tokens spelled out), or `token_id:<id>` when `as_ids` (vLLM's
    `return_tokens_as_token_ids`, exact where a token's text is not); `bytes` is the UTF-8 of its text, null
    where that text is not exact (no tokenizer, or a token holding part of a character: U+FFFD). `top` fills
    each position's `top_logprobs` (spelled the same way); without it the lists are empty."""
    if c.completion_ids is None or c.logprobs is None or len(c.completion_ids) != len(c.logprobs):
        return None
    ids = set(c.completion_ids)
    if top is not None:
        ids.update(t for row in top[0] for t in row)
    order = sorted(ids)
    texts = tokenizer.batch_decode([[t] for t in order]) if tokenizer is not None else [None] * len(order)
    spelled: dict[int, tuple[str, list[int] | None]] = {}
    for token_id, text in zip(order, texts):
        token = f"token_id:{token_id}" if as_ids or text is None else text
        raw = None if text is None or "\ufffd" in text else list(text.encode("utf-8"))
        spelled[token_id] = (token, raw)
    content = []
    for t, (token_id, logprob) in enumerate(zip(c.completion_ids, c.logprobs)):
        token, raw = spelled[token_id]
        alternatives = []
        if top is not None and t < len(top[0]):
            for alt_id, alt_lp in zip(top[0][t], top[1][t]):
                alt_token, alt_raw = spelled[alt_id]
                alternatives.append({"token": alt_token, "logprob": max(alt_lp, -9999.0), "bytes": alt_raw})
        logprob = max(logprob, -9999.0)  # as vLLM: JSON has no -inf
        content.append({"token": token, "logprob": logprob, "bytes": raw, "top_logprobs": alternatives})
    return {"content": content}


def top_k_scorer(model: ChatModel) -> Any:
    """`score(prompt_ids, completions, k)` -> one `TopK` per completion, by a forward pass over the model's
    torch module (under the model's own lock, so it never runs beside a batch's decoding or a weight load);
    None for a backend without one (an HTTP client, a scripted model)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    module = getattr(model, "model", None)
    if not isinstance(module, torch.nn.Module):
        return None
    lock = getattr(model, "_lock", None) or contextlib.nullcontext()

    def score(prompt_ids: list[int], completions: list[list[int]], k: int) -> list[TopK]:
        from ragteam.llm.logprobs import top_logprobs

        with lock, torch.inference_mode():
            return top_logprobs(module, prompt_ids, completions, k)

    return score
