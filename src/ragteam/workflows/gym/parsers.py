"""Parser of the RAG-Gym actor: the macro-action (search a query, or answer) in its structured output.
Pure, and it never raises.

The JSON object is looked for after the last `### Structured Output` heading (else anywhere): fenced
```json blocks first, then bare `{...}`; the last one that loads wins. Loading is lenient (trailing commas,
`//` comments, single quotes). If no object loads, the `"predicted_answer": "..."` / `"generated_query": "..."`
pairs are read with a regular expression, then ReAct's `Search[query]` / `Finish[answer]`.

| mode             | used by                                   | actions        |
|------------------|-------------------------------------------|----------------|
| answer           | direct, cot, rag, every agent's last step | answer         |
| search_or_answer | react, search-o1                          | search, answer |
| re2search        | re2search                                 | search (a query other than "None"), else answer |

A query wins over an answer when both are given (search_or_answer, re2search). Malformed output (neither
found): invalid, fallback: answer with the text's short answer (`extract_answer`: after the last "Answer:",
else its first line that is not a Markdown heading) — a search with a garbled query would only spend steps.
"""

from __future__ import annotations

import ast
import json
import re
from contextlib import suppress
from typing import Any

from ragteam.types import Action
from ragteam.workflows.answers import extract_answer

MAX_QUERY_CHARS = 400

_HEADING = re.compile(r"#+\s*structured\s+output", re.IGNORECASE)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL | re.IGNORECASE)
_BARE = re.compile(r"\{[^{}]*\}", re.DOTALL)
_NO_QUERY = {"", "none", "null", "n/a", "no query", "no further query", "no query needed"}
_SEARCH = re.compile(r"\bSearch\[([^\[\]]+)\]")
_FINISH = re.compile(r"\bFinish\[([^\[\]]*)\]")


def _pair(key: str) -> re.Pattern[str]:
    return re.compile(rf"[\"']{key}[\"']\s*:\s*(?:\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'|(null|None))")


_ANSWER_PAIR = _pair("predicted_answer")
_QUERY_PAIR = _pair("generated_query")


def loads_lenient(text: str) -> Any:
    """A JSON-ish object: strict JSON, else with trailing commas and `//` comments removed, else a Python
    literal (single quotes, None). None when nothing loads."""
    if not isinstance(text, str) or len(text) > 20000:
        return None
    cleaned = re.sub(r"\s//[^\n]*", "", text)
    cleaned = re.sub(r",\s*([}\]])", r"\1", cleaned)
    for attempt in (text, cleaned):
        with suppress(ValueError, RecursionError):
            return json.loads(attempt)
    literal = re.sub(r"\bnull\b", "None", cleaned)
    literal = re.sub(r"\btrue\b", "True", literal)
    literal = re.sub(r"\bfalse\b", "False", literal)
    with suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.literal_eval(literal)
    return None


def structured_output(text: str) -> dict[str, Any] | None:
    """The last JSON object that loads in the structured-output part of `text` (see the module docstring)."""
    if not isinstance(text, str):
        return None
    headings = list(_HEADING.finditer(text))
    parts = [text[headings[-1].end() :], text] if headings else [text]
    for part in parts:
        for pattern in (_FENCED, _BARE):
            for m in reversed(list(pattern.finditer(part))):
                obj = loads_lenient(m.group(1) if pattern is _FENCED else m.group(0))
                if isinstance(obj, dict):
                    return obj
    return None


def _field(obj: dict[str, Any] | None, text: str, key: str, pattern: re.Pattern[str]) -> str | None:
    """`key` of the loaded object, else of the last `"key": "value"` pair in the text; None when absent."""
    if obj is not None and key in obj:
        value = obj[key]
        if isinstance(value, list):
            value = value[0] if value else None
        return None if value is None else str(value)
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    if m.group(3) is not None:
        return None
    return m.group(1) if m.group(1) is not None else m.group(2)


def _query(value: str | None) -> str | None:
    if value is None:
        return None
    value = " ".join(value.split())[:MAX_QUERY_CHARS].strip().strip("\"'`")
    return None if value.lower().rstrip(".") in _NO_QUERY else value


def predicted_answer(text: str) -> str | None:
    """The `predicted_answer` of the structured output, if any (Re2Search states one with every query)."""
    if not isinstance(text, str):
        return None
    value = _field(structured_output(text), text, "predicted_answer", _ANSWER_PAIR)
    return value.strip() if value is not None and value.strip() else None


def parse_actor(text: str, mode: str = "search_or_answer", choices: dict[str, str] | None = None) -> Action:
    """The actor's macro-action: `Action("search", query)` or `Action("answer", short answer)`."""
    if not isinstance(text, str):
        text = ""
    obj = structured_output(text)
    answer = _field(obj, text, "predicted_answer", _ANSWER_PAIR)
    answer = answer.strip() if answer is not None and answer.strip() else None
    query = None if mode == "answer" else _query(_field(obj, text, "generated_query", _QUERY_PAIR))
    if query is not None:
        return Action("search", query)
    if answer is not None:
        return Action("answer", extract_answer(answer, choices) or answer)
    if mode == "search_or_answer":
        searches = _SEARCH.findall(text)
        if searches and _query(searches[-1]):
            return Action("search", _query(searches[-1]))
    finishes = _FINISH.findall(text)
    if finishes and finishes[-1].strip():
        return Action("answer", extract_answer(finishes[-1], choices) or finishes[-1].strip())
    wanted = "a predicted_answer" if mode == "answer" else "a generated_query or a predicted_answer"
    return Action(
        "answer",
        extract_answer(text, choices),
        valid=False,
        error=f"no structured output with {wanted}; fallback: answer with the text's short answer",
    )
