"""Passage corpora: read and write JSONL `{id, title, text}` / FlashRAG `{id, contents}`, and pool the
paragraphs that benchmark records carry into one corpus.

Also reads DPR's `psgs_w100.tsv` layout (`id  text  title` columns) and `.gz` files. A file's passages carry
ids or none do: then each gets `types.doc_id(title, text)`. A passage without an id in a file whose first
passage has one (or the other way round) is a malformed record naming its line, as are repeated ids, a TSV
row with fewer cells than the header and a quoted TSV field running over several lines (an unclosed quote
that would swallow the rows after it); `--skip-bad` skips and counts them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from ragteam.data.fields import text_field
from ragteam.data.formats.flashrag import split_contents
from ragteam.data.records import BadRecord, FieldError, RecordError, iter_records
from ragteam.types import Doc, Question, doc_id


def _doc_from_record(rec: dict) -> Doc:
    if "contents" in rec and "text" not in rec:
        text_field(rec, "contents")  # type and emptiness checks; the split needs the unstripped value
        title, text = split_contents(rec["contents"].lstrip())
        if not text:
            raise FieldError("contents", "holds a title but no text")
    else:
        if "text" not in rec:
            raise FieldError("text", "is missing (a passage needs 'text', or FlashRAG's 'contents')")
        title = text_field(rec, "title", required=False)
        text = text_field(rec, "text")
    raw_id = rec.get("id", rec.get("_id"))
    if raw_id is None:
        return Doc(id=doc_id(title, text), title=title, text=text)
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or not str(raw_id).strip():
        raise FieldError("id", f"must be a non-empty string or an integer, got {raw_id!r}")
    return Doc(id=str(raw_id).strip(), title=title, text=text)


def _has_id(rec: dict) -> bool:
    return rec.get("id", rec.get("_id")) is not None


def iter_corpus(path: str | Path, errors: list[str] | None = None) -> Iterator[tuple[int, Doc]]:
    """Yield `(line, Doc)` for each passage of `path`; a malformed one raises `FILE:LINE: field ...`,
    or, when an `errors` list is given, is skipped with its message appended there.

    Whether passages carry ids is decided by the first good one: a later passage that differs is malformed
    (a row that lost its id would otherwise be indexed under an id no other file knows)."""
    first: tuple[int, bool] | None = None  # (line, has an id) of the first good passage
    for line, rec in iter_records(path, header_key="text", quoted_tsv=True, strict_rows=True):
        try:
            if isinstance(rec, BadRecord):
                raise RecordError(path, line, rec.message)
            try:
                doc = _doc_from_record(rec)
            except FieldError as e:
                raise RecordError(path, line, str(e)) from None
            if first is not None and _has_id(rec) != first[1]:
                raise RecordError(
                    path,
                    line,
                    f"field 'id' is missing, but the passage at line {first[0]} has one: every passage "
                    "needs an id then"
                    if first[1]
                    else f"field 'id' is set, but the passage at line {first[0]} has none: give every "
                    "passage an id, or none (ids are then made from title and text)",
                )
        except RecordError as e:
            if errors is None:
                raise
            errors.append(str(e))
            continue
        if first is None:
            first = (line, _has_id(rec))
        yield line, doc


def read_corpus(path: str | Path, skip_bad: bool = False, errors: list[str] | None = None) -> list[Doc]:
    """All passages of `path` (JSONL `{id, title, text}` or `{id, contents}`, JSON array, DPR TSV).

    With `skip_bad`, malformed passages (and repeated ids) are skipped instead of stopping the read; their
    `FILE:LINE: ...` messages go to `errors` (pass a list to count and show them)."""
    if skip_bad and errors is None:
        errors = []
    docs: list[Doc] = []
    first_line: dict[str, int] = {}
    for line, doc in iter_corpus(path, errors if skip_bad else None):
        if doc.id in first_line:
            e = RecordError(path, line, f"field 'id' repeats {doc.id!r} (first at line {first_line[doc.id]})")
            if not skip_bad:
                raise e
            errors.append(str(e))  # type: ignore[union-attr]
            continue
        first_line[doc.id] = line
        docs.append(doc)
    if not docs:
        raise ValueError(f"{path}: no passages" + (f" ({len(errors)} bad records skipped)" if errors else ""))
    return docs


def write_corpus(path: str | Path, docs: Iterable[Doc], contents: bool = False) -> int:
    """Write passages as JSONL `{id, title, text}` (or FlashRAG's `{id, contents}`); return how many."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            row = {"id": d.id, "contents": _flashrag_contents(d)} if contents else d.to_dict()
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _flashrag_contents(d: Doc) -> str:
    # Titles are quoted as in FlashRAG's wiki dumps, so that split_contents reads them back unchanged.
    return f'"{d.title.replace(chr(34), chr(34) * 2)}"\n{d.text}' if d.title else f"\n{d.text}"


def pool_corpus(questions: Iterable[Question]) -> list[Doc]:
    """The paragraphs carried by `questions`, deduplicated by title+text, ids `doc_id`, first-seen order."""
    pooled: dict[str, Doc] = {}
    for q in questions:
        for d in q.context:
            did = doc_id(d.title, d.text)
            if did not in pooled:
                pooled[did] = Doc(id=did, title=d.title.strip(), text=d.text.strip())
    return list(pooled.values())
