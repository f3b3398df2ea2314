"""Fitting a prompt to the model's context: the stated policy, so an overlong prompt never fails an episode.

A prompt must leave room for the reply: `prompt tokens + max_tokens <= context_length`, and, when the
rollout sets `max_prompt_tokens` (C-3PO's Table 7: 4096), be no longer than that. When it does not, in this
order:

1. **drop documents**, the lowest-ranked first (the last of the longest group when the documents come in
   groups, e.g. a RAG-Gym history of searches), keeping at least one;
2. **shorten passages**, the longest first, to half their words each time (not below `MIN_WORDS`);
3. **shorten the reply**: `max_tokens` down to the room left, if at least `MIN_REPLY` tokens remain;
4. **cut the question**: the longest text field of a declared role (the question, in every built-in role)
   is cut in its middle, keeping its start and end, and the prompt re-rendered;
5. **cut the prompt text**: the longest message is cut in its middle, keeping its start and end;
6. **refuse**: a prompt that still does not fit (its fixed template alone is over the room) comes back with
   `record["refused"]`, a message naming the limit; the engine ends that path as failed instead of sending it.

Steps 1, 2 and 4 need a request built from a declared `Role` (it is re-rendered, and the parser re-bound to
the fields kept); steps 3, 5 and 6 apply to any request. Every step makes its text strictly shorter and stops
at a floor, so fitting ends on every input (a question of thousands of emoji included); `record["steps"]`
counts the prompts measured. What was done is returned as a record that the engine stores on the node
(`Node.fit`). Counting needs a model that can count tokens (`TokenCounter`); prompts are only counted when
their UTF-8 size could exceed the room (byte-level tokenizers never make more tokens than bytes), so ordinary
prompts cost nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ragteam.protocol import Act, AskLLM
from ragteam.types import Doc, Message

MIN_WORDS = 16
MIN_REPLY = 16
MIN_CHARS = 32  # a text this short is not cut further
_OVERHEAD = 16  # template tokens per message (role header, end of turn), an upper bound
_MARK = " ..."  # ends a shortened passage; not counted as one of its words
_CUT = " [...] "  # replaces the middle of a cut text


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
    a prompt over that cap, so such a prompt goes from step 2 to step 4. A prompt that cannot be fitted has
    `record["refused"]`."""
    cap = max_prompt if max_prompt is not None else context
    room = min(context - max_tokens, cap)
    if _bytes(request.messages) <= room:
        return request, max_tokens, None
    steps = [0]

    def measure(messages: list[Message]) -> int:
        steps[0] += 1
        return count(messages)

    before = measure(request.messages)
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
            n = measure(request.messages)
        record.update(docs_dropped=dropped, passages_shortened=shortened)
    if n > room and n <= cap and context - n >= MIN_REPLY:
        record["max_tokens"] = {"asked": max_tokens, "kept": context - n}
        max_tokens = context - n
        room = min(context - max_tokens, cap)
    if n > room and request.spec is not None and request.fields:
        request, n, cut = _cut_field(request, n, room, measure)
        if cut is not None:
            record["question_cut"] = cut
    if n > room:
        request, n = _cut_text(request, n, room, measure)
        record["text_cut"] = True
    record["prompt_tokens_after"] = n
    record["steps"] = steps[0]
    if n > room:
        what = request.role if isinstance(request, Act) else request.purpose
        record["refused"] = (
            f"the prompt of {what!r} needs {n} tokens after fitting, over the {room} left for it "
            f"(context {context} tokens, reply {max_tokens}"
            + (f", max_prompt {max_prompt}" if max_prompt is not None else "")
            + ")"
        )
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


def _words(text: str) -> list[str]:
    """A passage's words, without the mark of an earlier shortening (so a shortened passage at MIN_WORDS
    is not "shortened" again to itself)."""
    return (text[: -len(_MARK)] if text.endswith(_MARK) else text).split()


def _shorten_longest(docs: list[Any]) -> list[Any] | None:
    """The documents with the longest passage cut to half its words; None when all are at MIN_WORDS."""
    flat = (
        [(None, i, d) for i, d in enumerate(docs)]
        if docs and isinstance(docs[0], Doc)
        else [(g, i, d) for g, (_, group) in enumerate(docs) for i, d in enumerate(group)]
    )
    if not flat:
        return None
    g, i, doc = max(flat, key=lambda t: len(_words(t[2].text)))
    words = _words(doc.text)
    if len(words) <= MIN_WORDS:
        return None
    short = dataclasses.replace(doc, text=" ".join(words[: max(MIN_WORDS, len(words) // 2)]) + _MARK)
    if g is None:
        return [*docs[:i], short, *docs[i + 1 :]]
    query, group = docs[g]
    return [*docs[:g], (query, [*group[:i], short, *group[i + 1 :]]), *docs[g + 1 :]]


def _middle_cut(text: str, n: int, room: int) -> str | None:
    """`text` with its middle replaced by `_CUT`, in proportion to how far the prompt is over (`room / n`,
    at most 0.9 kept); None when it is under MIN_CHARS. The result is always strictly shorter."""
    if len(text) < MIN_CHARS:
        return None
    keep = max(8, int(len(text) * min(0.9, room / n)) // 2)
    keep = min(keep, (len(text) - len(_CUT) - 1) // 2)
    return text[:keep] + _CUT + text[-keep:]


def _cut_field(
    request: Act | AskLLM, n: int, room: int, count: Callable[[list[Message]], int]
) -> tuple[Act | AskLLM, int, dict[str, Any] | None]:
    """Cut the longest text field of a declared role (the question) in its middle and re-render, until the
    prompt fits or the field is at MIN_CHARS; the record says which field and its length before and after."""
    assert request.spec is not None and request.fields is not None
    texts = {k: v for k, v in request.fields.items() if isinstance(v, str) and k != request.spec.docs}
    if not texts:
        return request, n, None
    name = max(texts, key=lambda k: len(texts[k]))
    text = texts[name]
    while n > room:
        shorter = _middle_cut(text, n, room)
        if shorter is None:
            break
        text = shorter
        request = request.spec.rebuild(request, **{name: text})
        n = count(request.messages)
    if text == texts[name]:
        return request, n, None
    return request, n, {"field": name, "chars": len(texts[name]), "kept": len(text)}


def _cut_text(
    request: Act | AskLLM, n: int, room: int, count: Callable[[list[Message]], int]
) -> tuple[Act | AskLLM, int]:
    """Cut the longest message in its middle until the prompt fits (its start and end are kept)."""
    messages = [dict(m) for m in request.messages]
    while n > room:
        j = max(range(len(messages)), key=lambda i: len(messages[i]["content"]))
        shorter = _middle_cut(messages[j]["content"], n, room)
        if shorter is None:
            break
        messages[j]["content"] = shorter
        n = count(messages)  # type: ignore[arg-type]
    return dataclasses.replace(request, messages=messages), n  # type: ignore[arg-type]
