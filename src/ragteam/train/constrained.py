"""Replies decoded under a server's grammar (vLLM, SGLang structured output: MMOA-RAG's Selector), scored by
the trainer under the token whitelist that grammar allows.

The in-process decoder masks the logits with a token whitelist and records it on the completion
(`Completion.constraint["allowed_ids"]`), and the trainer scores the act under the same mask
(`experience.Sample.allowed_ids`). A server enforces the same constraint as a regex and returns neither the
whitelist nor masked log-probs; its reply was still sampled from the constrained policy, so the trainer
derives the whitelist from the regex (`constraint.whitelist_texts`) with its own tokenizer and scores the act
under it: the old and new log-probs of the PPO ratio are then both the masked policy's, as in process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ragteam.llm.constraint import Constraint, UnsupportedRegex, token_whitelist

if TYPE_CHECKING:
    from ragteam.train.experience import Sample

__all__ = ["mask_structured", "stop_ids", "text_ids"]


def mask_structured(
    samples: Sequence[Sample], encode: Callable[[str], Sequence[int]], always: Iterable[int] = ()
) -> int:
    """Give every sample decoded under a server's grammar (its constraint record has a regex, was enforced,
    and holds no `allowed_ids`) the whitelist that grammar allows: the texts `whitelist_texts(regex)` spells,
    each tokenized by `encode` (the trainer's tokenizer, special-token strings as text, as the in-process
    decoder tokenizes them), the ids decoding stops on (`always`: EOS, end-of-turn, which a grammar allows
    where the reply may end) and its own tokens (a whitelist always holds them: never a token scored at probability 0). Returns how many samples it set; a regex
    it cannot read (`UnsupportedRegex`) leaves its samples unmasked."""
    cache: dict[str, list[int] | None] = {}
    done = 0
    for s in samples:
        record = s.constraint or {}
        regex = record.get("regex")
        if s.allowed_ids is not None or not regex or not record.get("enforced") or record.get("allowed_ids"):
            continue
        if regex not in cache:
            try:
                cache[regex] = token_whitelist(Constraint.from_regex(regex), encode, always)
            except UnsupportedRegex:
                cache[regex] = None
        if cache[regex] is not None:
            s.allowed_ids = sorted(set(cache[regex]) | set(s.completion_ids))
            done += 1
    return done


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """`text`'s token ids on their own, special-token strings as the characters they are (how the in-process
    decoder tokenizes a constraint's allowed texts)."""
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def stop_ids(tokenizer: Any, model: Any) -> list[int]:
    """The ids decoding stops on (the tokenizer's EOS, the model's generation config's, `<|im_end|>`), as the
    in-process decoder's whitelists hold them (`LocalChatModel.eos_ids`)."""
    ids = {tokenizer.eos_token_id}
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen if isinstance(gen, list) else [gen])
    if "<|im_end|>" in tokenizer.get_vocab():
        ids.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    return sorted(i for i in ids if i is not None)
