"""The training rows of the TRL-based trainers measured and fitted: a conversation's length in tokens, and
the rows longer than `--max-length` dropped (with a warning past a tenth of them)."""

from __future__ import annotations

import sys

from ragteam.train.train_config import TrainConfig

__all__ = ["DROP_WARNING_SHARE", "conversation_length", "drop_long_rows", "row_limit"]


def conversation_length(tokenizer, messages: list, reply: str) -> int:
    """Tokens of `messages` + `reply` as the assistant's turn, rendered with the model's chat template."""
    text = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": reply}], add_generation_prompt=False, tokenize=False
    )
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def row_limit(cfg: TrainConfig, lengths: list[int]) -> int:
    """The length a trainer fits its rows to: --max-length, or the longest row when it is not given (so the
    defaults of `collect` and `train` never drop a row: MMOA-RAG's rows reach 3k tokens)."""
    return cfg.max_length if cfg.max_length is not None else max(lengths, default=16)


DROP_WARNING_SHARE = 0.10
"""Past this share of rows dropped for length, the message is a WARNING: the run trains on what is left."""


def drop_long_rows(rows: list, lengths: list[int], cfg: TrainConfig, command: str, what: str) -> list:
    """The rows whose whole conversation fits in `row_limit`; say on stderr how many did not (a WARNING past
    `DROP_WARNING_SHARE`; none left: error).

    Why drop rather than cut: TRL keeps the start of a long sequence, which would train a reply cut before
    its end-of-turn token (or, when packing, pack a prompt with no reply at all: compute for nothing).
    """
    limit = row_limit(cfg, lengths)
    kept = [row for row, n in zip(rows, lengths) if n <= limit]
    if not kept:
        raise ValueError(f"{cfg.data}: every {what[:-1]} is longer than --max-length {limit} tokens")
    dropped = len(rows) - len(kept)
    if dropped:
        loud = "WARNING " if dropped > DROP_WARNING_SHARE * len(rows) else ""
        print(
            f"ragteam {command}: {loud}{dropped} of {len(rows)} {what} dropped: longer than "
            f"--max-length {limit} tokens (longest: {max(lengths)}); leave --max-length unset to keep them",
            file=sys.stderr,
        )
    return kept
