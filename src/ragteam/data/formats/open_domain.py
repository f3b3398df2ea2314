"""Open-domain QA sets without paragraphs (except PopQA's subset): NQ-open, TriviaQA, PopQA, AmbigNQ,
Bamboogle and FreshQA, each in its published shape (see the `parse_*` docstrings)."""

from __future__ import annotations

import re
from typing import Any

from ragteam.data.fields import (
    answer_strings,
    bool_field,
    build_context,
    dict_field,
    id_field,
    json_list_field,
    list_field,
    paragraph_list,
    require_answers,
    text_field,
)
from ragteam.data.records import FieldError
from ragteam.types import Question

# --- NQ-open -------------------------------------------------------------------------------------------


def is_nq_open(rec: dict[str, Any]) -> bool:
    return "question" in rec and isinstance(rec.get("answer"), (list, str))


def parse_nq_open(rec: dict[str, Any], index: int) -> Question:
    """`{question, answer[]}` (ids are `nq-open-<record number>` unless the record has an `id`)."""
    answer = rec.get("answer")
    values = [answer] if isinstance(answer, str) else list_field(rec, "answer")
    return Question(
        id=id_field(rec, "id", fallback=f"nq-open-{index}"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answer_strings(values, "answer"), "answer"),
    )


# --- TriviaQA ------------------------------------------------------------------------------------------


def is_triviaqa(rec: dict[str, Any]) -> bool:
    return (
        ("question" in rec and isinstance(rec.get("answers"), list))
        or (isinstance(rec.get("answer"), dict) and "aliases" in rec["answer"])
        or ("Question" in rec and isinstance(rec.get("Answer"), dict))
    )


def parse_triviaqa(rec: dict[str, Any], index: int) -> Question:
    """The open-domain conversion `{id, question, answers[], question_id}`, the HF `trivia_qa` schema
    `{question, question_id, answer{value, aliases[]}}` or the official `{Question, QuestionId, Answer{Value,
    Aliases[]}}` (inside `{"Data": [...]}`)."""
    metadata: dict[str, Any] = {}
    if "Question" in rec:  # official release
        question = text_field(rec, "Question")
        ans = dict_field(rec, "Answer")
        values = [ans.get("Value", "")] + list_field(ans, "Aliases", label="Answer.Aliases", required=False)
        qid = id_field(rec, "QuestionId", fallback=f"triviaqa-{index}")
    elif isinstance(rec.get("answer"), dict):  # Hugging Face trivia_qa
        question = text_field(rec, "question")
        ans = rec["answer"]
        values = [ans.get("value", "")] + list_field(ans, "aliases", label="answer.aliases", required=False)
        qid = id_field(rec, "question_id", fallback=f"triviaqa-{index}")
    else:
        question = text_field(rec, "question")
        values = list_field(rec, "answers")
        qid = id_field(rec, "id" if "id" in rec else "question_id", fallback=f"triviaqa-{index}")
        if "id" in rec and rec.get("question_id") is not None:
            metadata["question_id"] = rec["question_id"]
    return Question(
        id=qid,
        question=question,
        golden_answers=require_answers(answer_strings(values, "answers"), "answers"),
        metadata=metadata,
    )


# --- PopQA ---------------------------------------------------------------------------------------------

_POPQA_META = (
    "subj",
    "prop",
    "obj",
    "subj_id",
    "prop_id",
    "obj_id",
    "s_wiki_title",
    "o_wiki_title",
    "s_pop",
    "o_pop",
)


def is_popqa(rec: dict[str, Any]) -> bool:
    return "possible_answers" in rec


def _maybe_int(value: Any) -> Any:
    """A TSV cell holding an integer as an int; any other cell (a 5,000-digit one too) as it is."""
    return int(value) if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()) else value


def parse_popqa(rec: dict[str, Any], index: int) -> Question:
    """`{id, question, possible_answers: "<JSON list>", subj, prop, obj, s_pop, ..., paragraphs[{title, text,
    is_supporting}]?}` (the TSV release has no paragraphs; numbers there are strings and are converted)."""
    context, supporting = build_context(paragraph_list(rec, "paragraphs", required=False))
    answers = answer_strings(json_list_field(rec, "possible_answers"), "possible_answers")
    return Question(
        id=id_field(rec, "id", fallback=f"popqa-{index}"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answers, "possible_answers"),
        metadata={k: _maybe_int(rec[k]) for k in _POPQA_META if rec.get(k) not in (None, "")},
        context=context,
        supporting_ids=supporting,
    )


