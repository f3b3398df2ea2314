"""HotpotQA (Hugging Face `hotpot_qa` schema and the original JSON) and 2WikiMultihopQA.

HF `hotpot_qa`: `{id, question, answer, type, level, supporting_facts{title[], sent_id[]},
context{title[], sentences[[...]]}}`. The original HotpotQA / 2Wiki JSON writes the same as lists of pairs:
`context[[title, [sentences]]]`, `supporting_facts[[title, sent_id]]` (2Wiki adds `evidences[[s, r, o]]`).
The 2Wiki sample in ../shared/data/formats is a chunked conversion: `chunks[{id, title, chunk}]` where a
chunk is `"Title: T\\n0. sentence\\n1. sentence"`, and `supporting_facts[{id, title, chunk}]` (one sentence each).
A paragraph is supporting when its title is one of the supporting facts' titles.
"""

from __future__ import annotations

import re
from typing import Any

from ragteam.data.fields import (
    answer_strings,
    build_context,
    id_field,
    join_sentences,
    list_field,
    require_answers,
    text_field,
)
from ragteam.data.records import FieldError
from ragteam.types import Question

_NUMBERED = re.compile(r"^\d+\.\s?")


def is_hotpotqa_hf(rec: dict[str, Any]) -> bool:
    return "context" in rec and "supporting_facts" in rec and "answer" in rec and "evidences" not in rec


def is_2wiki(rec: dict[str, Any]) -> bool:
    return "evidences" in rec and ("chunks" in rec or "context" in rec)


def _titled_sentences(rec: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """`context` in either layout -> [(title, sentences)]."""
    ctx = rec.get("context")
    out: list[tuple[str, list[str]]] = []
    if isinstance(ctx, dict):
        titles = list_field(ctx, "title", label="context.title")
        sents_key = "sentences" if "sentences" in ctx else "content"
        sentences = list_field(ctx, sents_key, label=f"context.{sents_key}")
        if len(titles) != len(sentences):
            raise FieldError("context", f"has {len(titles)} titles but {len(sentences)} sentence lists")
        pairs = list(zip(titles, sentences))
    elif isinstance(ctx, list):
        pairs = []
        for i, item in enumerate(ctx):
            if not (isinstance(item, list) and len(item) == 2):
                raise FieldError(f"context[{i}]", "must be a [title, sentences] pair")
            pairs.append((item[0], item[1]))
    else:
        raise FieldError("context", "is missing" if "context" not in rec else "must be an object or a list")
    for i, (title, sents) in enumerate(pairs):
        if not isinstance(title, str):
            raise FieldError(f"context[{i}].title", "must be a string")
        if not (isinstance(sents, list) and all(isinstance(s, str) for s in sents)):
            raise FieldError(f"context[{i}].sentences", "must be a list of strings")
        out.append((title, sents))
    return out


def _fact_pairs(rec: dict[str, Any]) -> list[tuple[str, int]]:
    """`supporting_facts` in either layout -> [(title, sentence index)]."""
    sf = rec.get("supporting_facts")
    if isinstance(sf, dict):
        titles = list_field(sf, "title", label="supporting_facts.title")
        sent_ids = list_field(sf, "sent_id", label="supporting_facts.sent_id")
        pairs = list(zip(titles, sent_ids))
    elif isinstance(sf, list):
        pairs = []
        for i, item in enumerate(sf):
            if not (isinstance(item, list) and len(item) == 2):
                raise FieldError(f"supporting_facts[{i}]", "must be a [title, sent_id] pair")
            pairs.append((item[0], item[1]))
    else:
        raise FieldError(
            "supporting_facts", "is missing" if "supporting_facts" not in rec else "has a bad type"
        )
    for i, (title, sid) in enumerate(pairs):
        if not isinstance(title, str) or isinstance(sid, bool) or not isinstance(sid, int):
            raise FieldError(f"supporting_facts[{i}]", "must pair a title string with a sentence index")
    return [(t, s) for t, s in pairs]


def _parse_sentence_lists(rec: dict[str, Any], index: int) -> tuple[Question, list[tuple[str, int]]]:
    facts = _fact_pairs(rec)
    support_titles = {t for t, _ in facts}
    context, supporting = build_context(
        (title, join_sentences(sents), title in support_titles) for title, sents in _titled_sentences(rec)
    )
    question = Question(
        id=id_field(rec, "id" if "id" in rec else "_id"),
        question=text_field(rec, "question"),
        golden_answers=[text_field(rec, "answer")],
        metadata={k: rec[k] for k in ("type", "level") if rec.get(k) not in (None, "")},
        context=context,
        supporting_ids=supporting,
    )
    question.metadata["supporting_facts"] = [[t, s] for t, s in facts]
    return question, facts


def parse_hotpotqa_hf(rec: dict[str, Any], index: int) -> Question:
    return _parse_sentence_lists(rec, index)[0]


def _chunk_text(chunk: str) -> str:
    """`"Title: T\\n0. first\\n1. second"` -> `"first second"` (plain text passes through)."""
    lines = chunk.split("\n")
    if lines and lines[0].startswith("Title:"):
        lines = lines[1:]
    return join_sentences(_NUMBERED.sub("", line) for line in lines if line.strip())


def _evidences(rec: dict[str, Any]) -> list[list[str]]:
    out = []
    for i, ev in enumerate(list_field(rec, "evidences", required=False)):
        if isinstance(ev, dict):
            ev = [ev.get("subject"), ev.get("relation"), ev.get("object")]
        if not (isinstance(ev, list) and len(ev) == 3 and all(isinstance(x, str) for x in ev)):
            raise FieldError(f"evidences[{i}]", "must be a [subject, relation, object] triple")
        out.append(list(ev))
    return out


def parse_2wiki(rec: dict[str, Any], index: int) -> Question:
    if "chunks" not in rec:
        question, _ = _parse_sentence_lists(rec, index)
    else:
        question = _parse_chunked_2wiki(rec)
    if "hop" in rec:
        question.metadata["hops"] = rec["hop"]
    question.metadata["evidences"] = _evidences(rec)
    return question


def _parse_chunked_2wiki(rec: dict[str, Any]) -> Question:
    paragraphs: list[tuple[str, str]] = []
    for i, c in enumerate(list_field(rec, "chunks")):
        if not isinstance(c, dict):
            raise FieldError(f"chunks[{i}]", "must be an object")
        title = text_field(c, "title", required=False, label=f"chunks[{i}].title")
        paragraphs.append((title, _chunk_text(text_field(c, "chunk", label=f"chunks[{i}].chunk"))))
    titles = {t.casefold() for t, _ in paragraphs}
    support: set[str] = set()
    extra: list[tuple[str, str, bool]] = []
    for i, f in enumerate(list_field(rec, "supporting_facts")):
        if not isinstance(f, dict):
            raise FieldError(f"supporting_facts[{i}]", "must be an object")
        title = text_field(f, "title", label=f"supporting_facts[{i}].title")
        support.add(title.casefold())
        if title.casefold() not in titles:  # a fact whose paragraph is not among the chunks: keep the fact
            extra.append((title, text_field(f, "chunk", label=f"supporting_facts[{i}].chunk"), True))
    context, supporting = build_context([(t, x, t.casefold() in support) for t, x in paragraphs] + extra)
    answers = answer_strings([text_field(rec, "answer")], "answer")
    return Question(
        id=id_field(rec, "id" if "id" in rec else "_id"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answers, "answer"),
        metadata={k: rec[k] for k in ("type", "level") if rec.get(k) not in (None, "")},
        context=context,
        supporting_ids=supporting,
    )
