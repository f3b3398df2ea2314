"""IRCoT's processed multi-hop format (HotpotQA dev file, also its 2Wiki/MuSiQue conversions) and MultiHop-RAG.

IRCoT record: `{question_id, question_text, answers_objects[{number, date{day,month,year}, spans[]}],
contexts[{id|idx, title, paragraph_text, is_supporting}]}`. MultiHop-RAG comes either in that shape (with
`dataset: "multihop"`) or in its published shape `{query, answer, question_type, evidence_list[{title, fact,
source, url, published_at, ...}]}`, whose evidence facts are all supporting paragraphs.
"""

from __future__ import annotations

from typing import Any

from ragteam.data.fields import (
    answer_strings,
    build_context,
    dict_field,
    id_field,
    list_field,
    paragraph_list,
    require_answers,
    text_field,
)
from ragteam.data.records import FieldError
from ragteam.types import Question

MULTIHOP_RAG_DATASETS = ("multihop", "multihop-rag", "multihoprag")
_META_KEYS = ("type", "level", "dataset")


def is_ircot(rec: dict[str, Any]) -> bool:
    return "question_text" in rec and "answers_objects" in rec


def is_multihop_rag(rec: dict[str, Any]) -> bool:
    if is_ircot(rec):
        return str(rec.get("dataset", "")).lower() in MULTIHOP_RAG_DATASETS
    return {"query", "answer", "evidence_list"} <= rec.keys()


def ircot_answers(rec: dict[str, Any]) -> list[str]:
    """All answer spans of `answers_objects` (a number or a date when an object has no span)."""
    answers: list[str] = []
    for i, obj in enumerate(list_field(rec, "answers_objects")):
        where = f"answers_objects[{i}]"
        if not isinstance(obj, dict):
            raise FieldError(where, "must be an object")
        spans = list_field(obj, "spans", label=f"{where}.spans", required=False)
        found = answer_strings(spans, f"{where}.spans")
        if not found and obj.get("number") not in (None, ""):
            found = answer_strings([obj["number"]], f"{where}.number")
        date = obj.get("date")
        if not found and isinstance(date, dict):
            parts = [str(date[k]).strip() for k in ("day", "month", "year") if date.get(k) not in (None, "")]
            found = [" ".join(parts)] if parts else []
        answers += [a for a in found if a not in answers]
    return require_answers(answers, "answers_objects")


def parse_ircot(rec: dict[str, Any], index: int) -> Question:
    qid, question, answers = (
        id_field(rec, "question_id"),
        text_field(rec, "question_text"),
        ircot_answers(rec),
    )
    paragraphs = paragraph_list(rec, "pinned_contexts", required=False) + paragraph_list(rec, "contexts")
    context, supporting = build_context(paragraphs)
    return Question(
        id=qid,
        question=question,
        golden_answers=answers,
        metadata={k: rec[k] for k in _META_KEYS if rec.get(k) not in (None, "")},
        context=context,
        supporting_ids=supporting,
    )


def parse_multihop_rag(rec: dict[str, Any], index: int) -> Question:
    if is_ircot(rec):
        return parse_ircot(rec, index)
    paragraphs = []
    sources = []
    for i, ev in enumerate(list_field(rec, "evidence_list")):
        ev = dict_field({"e": ev}, "e", label=f"evidence_list[{i}]")
        title = text_field(ev, "title", required=False, label=f"evidence_list[{i}].title")
        paragraphs.append((title, text_field(ev, "fact", label=f"evidence_list[{i}].fact"), True))
        sources.append({k: ev[k] for k in ("source", "url", "published_at", "category") if k in ev})
    context, supporting = build_context(paragraphs)
    metadata: dict[str, Any] = {"sources": sources}
    if rec.get("question_type"):
        metadata["type"] = rec["question_type"]
    return Question(
        id=id_field(rec, "id", fallback=f"multihop-rag-{index}"),
        question=text_field(rec, "query"),
        golden_answers=[text_field(rec, "answer")],
        metadata=metadata,
        context=context,
        supporting_ids=supporting,
    )
