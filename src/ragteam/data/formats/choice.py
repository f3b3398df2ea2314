"""Multiple-choice benchmarks: MedQA (USMLE, 4 or 5 options).

MedQA: `{question, answer, options{A: ..., B: ...}, answer_idx, meta_info, metamap_phrases[]}`; the options
may also be a list `[{key, value}]` (BigBio's layout). The golden answer is the correct letter; the option
text goes to `metadata["answer_text"]` and the options to `Question.choices`.
"""

from __future__ import annotations

import string
from typing import Any

from ragteam.data.fields import id_field, text_field
from ragteam.data.records import FieldError
from ragteam.types import Question

LETTERS = string.ascii_uppercase


def choices_from(value: Any, field: str) -> dict[str, str]:
    """Options as `{letter: text}` from a dict, a list of `{key, value}` objects or a plain list of texts."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
        items = [(v.get("key"), v.get("value")) for v in value]
    elif isinstance(value, list):
        if len(value) > len(LETTERS):
            raise FieldError(field, f"has more than {len(LETTERS)} options")
        items = list(zip(LETTERS, value))
    else:
        raise FieldError(field, "is missing" if value is None else "must be an object or a list of options")
    for key, text in items:
        if not isinstance(key, str) or not key.strip():
            raise FieldError(field, f"has an option without a letter: {key!r}")
        if not isinstance(text, (str, int, float)) or isinstance(text, bool) or not str(text).strip():
            raise FieldError(f"{field}.{key}", "must be a non-empty string")
        out[key.strip().upper()] = str(text).strip()
    if len(out) < 2:
        raise FieldError(field, "needs at least two options")
    return out


def is_medqa(rec: dict[str, Any]) -> bool:
    return "options" in rec and "question" in rec and ("answer_idx" in rec or "answer" in rec)


def parse_medqa(rec: dict[str, Any], index: int) -> Question:
    choices = choices_from(rec.get("options"), "options")
    if rec.get("answer_idx") not in (None, ""):
        letter = text_field(rec, "answer_idx").upper()
        if letter not in choices:
            raise FieldError("answer_idx", f"is {letter!r}, not one of the options {sorted(choices)}")
    else:
        answer = text_field(rec, "answer")
        matches = [k for k, v in choices.items() if v.strip().casefold() == answer.casefold()]
        if len(matches) != 1:
            raise FieldError("answer", "matches no single option (and there is no answer_idx)")
        letter = matches[0]
    metadata: dict[str, Any] = {"answer_text": choices[letter]}
    if rec.get("meta_info"):
        metadata["meta_info"] = rec["meta_info"]
    return Question(
        id=id_field(rec, "id", fallback=f"medqa-{index}"),
        question=text_field(rec, "question"),
        golden_answers=[letter],
        metadata=metadata,
        choices=choices,
    )
