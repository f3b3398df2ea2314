"""Fitting a prompt to the model's context: the stated policy, so an overlong prompt never fails an episode.

A prompt must leave room for the reply: `prompt tokens + max_tokens <= context_length`, and, when the
rollout sets `max_prompt_tokens` (C-3PO's Table 7: 4096), be no longer than that. When it does not, in this
order:

1. **drop documents**, the lowest-ranked first (the last of the longest group when the documents come in
   groups, e.g. a RAG-Gym history of searches), keeping at least one;
2. **shorten passages**, the longest first, to half their words each time (not below `MIN_WORDS`);
3. **shorten the reply**: `max_tokens` down to the room left, if at least `MIN_REPLY` tokens remain;
4. **cut the prompt text**: the longest message is cut in its middle, keeping its start and end.

Steps 1-2 need a request built from a declared `Role` with a `docs` field (it is re-rendered, and the
parser re-bound to the documents kept); steps 3-4 apply to any request. What was done is returned as a
record that the engine stores on the node (`Node.fit`). Counting needs a model that can count tokens
(`TokenCounter`); prompts are only counted when their UTF-8 size could exceed the room (byte-level
tokenizers never make more tokens than bytes), so ordinary prompts cost nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ragteam.protocol import Act, AskLLM
from ragteam.types import Doc, Message

MIN_WORDS = 16
MIN_REPLY = 16
_OVERHEAD = 16  # template tokens per message (role header, end of turn), an upper bound


def _bytes(messages: list[Message]) -> int:
    return sum(len(m["content"].encode("utf-8")) + _OVERHEAD for m in messages)


def fit_request(
    request: Act | AskLLM,
    max_tokens: int,
    context: int,
    count: Callable[[list[Message]], int],
    max_prompt: int | None = None,
) -> tuple[Act | AskLLM, int, dict[str, Any] | None]:
    """(request, max_tokens) cut to fit `context` tokens, and the record of what was cut (None: it fit).
    `max_prompt` also caps the prompt itself (C-3PO's "prompt max len"); shortening the reply cannot help
    a prompt over that cap, so such a prompt goes from step 2 to step 4."""
    cap = max_prompt if max_prompt is not None else context
    room = min(context - max_tokens, cap)
    if _bytes(request.messages) <= room:
        return request, max_tokens, None
    before = count(request.messages)
    if before <= room:
        return request, max_tokens, None
    record: dict[str, Any] = {"prompt_tokens": before, "context": context}
    if max_prompt is not None:
        record["max_prompt"] = max_prompt
    n = before
    spec, fields = request.spec, request.fields
    if spec is not None and spec.docs is not None and fields and fields.get(spec.docs):
        docs = fields[spec.docs]
        dropped = shortened = 0
        while n > room:
            smaller = _drop_lowest(docs)
            if smaller is not None:
                dropped += 1
            else:
                smaller = _shorten_longest(docs)
                if smaller is None:
                    break
                shortened += 1
            docs = smaller
            request = spec.rebuild(request, **{spec.docs: docs})
            n = count(request.messages)
        record.update(docs_dropped=dropped, passages_shortened=shortened)
    if n > room and n <= cap and context - n >= MIN_REPLY:
        record["max_tokens"] = {"asked": max_tokens, "kept": context - n}
        max_tokens = context - n
        room = min(context - max_tokens, cap)
    if n > room:
        request, n = _cut_text(request, n, room, count)
        record["text_cut"] = True
    record["prompt_tokens_after"] = n
    return request, max_tokens, record


def _count_docs(docs: list[Any]) -> list[int]:
    """Documents per group (a flat list of Docs is one group)."""
    if docs and isinstance(docs[0], Doc):
        return [len(docs)]
    return [len(group[1]) for group in docs]


def _drop_lowest(docs: list[Any]) -> list[Any] | None:
    """The documents without the lowest-ranked one (the last of the largest group); None below two."""
    sizes = _count_docs(docs)
    if sum(sizes) <= 1:
        return None
    if isinstance(docs[0], Doc):
        return docs[:-1]
    g = max(range(len(sizes)), key=lambda i: (sizes[i], -i))
    query, group = docs[g]
    return [*docs[:g], (query, list(group[:-1])), *docs[g + 1 :]]


def _shorten_longest(docs: list[Any]) -> list[Any] | None:
    """The documents with the longest passage cut to half its words; None when all are at MIN_WORDS."""
    flat = (
        [(None, i, d) for i, d in enumerate(docs)]
        if docs and isinstance(docs[0], Doc)
        else [(g, i, d) for g, (_, group) in enumerate(docs) for i, d in enumerate(group)]
    )
    if not flat:
        return None
    g, i, doc = max(flat, key=lambda t: len(t[2].text.split()))
    words = doc.text.split()
    if len(words) <= MIN_WORDS:
        return None
    short = dataclasses.replace(doc, text=" ".join(words[: max(MIN_WORDS, len(words) // 2)]) + " ...")
    if g is None:
        return [*docs[:i], short, *docs[i + 1 :]]
    query, group = docs[g]
    return [*docs[:g], (query, [*group[:i], short, *group[i + 1 :]]), *docs[g + 1 :]]


def _cut_text(
    request: Act | AskLLM, n: int, room: int, count: Callable[[list[Message]], int]
) -> tuple[Act | AskLLM, int]:
    """Cut the longest message in its middle until the prompt fits (its start and end are kept)."""
    messages = [dict(m) for m in request.messages]
    while n > room:
        j = max(range(len(messages)), key=lambda i: len(messages[i]["content"]))
        text = messages[j]["content"]
        if len(text) < 32:
            break
        keep = max(8, int(len(text) * min(0.9, room / n)) // 2)
        messages[j]["content"] = text[:keep] + " [...] " + text[-keep:]
        n = count(messages)  # type: ignore[arg-type]
    return dataclasses.replace(request, messages=messages), n  # type: ignore[arg-type]
