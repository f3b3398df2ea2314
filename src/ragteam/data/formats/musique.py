"""MuSiQue-Ans: `{id, question, answer, answer_aliases[], answerable, question_decomposition[{id, question,
answer, paragraph_support_idx}], paragraphs[{idx, title, paragraph_text, is_supporting}]}` (20 paragraphs)."""

from __future__ import annotations

from typing import Any

from ragteam.data.fields import (
    answer_strings,
    bool_field,
    build_context,
    id_field,
    list_field,
    paragraph_list,
    require_answers,
    text_field,
)
from ragteam.types import Question


def is_musique(rec: dict[str, Any]) -> bool:
    return "paragraphs" in rec and ("question_decomposition" in rec or "answer_aliases" in rec)


def parse_musique(rec: dict[str, Any], index: int) -> Question:
    context, supporting = build_context(paragraph_list(rec, "paragraphs"))
    answers = [text_field(rec, "answer")]
    answers += answer_strings(list_field(rec, "answer_aliases", required=False), "answer_aliases")
    steps = []
    for step in list_field(rec, "question_decomposition", required=False):
        if isinstance(step, dict):
            steps.append({"question": step.get("question"), "answer": step.get("answer")})
    metadata: dict[str, Any] = {"hops": len(steps)} if steps else {}
    if steps:
        metadata["decomposition"] = steps
    if "answerable" in rec:
        metadata["answerable"] = bool_field(rec, "answerable", "answerable")
    return Question(
        id=id_field(rec, "id"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answer_strings(answers, "answer"), "answer"),
        metadata=metadata,
        context=context,
        supporting_ids=supporting,
    )
