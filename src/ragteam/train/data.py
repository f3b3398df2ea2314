"""The two training-data files the trainers read, and the checks that reject a bad row before any training.

Both are JSONL, one JSON object a line (blank lines are skipped; keys not listed are ignored).

SFT rows (`sft.jsonl`, for `ragteam train sft`): one assistant reply to learn.

    {"role": "router",                      # the team role that acted (router, filter, decider, rewriter,
                                            #   selector, generator, actor, ...); any non-empty string
     "messages": [{"role": "system", "content": "..."},
                  {"role": "user", "content": "..."}],   # the prompt; roles system/user/assistant, the last
                                                         #   one not assistant (the target answers it)
     "target": "[Retrieval]",               # the assistant reply to learn (non-empty)
     "question_id": "5a8b57f25542995d1e6f1371",
     "provenance": {...}}                   # optional: where the row came from (trace, node, reward ...)

Pair rows (`pairs.jsonl`, for `ragteam train dpo` and `ragteam train prm`): two replies to one state.

    {"role": "actor",
     "messages": [...],                     # the state, as in SFT rows
     "chosen": "...", "rejected": "...",    # the better and the worse reply (non-empty, different)
     "scores": {"chosen": 0.8, "rejected": 0.1},   # optional: the numbers behind the preference
     "question_id": "..."}                  # optional

Why validate everything up front: a training run is minutes to hours on CPU, and a bad row found by a
tokenizer half-way through says nothing useful. Every error names the file, the line and the field, as
`FILE:LINE: field 'x': what is wrong`, and a file of the other kind (pairs given to `train sft`, SFT rows
given to `train dpo`) is recognised and named as such.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragteam.types import Message

MESSAGE_ROLES = ("system", "user", "assistant")


class DataError(ValueError):
    """A training-data file that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class SFTRow:
    """One assistant reply to learn: the prompt `messages` and the `target` reply, played by `role`."""

    role: str
    messages: list[Message]
    target: str
    question_id: str
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PairRow:
    """Two replies to the same state: `chosen` is preferred over `rejected`."""

    role: str
    messages: list[Message]
    chosen: str
    rejected: str
    scores: dict[str, float] | None = None
    question_id: str | None = None


def read_sft_rows(path: str | Path) -> list[SFTRow]:
    """Read and validate an SFT file; raise DataError at the first bad row."""
    rows = []
    for where, obj in _json_lines(path):
        _check_kind(where, obj, "sft")
        rows.append(
            SFTRow(
                role=_role(where, obj),
                messages=_messages(where, obj),
                target=_text(where, obj, "target"),
                question_id=_string(where, obj, "question_id"),
                provenance=_provenance(where, obj),
            )
        )
    return _non_empty(path, rows)


def read_pair_rows(path: str | Path, command: str = "train dpo") -> list[PairRow]:
    """Read and validate a pairs file (`command` is named in errors); DataError at the first bad row."""
    rows = []
    for where, obj in _json_lines(path):
        _check_kind(where, obj, "pairs", command)
        chosen, rejected = _text(where, obj, "chosen"), _text(where, obj, "rejected")
        if chosen == rejected:
            raise DataError(f"{where}: field 'rejected': identical to 'chosen' (a pair must differ)")
        rows.append(
            PairRow(
                role=_role(where, obj),
                messages=_messages(where, obj),
                chosen=chosen,
                rejected=rejected,
                scores=_scores(where, obj),
                question_id=_string(where, obj, "question_id") if "question_id" in obj else None,
            )
        )
    return _non_empty(path, rows)


# ---- reading ---------------------------------------------------------------------------------------------


def _json_lines(path: str | Path):
    """Yield `("FILE:LINE", object)` for each non-blank line; DataError on unreadable or non-object lines."""
    from ragteam.data.records import open_text, unencodable_field

    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: training data file not found")
    with open_text(p) as fh:  # a FIFO or a folder: refused by name; a line not UTF-8: FILE:LINE
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{p}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: not valid JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{where}: a row must be a JSON object, got {type(obj).__name__}")
            if "\\u" in line and (problem := unencodable_field(obj)):  # a lone surrogate (\\ud800)
                raise DataError(f"{where}: {problem}")
            yield where, obj


