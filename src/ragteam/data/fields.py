"""Typed access to the fields of a raw record, raising `FieldError` that names the field and the problem.

Also the two shared steps of every reader that carries paragraphs: joining a paragraph's sentences and
turning `(title, text, is_supporting)` triples into `Question.context` / `Question.supporting_ids`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ragteam.data.records import FieldError
from ragteam.types import Doc, doc_id

_MISSING = object()


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def get(rec: Mapping[str, Any], key: str, default: Any = _MISSING) -> Any:
    """`rec[key]`, or `default` when given; a missing required field raises FieldError."""
    if key in rec:
        return rec[key]
    if default is _MISSING:
        raise FieldError(key, "is missing")
    return default


def text_field(rec: Mapping[str, Any], key: str, *, required: bool = True, label: str | None = None) -> str:
    """A non-empty string field (stripped); `None`/absent is allowed only when not required (-> "")."""
    name = label or key
    value = rec.get(key)
    if value is None:
        if required:
            raise FieldError(name, "is missing" if key not in rec else "is null")
        return ""
    if not isinstance(value, str):
        raise FieldError(name, f"must be a string, got {_type_name(value)}")
    value = value.strip()
    if required and not value:
        raise FieldError(name, "is empty")
    return value


def id_field(rec: Mapping[str, Any], key: str, fallback: str | None = None) -> str:
    """A record id (string or integer); `fallback` is used when the record has none."""
    value = rec.get(key)
    if value is None:
        if fallback is None:
            raise FieldError(key, "is missing")
        return fallback
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise FieldError(key, f"must be a string or an integer, got {_type_name(value)}")
    text = str(value).strip()
    if not text:
        raise FieldError(key, "is empty")
    return text


def list_field(
    rec: Mapping[str, Any], key: str, *, label: str | None = None, required: bool = True
) -> list[Any]:
    """A list field (absent -> [] when not required)."""
    name = label or key
    value = rec.get(key)
    if value is None:
        if required:
            raise FieldError(name, "is missing" if key not in rec else "is null")
        return []
    if not isinstance(value, list):
        raise FieldError(name, f"must be a list, got {_type_name(value)}")
    return value


def dict_field(rec: Mapping[str, Any], key: str, *, label: str | None = None) -> dict[str, Any]:
    """A required JSON-object field."""
    name = label or key
    value = rec.get(key)
    if not isinstance(value, dict):
        raise FieldError(
            name, "is missing" if key not in rec else f"must be an object, got {_type_name(value)}"
        )
    return value


def answer_strings(values: Iterable[Any], field: str) -> list[str]:
    """Answer aliases as strings: numbers are written out, empty ones dropped, duplicates removed (order kept)."""
    out: list[str] = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise FieldError(f"{field}[{i}]", f"must be a string, got {_type_name(v)}")
        text = str(v).strip()
        if text and text not in out:
            out.append(text)
    return out


def require_answers(answers: list[str], field: str) -> list[str]:
    """At least one non-empty answer, or FieldError (a question without an answer cannot be scored)."""
    if not answers:
        raise FieldError(field, "holds no non-empty answer")
    return answers


def json_list_field(rec: Mapping[str, Any], key: str) -> list[Any]:
    """A list stored either as a JSON list or as a JSON-encoded string of one (PopQA's `possible_answers`)."""
    value = get(rec, key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise FieldError(key, f"is not a JSON-encoded list ({e.msg})") from None
        except (ValueError, RecursionError) as e:  # a number of more than 4300 digits, deep nesting
            raise FieldError(key, f"is not a JSON-encoded list we can read ({str(e)[:80]})") from None
    if not isinstance(value, list):
        raise FieldError(key, f"must be a list (or a JSON-encoded list), got {_type_name(value)}")
    return value


def join_sentences(sentences: Iterable[str]) -> str:
    """One paragraph from its sentences: HotpotQA's carry their own leading space, 2Wiki's need one."""
    out = ""
    for s in sentences:
        if not out or s[:1].isspace() or out[-1:].isspace():
            out += s
        else:
            out += " " + s
    return out.strip()


def build_context(paragraphs: Iterable[tuple[str, str, bool]]) -> tuple[list[Doc], list[str]]:
    """`(title, text, is_supporting)` triples -> (docs with `doc_id` ids, deduplicated; supporting ids)."""
    docs: list[Doc] = []
    seen: set[str] = set()
    supporting: list[str] = []
    for title, text, is_supporting in paragraphs:
        did = doc_id(title, text)
        if did not in seen:
            seen.add(did)
            docs.append(Doc(id=did, title=title.strip(), text=text.strip()))
        if is_supporting and did not in supporting:
            supporting.append(did)
    return docs, supporting


def bool_field(d: Mapping[str, Any], key: str, label: str, default: bool | None = None) -> bool:
    """A boolean field (also 0/1 and "true"/"false" strings, as TSV exports write them)."""
    value = d.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "0", "1"):
        return value.strip().lower() in ("true", "1")
    raise FieldError(label, "is missing" if key not in d else f"must be true or false, got {value!r}")


def paragraph_list(rec: Mapping[str, Any], key: str, *, required: bool = True) -> list[tuple[str, str, bool]]:
    """Paragraph objects `{title, paragraph_text | text, is_supporting}` (IRCoT, MuSiQue, PopQA) as triples."""
    out: list[tuple[str, str, bool]] = []
    for i, p in enumerate(list_field(rec, key, required=required)):
        where = f"{key}[{i}]"
        if not isinstance(p, dict):
            raise FieldError(where, f"must be an object, got {_type_name(p)}")
        text_key = "paragraph_text" if "paragraph_text" in p else "text"
        text = text_field(p, text_key, label=f"{where}.{text_key}")
        title = text_field(p, "title", required=False, label=f"{where}.title")
        out.append((title, text, bool_field(p, "is_supporting", f"{where}.is_supporting", default=False)))
    return out
