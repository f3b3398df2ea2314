"""The process reward model (PRM): scores a candidate reply to a state, higher is better.

A PRM is a sequence-classification model with one output (`AutoModelForSequenceClassification`,
`num_labels=1`), initialised from the policy LM and trained on preference pairs with the Bradley-Terry loss
(`ragteam train prm`). RAG-Gym uses it to pick the best of N candidate actions; the rollout engine's
best-of-N selector calls `ProcessRewardModel.score`.

The input rendering lives here, in one place, because the trainer and the scorer must agree token for
token: a PRM scored on a different rendering than it was trained on is silently wrong. The state's
messages plus the candidate as the assistant's reply are rendered with the model's chat template, and the
score is read at the end-of-turn token that closes the candidate (trailing whitespace is dropped). Inputs
longer than `max_length` keep their end (the candidate, and the end of the state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ragteam.config import Config
from ragteam.types import Message

DEFAULT_MAX_LENGTH = 2048


class PRMConfig(Config):
    """Which process reward model to load (`--prm.model DIR`) and how to run it."""

    model: str | None = Field(None, description="process reward model folder (from `ragteam train prm`)")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto picks cuda when available")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="weight dtype")
    max_batch_size: int = Field(16, ge=1, description="most (state, candidate) inputs scored in one forward")
    max_length: int = Field(
        DEFAULT_MAX_LENGTH, ge=8, description="longer inputs keep their last tokens (the candidate)"
    )


def render_prm_input(messages: Sequence[Message], candidate: str) -> list[Message]:
    """The conversation a PRM reads: the state's messages, then `candidate` as the assistant's reply."""
    return [
        *({"role": m["role"], "content": m["content"]} for m in messages),
        {"role": "assistant", "content": candidate},
    ]


def prm_input_ids(
    tokenizer: Any, messages: Sequence[Message], candidate: str, max_length: int | None = DEFAULT_MAX_LENGTH
) -> list[int]:
    """Token ids of `render_prm_input(messages, candidate)`, ending at the reply's end-of-turn token."""
    text = tokenizer.apply_chat_template(
        render_prm_input(messages, candidate), add_generation_prompt=False, tokenize=False
    ).rstrip()
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if max_length is not None and len(ids) > max_length:
        ids = ids[-max_length:]
    return ids


class ProcessRewardModel:
    """A trained process reward model answering `score([(messages, candidate), ...]) -> [float]` in batches."""

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_batch_size: int = 16,
        max_length: int = DEFAULT_MAX_LENGTH,
        dtype: str = "float32",
    ) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from ragteam.llm.local import DTYPES, resolve_device, resolve_model_path

        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.path = resolve_model_path(path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            self.path, num_labels=1, dtype=DTYPES[dtype]
        )
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"{self.path}: a process reward model has one output, this model has {self.model.config.num_labels}"
            )
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        self.pad_id = pad
        self.model.config.pad_token_id = pad  # the head reads the last non-pad token of each row
        self.model.to(resolve_device(device))
        self.model.eval()
        self.max_batch_size = max_batch_size
        self.max_length = max_length

    @classmethod
    def from_config(cls, cfg: PRMConfig) -> ProcessRewardModel:
        if not cfg.model:
            raise ValueError(
                "prm config: set model to a process reward model folder (from `ragteam train prm`)"
            )
        return cls(cfg.model, cfg.device, cfg.max_batch_size, cfg.max_length, cfg.dtype)

    def score(self, items: Sequence[tuple[Sequence[Message], str]]) -> list[float]:
        """One score per (state messages, candidate reply), in input order; higher is better."""
        import torch

        ids = [prm_input_ids(self.tokenizer, m, c, self.max_length) for m, c in items]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths pad together
        scores = [0.0] * len(ids)
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            for start in range(0, len(order), self.max_batch_size):
                chunk = order[start : start + self.max_batch_size]
                width = max(len(ids[i]) for i in chunk)
                batch = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                attn = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):  # right padding, as in training
                    batch[row, : len(ids[i])] = torch.tensor(ids[i])
                    attn[row, : len(ids[i])] = 1
                out = self.model(input_ids=batch.to(device), attention_mask=attn.to(device))
                for row, value in zip(chunk, out.logits[:, 0].float().tolist()):
                    scores[row] = value
        return scores