def _non_empty(path: str | Path, rows: list) -> list:
    if not rows:
        raise DataError(f"{path}: no rows (the file is empty)")
    return rows


# ---- which kind of file ----------------------------------------------------------------------------------


def _check_kind(where: str, obj: dict, want: str, command: str = "train sft") -> None:
    """Name the file's kind when a row is clearly of another kind than `want` (sft or pairs)."""
    if want == "sft" and "target" not in obj:
        looks = _looks_like(obj)
        if looks:
            raise DataError(
                f"{where}: field 'target': missing; this looks like {looks}; "
                "train sft needs rows with messages+target"
            )
    if want == "pairs" and not ("chosen" in obj and "rejected" in obj):
        looks = _looks_like(obj)
        if looks:
            missing = "chosen" if "chosen" not in obj else "rejected"
            raise DataError(
                f"{where}: field '{missing}': missing; this looks like {looks}; "
                f"{command} needs rows with messages+chosen+rejected"
            )


def _looks_like(obj: dict) -> str | None:
    if "chosen" in obj or "rejected" in obj:
        return "a pairs file (has chosen/rejected)"
    if "target" in obj:
        return "an SFT file (has target)"
    if "nodes" in obj or "root" in obj:
        return "an episode trace file (has nodes); build SFT rows or pairs from it first"
    if "question" in obj and ("golden_answers" in obj or "answer" in obj):
        return "a questions file (has question/answers), not training rows"
    return None


# ---- fields ----------------------------------------------------------------------------------------------


def _field_error(where: str, name: str, what: str) -> DataError:
    return DataError(f"{where}: field '{name}': {what}")


def _got(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _string(where: str, obj: dict, name: str) -> str:
    if name not in obj:
        raise _field_error(where, name, "missing")
    value = obj[name]
    if not isinstance(value, str):
        raise _field_error(where, name, f"must be a string, got {_got(value)}")
    return value


def _text(where: str, obj: dict, name: str) -> str:
    value = _string(where, obj, name)
    if not value.strip():
        raise _field_error(where, name, "must not be empty")
    return value


def _role(where: str, obj: dict) -> str:
    return _text(where, obj, "role")


def _messages(where: str, obj: dict) -> list[Message]:
    if "messages" not in obj:
        raise _field_error(where, "messages", "missing")
    value = obj["messages"]
    if not isinstance(value, list) or not value:
        raise _field_error(
            where, "messages", f"must be a non-empty list of {{role, content}}, got {_got(value)}"
        )
    out: list[Message] = []
    for i, m in enumerate(value):
        name = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _field_error(where, name, f"must be an object {{role, content}}, got {_got(m)}")
        role, content = m.get("role"), m.get("content")
        if role not in MESSAGE_ROLES:
            raise _field_error(
                where, f"{name}.role", f"must be one of {', '.join(MESSAGE_ROLES)}, got {_got(role)}"
            )
        if not isinstance(content, str):
            raise _field_error(where, f"{name}.content", f"must be a string, got {_got(content)}")
        out.append({"role": role, "content": content})
    if out[-1]["role"] == "assistant":
        raise _field_error(
            where, f"messages[{len(out) - 1}].role", "the prompt must not end with an assistant turn"
        )
    return out


def _provenance(where: str, obj: dict) -> dict[str, Any]:
    value = obj.get("provenance", {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _field_error(where, "provenance", f"must be an object, got {_got(value)}")
    return value


def _scores(where: str, obj: dict) -> dict[str, float] | None:
    value = obj.get("scores")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _field_error(where, "scores", f"must be an object {{chosen, rejected}}, got {_got(value)}")
    out = {}
    for key in ("chosen", "rejected"):
        s = value.get(key)
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s):
            raise _field_error(where, f"scores.{key}", f"must be a finite number, got {_got(s)}")
        out[key] = float(s)
    return out
