"""Parsers of the MMOA-RAG roles, with the paper's per-role penalties (section 4.2) set on `Action.penalty`.
Pure, and they never raise.

| role      | kind      | value                    | penalty (paper)                              | fallback on malformed     |
|-----------|-----------|--------------------------|----------------------------------------------|---------------------------|
| rewriter  | rewrite   | sub-questions (list)     | -0.5 when more than 4 sub-questions (however | the question itself       |
|           |           |                          | separated: lines, `;`, `1. A 2. B`, `A? B?`) |                           |
| selector  | select    | candidate ids (0-based)  | -1 for duplicate ids or ids not in the       | keep every candidate      |
|           |           |                          | `Document0,Document4,...` format             | (when no id can be read)  |
| generator | answer    | the short answer         | -0.5 when the answer is over-long            | empty answer              |

The paper leaves "over-long" unspecified; here it is more than `LONG_ANSWER_WORDS` words. The penalty is a
fact about the output, recorded whether or not the output is otherwise valid; credit assignment adds it to the
shared reward of the role's node.
"""

from __future__ import annotations

import re

from ragteam.types import Action
from ragteam.workflows.answers import extract_answer

MAX_SUBQUESTIONS = 4
REWRITER_PENALTY = -0.5
SELECTOR_PENALTY = -1.0
GENERATOR_PENALTY = -0.5
LONG_ANSWER_WORDS = 20
"""Answers of more words than this get the generator penalty (the paper's threshold is not published)."""

MAX_SUBQUESTION_CHARS = 300

_STRICT_IDS = re.compile(r"Document\d+(?:,Document\d+)*")
_ANY_ID = re.compile(r"Document\s*_?(\d{1,4})", re.IGNORECASE)
_LIST_MARK = re.compile(
    r"^(?:[-*•]+|\(?\d{1,2}[.):](?=\s|$)|(?:sub-?)?(?:question|query|q)\s*\d*\s*[.:)])\s*", re.IGNORECASE
)


_SEMICOLON = re.compile(r"\s*;\s*")
_NEXT_QUESTION = re.compile(r"(?<=\?)\s+(?=[\"'“‘(]?[^\W_])")
"""A question mark followed by the start of another sentence: `Who is X? When was he born?`."""


def _numbered(line: str) -> list[str]:
    """`1. A 2. B 3. C` (or `1) A 2) B`, `(1) A (2) B`, `Q1: A Q2: B`) split at its numbers, counted in
    order from the line's first: a lone number inside a sub-question (`Apollo 11. ...`) is not a mark."""
    first = re.match(r"\s*(\(?)(q\s*)?(\d{1,2})([.):])\s", line, re.IGNORECASE)
    if first is None:
        return [line]
    opening, q, number, closing = first.group(1), first.group(2) or "", int(first.group(3)), first.group(4)
    parts, start = [], 0
    while True:
        number += 1
        mark = re.escape(opening) + (r"q\s*" if q else "") + str(number) + re.escape(closing)
        nxt = re.search(r"\s" + mark + r"\s", line[start + 1 :], re.IGNORECASE)
        if nxt is None:
            break
        cut = start + 1 + nxt.start()
        parts.append(line[start:cut])
        start = cut + 1
    return [*parts, line[start:]]


def split_subquestions(text: str) -> list[str]:
    """The pieces of a rewrite, however the sub-questions are separated: lines, semicolons, inline
    numbering (`1. A 2. B`), or one question mark after another (`A? B?`). Marks are left on the pieces."""
    pieces: list[str] = []
    for line in text.splitlines():
        for part in _SEMICOLON.split(line):
            for numbered in _numbered(part):
                pieces += _NEXT_QUESTION.split(numbered)
    return pieces


def parse_rewriter(text: str, question: str = "") -> Action:
    """Sub-questions, however they are separated (`split_subquestions`: lines, `;`, `1. A 2. B`, `A? B?`);
    list marks such as `1.`, `-`, `Q1:` removed, header lines and repeats dropped. The penalty counts them
    so: four questions on one line are four. None found: invalid, the question itself is the only one."""
    if not isinstance(text, str):
        text = ""
    subs: list[str] = []
    for line in split_subquestions(text):
        line = line.strip()
        previous = None
        while previous != line:
            previous = line
            line = _LIST_MARK.sub("", line).strip().strip("\"'`*").strip()
        if not line or line.endswith(":"):
            continue
        line = line[:MAX_SUBQUESTION_CHARS]
        if line not in subs:
            subs.append(line)
    if not subs:
        return Action(
            "rewrite", [question], valid=False, error="no sub-question found; fallback: the question itself"
        )
    penalty = REWRITER_PENALTY if len(subs) > MAX_SUBQUESTIONS else 0.0
    return Action("rewrite", subs, penalty=penalty)


def parse_selector(text: str, k: int = 10) -> Action:
    """Candidate ids in the format `Document0,Document4,Document7` (0 <= id < k).

    Output that is not exactly that list (spaces aside), ids out of range or repeated: penalty -1 and invalid;
    the readable in-range ids are kept once each, in order. No readable id at all: every candidate is kept.
    """
    if not isinstance(text, str):
        text = ""
    compact = re.sub(r"\s+", "", text.strip()).rstrip(".")
    found = [int(m.group(1)) for m in _ANY_ID.finditer(text)]
    ids = list(dict.fromkeys(i for i in found if 0 <= i < k))
    problems = []
    if _STRICT_IDS.fullmatch(compact) is None:
        problems.append("not in the format Document0,Document4,...")
    outside = sorted({i for i in found if not 0 <= i < k})
    if outside:
        problems.append(f"ids {outside[:10]} not in 0..{k - 1}")
    repeated = sorted({i for i in found if found.count(i) > 1})
    if repeated:
        problems.append(f"duplicate ids {repeated[:10]}")
    if not problems:
        return Action("select", ids)
    if not ids:
        return Action(
            "select",
            list(range(k)),
            valid=False,
            error="; ".join(problems) + "; fallback: keep all candidates",
            penalty=SELECTOR_PENALTY,
        )
    return Action(
        "select",
        ids,
        valid=False,
        error="; ".join(problems) + "; fallback: the readable ids, once each",
        penalty=SELECTOR_PENALTY,
    )


def parse_generator(text: str, choices: dict[str, str] | None = None) -> Action:
    """The short answer (first line, `Answer:` labels and quotes removed; an option letter for multiple
    choice). Penalty -0.5 when the output has more than `LONG_ANSWER_WORDS` words. Empty: invalid."""
    if not isinstance(text, str):
        text = ""
    penalty = GENERATOR_PENALTY if len(text.split()) > LONG_ANSWER_WORDS else 0.0
    answer = extract_answer(text, choices)
    if not answer:
        return Action(
            "answer", "", valid=False, error="empty answer; fallback: empty answer", penalty=penalty
        )
    return Action("answer", answer, penalty=penalty)
