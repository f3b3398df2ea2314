"""FlashRAG JSONL, ragteam's interchange format: `{id, question, golden_answers[], metadata{}}`.

ragteam adds optional `context[{id, title, text}]` (or `{id, contents}`), `supporting_ids[]` and `choices`
(`{letter: text}` or a list). FlashRAG's own HotpotQA/2Wiki/MuSiQue files keep their paragraphs in
`metadata` (`context{title[], sentences[[...]]}` with `supporting_facts{title[], sent_id[]}`, or
`paragraphs[...]`); those become `Question.context` and are removed from `metadata`.
Context ids are always re-derived with `types.doc_id` (`supporting_ids` are mapped along).
"""

from __future__ import annotations

from typing import Any

from ragteam.data.fields import (
    answer_strings,
    build_context,
    id_field,
    join_sentences,
    list_field,
    paragraph_list,
    require_answers,
    text_field,
)
from ragteam.data.formats.choice import LETTERS, choices_from
from ragteam.data.records import FieldError
from ragteam.types import Question, doc_id


def is_flashrag(rec: dict[str, Any]) -> bool:
    return "golden_answers" in rec and "question" in rec


def split_contents(contents: str) -> tuple[str, str]:
    """FlashRAG's `contents` -> (title, text): the first line is the title, quoted as in DPR's TSV."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    title = title.strip()
    if len(title) >= 2 and title[0] == '"' and title[-1] == '"':
        title = title[1:-1].replace('""', '"')
    return title, text.strip()


def _context(rec: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Top-level context -> triples; supporting when `supporting_ids` names the given id or the doc_id."""
    support = {str(s) for s in list_field(rec, "supporting_ids", required=False)}
    triples: list[tuple[str, str, bool]] = []
    id_map: dict[str, str] = {}
    for i, d in enumerate(list_field(rec, "context", required=False)):
        where = f"context[{i}]"
        if not isinstance(d, dict):
            raise FieldError(where, "must be an object")
        if "contents" in d and "text" not in d:
            text_field(d, "contents", label=f"{where}.contents")
            title, text = split_contents(d["contents"].lstrip())
            if not text:
                raise FieldError(f"{where}.contents", "holds a title but no text")
        else:
            title = text_field(d, "title", required=False, label=f"{where}.title")
            text = text_field(d, "text", label=f"{where}.text")
        new_id = doc_id(title, text)
        given = str(d.get("id", new_id))
        id_map[given] = new_id
        triples.append((title, text, given in support or new_id in support))
    unknown = support - set(id_map) - set(id_map.values())
    if unknown and triples:
        raise FieldError("supporting_ids", f"names ids not in context: {sorted(unknown)[:3]}")
    return triples


def _metadata_paragraphs(meta: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Paragraphs FlashRAG keeps inside metadata (removed from it), as triples."""
    ctx = meta.get("context")
    if isinstance(ctx, dict) and "title" in ctx and ("sentences" in ctx or "content" in ctx):
        titles = ctx["title"]
        sents = ctx.get("sentences", ctx.get("content"))
        sf = meta.get("supporting_facts")
        support = set(sf.get("title", [])) if isinstance(sf, dict) else {p[0] for p in sf or [] if p}
        if not (isinstance(titles, list) and isinstance(sents, list) and len(titles) == len(sents)):
            raise FieldError("metadata.context", "must hold equally long title and sentence lists")
        del meta["context"]
        return [(t, join_sentences(s), t in support) for t, s in zip(titles, sents)]
    if isinstance(meta.get("paragraphs"), list):
        triples = paragraph_list(meta, "paragraphs")
        del meta["paragraphs"]
        return triples
    return []


def parse_flashrag(rec: dict[str, Any], index: int) -> Question:
    meta = rec.get("metadata") or {}
    if not isinstance(meta, dict):
        raise FieldError("metadata", "must be an object")
    meta = dict(meta)
    choices = choices_from(rec["choices"], "choices") if rec.get("choices") is not None else None
    raw = list_field(rec, "golden_answers")
    if choices is not None:  # an option index (FlashRAG's MMLU) -> its letter
        raw = [
            LETTERS[v] if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(choices) else v
            for v in raw
        ]
    answers = require_answers(answer_strings(raw, "golden_answers"), "golden_answers")
    if choices is not None:
        answers = [a.upper() if a.upper() in choices else a for a in answers]
    triples = _context(rec)
    triples += _metadata_paragraphs(meta)
    context, supporting = build_context(triples)
    if not triples:  # written without context: the ids still name passages of a pooled corpus
        supporting = [str(s) for s in list_field(rec, "supporting_ids", required=False)]
    return Question(
        id=id_field(rec, "id", fallback=f"q{index}"),
        question=text_field(rec, "question"),
        golden_answers=answers,
        metadata=meta,
        context=context,
        supporting_ids=supporting,
        choices=choices,
    )
