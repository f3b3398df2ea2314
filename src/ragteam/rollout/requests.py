"""What a workflow may ask the engine for, and what it gets back.

A workflow is a generator: it yields one request at a time and receives its result, and finally returns an
`Answer`. It never calls a model or a retriever itself, so the engine can batch every episode's requests,
branch an episode at any policy act, and replay a recorded prefix without calling a model again.

    def run(self, q: Question) -> Episodic:
        hits = yield Retrieve([q.question], k=5)
        out = yield Act("router", messages, parse_router)
        text = yield AskLLM("answer", messages)
        return Answer(text)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from ragteam.types import Action, Hit, Message, Question


@dataclass(frozen=True)
class Act:
    """The trainable policy plays `role` on `messages`; `parse` turns its text into an Action (never raises).

    Result: `Acted`. Only `Act` nodes are trained and only they branch (`branch=False` pins one sample).
    """

    role: str
    messages: list[Message]
    parse: Callable[[str], Action]
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    branch: bool = True


@dataclass(frozen=True)
class AskLLM:
    """The fixed LLM server answers `messages`; `purpose` labels the call in traces (`answer`, `roadmap`).

    Result: the completion text (str).
    """

    purpose: str
    messages: list[Message]
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Retrieve:
    """Search the retriever with each query. Result: `list[list[Hit]]`, one ranked list per query."""

    queries: list[str]
    k: int


Request = Act | AskLLM | Retrieve


@dataclass(frozen=True)
class Acted:
    """Result of an `Act`: the policy's text, its parsed action, and the id of the recorded node."""

    text: str
    action: Action
    node_id: int


@dataclass
class Answer:
    """What a workflow returns: the final answer text, plus facts for reports (e.g. `{"strategy": "planning"}`)."""

    text: str
    info: dict[str, Any] = field(default_factory=dict)


Episodic = Generator[Request, Any, Answer]


class BudgetExceeded(Exception):
    """Thrown into a workflow when its path exceeds the engine's depth or token budget.

    A workflow may catch it and finish (e.g. ask the LLM to answer with what it has); if it does not,
    the path ends as a leaf with status `truncated` and an empty answer.
    """


class Workflow(ABC):
    """The control flow of one system (C-3PO, MMOA-RAG, a RAG-Gym agent...). Pure logic, no I/O, picklable."""

    name: str = "workflow"

    @abstractmethod
    def run(self, question: Question) -> Episodic:
        """Yield requests, receive their results, return the `Answer`. Must be deterministic given results."""


ResultOf = Acted | str | list[list[Hit]]
