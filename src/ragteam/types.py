"""Core value types shared by every layer: questions, documents, chat messages, parsed actions.

Nothing here imports torch or does I/O. Every type converts to and from plain JSON-able dicts
(`to_dict` / `from_dict`) so that traces, configs and HTTP payloads all use one representation.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict


class Message(TypedDict):
    """One chat message, exactly as the OpenAI chat-completions API spells it."""

    role: Literal["system", "user", "assistant"]
    content: str


def doc_id(title: str, text: str) -> str:
    """Stable id of a passage from its title and text (same passage -> same id, in any corpus)."""
    digest = hashlib.sha1(f"{title.strip()}\n{text.strip()}".encode()).hexdigest()
    return f"p{digest[:12]}"


@dataclass(frozen=True)
class Doc:
    """A passage of a corpus: `{id, title, text}` (FlashRAG's `contents` is `title\\ntext`)."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}" if self.title else self.text

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Doc:
        return cls(id=str(d["id"]), title=d.get("title", ""), text=d["text"])


@dataclass(frozen=True)
class Hit:
    """A retrieved document with its retriever score (higher is better)."""

    doc: Doc
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.doc.to_dict(), "score": self.score}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hit:
        return cls(Doc.from_dict(d), float(d.get("score", 0.0)))


@dataclass
class Question:
    """One benchmark question in FlashRAG's record shape `{id, question, golden_answers[], metadata{}}`.

    `context` holds the paragraphs the record itself carries (HotpotQA, 2Wiki, MuSiQue, PopQA), with stable
    ids (`doc_id`); `supporting_ids` names those that support the answer. `choices` holds the options of a
    multiple-choice question (`{"A": "...", ...}`), whose golden answer is then the correct letter.
    """

    id: str
    question: str
    golden_answers: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    context: list[Doc] = field(default_factory=list)
    supporting_ids: list[str] = field(default_factory=list)
    choices: dict[str, str] | None = None

    def to_dict(self, with_context: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "metadata": self.metadata,
        }
        if self.choices is not None:
            d["choices"] = self.choices
        if with_context and self.context:
            d["context"] = [c.to_dict() for c in self.context]
        if self.supporting_ids:
            d["supporting_ids"] = list(self.supporting_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Question:
        return cls(
            id=str(d["id"]),
            question=d["question"],
            golden_answers=list(d.get("golden_answers", [])),
            metadata=dict(d.get("metadata", {})),
            context=[Doc.from_dict(c) for c in d.get("context", [])],
            supporting_ids=list(d.get("supporting_ids", [])),
            choices=d.get("choices"),
        )


@dataclass(frozen=True)
class Action:
    """What a parser made of one model output. Parsers never raise: malformed output is `valid=False`.

    `kind` names the action (e.g. `retrieval`, `no_retrieval`, `planning`, `select`, `answer`); `value` is its
    JSON-able argument (a query, a list of ids, an answer); `error` says why it was invalid and which fallback
    was taken; `penalty` is a per-role penalty (MMOA-RAG) that credit assignment adds to the node's reward.
    """

    kind: str
    value: Any = None
    valid: bool = True
    error: str | None = None
    penalty: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Action:
        return cls(**d)
