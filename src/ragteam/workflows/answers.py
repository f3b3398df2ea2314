"""Text helpers every workflow shares: reading the short answer out of a model's reply, and writing a
multiple-choice question's options into a prompt. The baselines, C-3PO, MMOA-RAG's Generator and RAG-Gym's
actor all answer through them, so a question is scored the same way whichever team answered it.
"""

from __future__ import annotations

import re

from ragteam.types import Question

OPTIONS_TEMPLATE = "\nOptions:\n{lines}\nAnswer with the letter of the correct option.\n"

_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+|short\s+)?answer\s*(?:is\b\s*:?|[:\-])\s*", re.IGNORECASE)
_ANSWER_MARK = re.compile(r"(?:final\s+|short\s+)?answer\s*:", re.IGNORECASE)


def format_options(question: Question) -> str:
    """The options block of a multiple-choice question, or an empty string."""
    if not question.choices:
        return ""
    lines = "\n".join(f"{letter}. {text}" for letter, text in question.choices.items())
    return OPTIONS_TEMPLATE.format(lines=lines)


def extract_answer(text: str, choices: dict[str, str] | None = None) -> str:
    """The short answer in a model's output (never raises): text after the last "Answer:", first line that is
    not a Markdown heading, without wrapping quotes or a final period; for multiple choice, the first option
    letter named."""
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        text = text[marks[-1].end() :]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")] or lines
    answer = lines[0] if lines else ""
    answer = _PREFIX.sub("", answer).strip()
    answer = answer.strip().strip("\"'`*").strip()
    if answer.endswith(".") and not re.search(r"\b[A-Z]\.$|\.\.\.$", answer):
        answer = answer[:-1].rstrip()
    if choices:
        letters = "|".join(re.escape(k) for k in choices)
        m = re.match(rf"^\(?({letters})\b[\).:]?", answer)
        if m:
            return m.group(1)
        for letter, option in choices.items():
            if answer.lower() == option.strip().lower():
                return letter
    return answer
