"""Refusing a prompt longer than the model's context before the model thread sees it (`serve llm`).

Why: the local model tokenizes a batch's prompts in its decoding thread, so one 3.9 MB prompt (under the 4 MB
body limit) held every other request for the 4-9 s its tokenization took, only to be refused as too long.
`PromptGuard.problem` decides first, off the event loop and off the model thread:

- a prompt of at most `context_length` characters passes at once (tokenizing it on the model thread costs
  milliseconds);
- one of more than `context_length x max_chars_per_token` characters cannot fit, whatever its text: no token of
  the vocabulary spells more characters than its longest one (13 for the tiny model, 81 for SmolLM2), so it
  is refused without tokenizing anything;
- one in between is tokenized in the guard's own single worker thread, with its own copy of the tokenizer
  (a fast tokenizer is not safe to share with the model thread), and refused when its messages' tokens alone
  exceed the context (the model's own check still decides the rest exactly, on a prompt that is now short).
"""

from __future__ import annotations

import asyncio
import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class PromptGuard:
    """The context check of one model's prompts (module docstring); `None` from `for_model` when the model
    says nothing of its context or tokenizer (an HTTP backend checks its own prompts)."""

    def __init__(self, tokenizer: Any, context_length: int) -> None:
        self.context_length = context_length
        self.tokenizer = copy.deepcopy(tokenizer)
        vocab = self.tokenizer.get_vocab()
        self.max_chars_per_token = max((len(t) for t in vocab), default=1) or 1
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="prompt-guard")  # one long prompt at a time
        self.tokenized = 0  # prompts tokenized by the guard (for tests and /health)
        self.refused = 0

    @classmethod
    def for_model(cls, model: Any) -> PromptGuard | None:
        tokenizer, context = getattr(model, "tokenizer", None), getattr(model, "context_length", None)
        if tokenizer is None or not isinstance(context, int) or not hasattr(tokenizer, "get_vocab"):
            return None
        return cls(tokenizer, context)

    def _tokens(self, texts: list[str]) -> int:
        """Tokens of `texts`, each tokenized on its own, special-token strings as text (as the model reads
        message contents)."""
        ids = self.tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return sum(len(x) for x in ids)

    async def problem(self, texts: list[str]) -> str | None:
        """Why the prompt made of `texts` (message contents and forced prefix) cannot fit the context, or None
        when it may (the model's own check is exact)."""
        chars = sum(len(t) for t in texts)
        if chars <= self.context_length:
            return None
        at_least = -(-chars // self.max_chars_per_token)
        if at_least > self.context_length:
            self.refused += 1
            return (
                f"the prompt has {chars} characters, so at least {at_least} tokens (no token of this model spells "
                f"more than {self.max_chars_per_token}); the model's context holds {self.context_length}"
            )
        loop = asyncio.get_running_loop()
        self.tokenized += 1
        tokens = await loop.run_in_executor(self._pool, self._tokens, [t for t in texts if t])
        if tokens - len(texts) > self.context_length:  # a token may merge across two texts' boundary
            self.refused += 1
            return f"the prompt has at least {tokens - len(texts)} tokens; the model's context holds {self.context_length}"
        return None
