"""Recall of supporting paragraphs: how often a retriever puts a question's evidence in its top k.

Per question with supporting paragraphs: `recall@k` is 1 when ALL its supporting paragraphs are among the
top-k hits, else 0; `support_recall@k` is the fraction of them that are. Both are averaged over the questions
that name supporting paragraphs (the others are counted in `skipped`). Hits match by passage id, and
pooled corpora give every paragraph the id `types.doc_id(title, text)` that `Question.supporting_ids` uses.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ragteam.retrieval.base import Retriever
from ragteam.types import Question


def support_recall(retrieved_ids: Iterable[str], supporting_ids: Sequence[str]) -> tuple[float, float]:
    """(all found: 1.0 or 0.0, fraction found) of `supporting_ids` among `retrieved_ids`."""
    if not supporting_ids:
        raise ValueError("support_recall needs at least one supporting id")
    got = set(retrieved_ids)
    wanted = set(supporting_ids)
    found = len(wanted & got) / len(wanted)
    return (1.0 if found == 1.0 else 0.0), found


def evaluate_retriever(
    retriever: Retriever, questions: Sequence[Question], k: int = 10, batch_size: int = 256
) -> dict[str, float | int]:
    """`{"recall@k", "support_recall@k", "questions", "skipped", "seconds"}` of `retriever` on `questions`."""
    usable = [q for q in questions if q.supporting_ids]
    full = part = 0.0
    t0 = time.perf_counter()
    for start in range(0, len(usable), batch_size):
        chunk = usable[start : start + batch_size]
        results = retriever.search([q.question for q in chunk], k)
        for q, hits in zip(chunk, results):
            a, b = support_recall([h.doc.id for h in hits[:k]], q.supporting_ids)
            full += a
            part += b
    n = len(usable)
    return {
        f"recall@{k}": round(full / n, 4) if n else 0.0,
        f"support_recall@{k}": round(part / n, 4) if n else 0.0,
        "questions": n,
        "skipped": len(questions) - n,
        "seconds": round(time.perf_counter() - t0, 3),
    }
