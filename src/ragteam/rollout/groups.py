"""Groups: K independent episodes of one question (`--rollout.group-size K`), what group baselines compare.

Each member is a copy of the question under its own id (`<id>#<k>`), so that its episode, its sampling seeds
(derived from the episode's question id, `plan.derive_seed`) and its place in a report are its own; the
shared id stays in `metadata["group"]`, where the trainer reads which samples share a question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ragteam.types import Question

__all__ = ["group_of", "members"]


def members(questions: Sequence[Question], size: int) -> list[Question]:
    """Every question `size` times in a row (itself, unchanged, when `size` is 1)."""
    if size <= 1:
        return list(questions)
    return [
        replace(q, id=f"{q.id}#{k}", metadata={**q.metadata, "group": q.id})
        for q in questions
        for k in range(size)
    ]


def group_of(question: Question) -> str:
    """The id of the question a group member was copied from (its own id outside a group)."""
    return str(question.metadata.get("group", question.id))