# --- AmbigNQ -------------------------------------------------------------------------------------------


def is_ambignq(rec: dict[str, Any]) -> bool:
    return "annotations" in rec and "question" in rec


def parse_ambignq(rec: dict[str, Any], index: int) -> Question:
    """`{id, question, annotations[{type: singleAnswer, answer[]} | {type: multipleQAs, qaPairs[{question,
    answer[]}]}]}`: every answer of every annotation is an accepted alias; the disambiguated question/answer
    pairs are kept in `metadata["qa_pairs"]`."""
    answers: list[str] = []
    qa_pairs: list[dict[str, Any]] = []
    for i, ann in enumerate(list_field(rec, "annotations")):
        where = f"annotations[{i}]"
        if not isinstance(ann, dict):
            raise FieldError(where, "must be an object")
        kind = ann.get("type")
        if kind == "singleAnswer":
            answers += answer_strings(list_field(ann, "answer", label=f"{where}.answer"), f"{where}.answer")
        elif kind == "multipleQAs":
            for j, pair in enumerate(list_field(ann, "qaPairs", label=f"{where}.qaPairs")):
                pw = f"{where}.qaPairs[{j}]"
                if not isinstance(pair, dict):
                    raise FieldError(pw, "must be an object")
                pair_answers = answer_strings(
                    list_field(pair, "answer", label=f"{pw}.answer"), f"{pw}.answer"
                )
                answers += pair_answers
                qa_pairs.append({"question": pair.get("question"), "answers": pair_answers})
        else:
            raise FieldError(f"{where}.type", f"must be 'singleAnswer' or 'multipleQAs', got {kind!r}")
    metadata: dict[str, Any] = {"ambiguous": bool(qa_pairs)}
    if qa_pairs:
        metadata["qa_pairs"] = qa_pairs
    return Question(
        id=id_field(rec, "id", fallback=f"ambignq-{index}"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answer_strings(answers, "annotations"), "annotations"),
        metadata=metadata,
    )


# --- Bamboogle -----------------------------------------------------------------------------------------


def is_bamboogle(rec: dict[str, Any]) -> bool:
    return "Question" in rec and "Answer" in rec and not isinstance(rec.get("Answer"), dict)


def parse_bamboogle(rec: dict[str, Any], index: int) -> Question:
    """The TSV release (`Question`, `Answer`, `Answer 2` columns) or its JSON form `{Question, Answer}`."""
    answer_keys = [k for k in rec if k.lower().startswith("answer")]
    answers = [text_field(rec, "Answer")]
    for k in answer_keys:
        if k != "Answer":
            answers.append(text_field(rec, k, required=False))
    return Question(
        id=id_field(rec, "id", fallback=f"bamboogle-{index}"),
        question=text_field(rec, "Question"),
        golden_answers=require_answers(answer_strings(answers, "Answer"), "Answer"),
    )


# --- FreshQA -------------------------------------------------------------------------------------------

_FRESHQA_META = ("split", "effective_year", "next_review", "num_hops", "fact_type", "source", "note")


def is_freshqa(rec: dict[str, Any]) -> bool:
    return "answer_0" in rec and "question" in rec


def parse_freshqa(rec: dict[str, Any], index: int) -> Question:
    """`{id, split, question, effective_year, next_review, false_premise, num_hops, fact_type, source,
    answer_0 .. answer_9, note}` (JSONL, or the CSV release with its note rows above the header)."""
    answers = [text_field(rec, "answer_0")]
    for i in range(1, 10):
        answers.append(text_field(rec, f"answer_{i}", required=False))
    metadata: dict[str, Any] = {k: rec[k] for k in _FRESHQA_META if rec.get(k) not in (None, "")}
    if "false_premise" in rec:
        metadata["false_premise"] = bool_field(rec, "false_premise", "false_premise")
    return Question(
        id=id_field(rec, "id", fallback=f"freshqa-{index}"),
        question=text_field(rec, "question"),
        golden_answers=require_answers(answer_strings(answers, "answer_0"), "answer_0"),
        metadata=metadata,
    )
