"""Benchmark questions: read any supported format into `Question`s, write them as FlashRAG JSONL.

    qset = read_questions("hotpotqa-dev-500.jsonl")          # format detected from the first record
    qset = read_questions("dev.tsv", fmt="bamboogle", skip_bad=True)
    write_questions("dev.flashrag.jsonl", qset.questions)     # the interchange format; reads back as "flashrag"

Every record becomes `{id, question, golden_answers[], metadata{}}`; paragraphs a record carries go to
`Question.context` (ids from `types.doc_id(title, text)`), the supporting ones to `Question.supporting_ids`.
A malformed record stops the read with `FILE:LINE: field 'x' ...`, unless `skip_bad=True`, which skips
it and counts it in `QuestionSet.skipped` (with the first messages kept in `QuestionSet.errors`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ragteam.data.formats import REGISTRY, Format, detect, resolve
from ragteam.data.records import BadRecord, FieldError, RecordError, iter_records
from ragteam.types import Question

FORMATS: list[str] = list(REGISTRY)
# How many skipped-record messages a QuestionSet keeps.
MAX_KEPT_ERRORS = 20


@dataclass
class QuestionSet:
    """The questions of one file, the format they were read as, and how many bad records were skipped."""

    questions: list[Question]
    skipped: int
    format: str
    path: str
    errors: list[str] = field(default_factory=list)
    skipped_records: list[RecordError] = field(default_factory=list)
    """Every skipped record's error (file, line, message), not only the first `MAX_KEPT_ERRORS`: an eval
    writes their line numbers beside its report."""

    def __len__(self) -> int:
        return len(self.questions)


def detect_format(path: str | Path) -> str:
    """The name of the format of `path`, from its first well-formed record's fields."""
    first_bad: RecordError | None = None
    for line, rec in iter_records(path):
        if isinstance(rec, BadRecord):
            first_bad = first_bad or RecordError(path, line, rec.message)
            continue
        fmt = detect(rec)
        if fmt is None:
            raise RecordError(
                path,
                line,
                f"cannot tell the format from the fields {sorted(rec)[:12]}; name it with --format "
                f"(one of {', '.join(FORMATS)})",
            )
        return fmt.name
    if first_bad is not None:  # every record is bad: say why the first one is, not "no records"
        raise first_bad
    raise ValueError(f"{path}: no records")


def read_questions(path: str | Path, fmt: str | None = None, skip_bad: bool = False) -> QuestionSet:
    """Read every question of `path` in format `fmt` (detected when None); see the module docstring."""
    spec: Format = resolve(fmt) if fmt else resolve(detect_format(path))
    questions: list[Question] = []
    errors: list[str] = []
    skipped_records: list[RecordError] = []
    skipped = 0
    first_line: dict[str, int] = {}
    for index, (line, rec) in enumerate(iter_records(path)):
        try:
            if isinstance(rec, BadRecord):
                raise RecordError(path, line, rec.message)
            try:
                q = spec.parse(rec, index)
            except FieldError as e:
                raise RecordError(path, line, f"{e} ({spec.name} record)") from None
            except (ValueError, TypeError, RecursionError) as e:  # a value no field check foresaw
                raise RecordError(path, line, f"cannot be read as a {spec.name} record ({e})") from None
            if q.id in first_line:
                raise RecordError(
                    path, line, f"field 'id' repeats {q.id!r} (first at line {first_line[q.id]})"
                )
        except RecordError as e:
            if not skip_bad:
                raise
            skipped += 1
            skipped_records.append(e)
            if len(errors) < MAX_KEPT_ERRORS:
                errors.append(str(e))
            continue
        first_line[q.id] = line
        questions.append(q)
    if not questions and not skipped:
        raise ValueError(f"{path}: no records")
    return QuestionSet(
        questions=questions,
        skipped=skipped,
        format=spec.name,
        path=str(path),
        errors=errors,
        skipped_records=skipped_records,
    )


def write_questions(path: str | Path, questions: Iterable[Question], with_context: bool = True) -> int:
    """Write `questions` as FlashRAG JSONL (plus context/supporting_ids/choices); return how many."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q.to_dict(with_context=with_context), ensure_ascii=False) + "\n")
            n += 1
    return n
