"""Forking a workflow without copying generator state: re-run it and feed it a recorded path.

A node of an episode tree is identified by the results on the path from the root to it. To continue a
second child of a branched act, the engine starts the workflow afresh and sends it the recorded results
(no model, LLM or retriever is called), checking at each step that the workflow asks for exactly what it
asked for the first time. A workflow that asks for something else is not deterministic given its results,
which branching cannot support: that is an error, not a silent divergence.
"""

from __future__ import annotations

from typing import Any

from ragteam.protocol import Act, AskLLM, BudgetExceeded, EpisodeGenerator, Request, Retrieve, Workflow
from ragteam.types import Question


class Thrown:
    """Marks a history step where the engine threw `BudgetExceeded` into the workflow instead of a result."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Thrown({self.reason!r})"


# One step of a path: the request the workflow yielded and what it was sent back (a result or a Thrown).
Step = tuple[Request, Any]


class ReplayMismatch(RuntimeError):
    """A re-run workflow asked for something other than what it asked for on the recorded path."""


def same_request(a: Request, b: Request) -> bool:
    """Whether two requests ask for the same thing (callables and role specs are not compared)."""
    return type(a) is type(b) and a == b


def describe(request: Request | None) -> str:
    """A one-line summary of a request, for error messages."""
    if isinstance(request, Act):
        return (
            f"Act(role={request.role!r}, {len(request.messages)} messages, last={_tail(request.messages)!r})"
        )
    if isinstance(request, AskLLM):
        n, last = len(request.messages), _tail(request.messages)
        return f"AskLLM(purpose={request.purpose!r}, {n} messages, last={last!r})"
    if isinstance(request, Retrieve):
        return f"Retrieve(queries={request.queries!r}, k={request.k})"
    return repr(request)


def _tail(messages: list) -> str:
    text = messages[-1]["content"] if messages else ""
    return text if len(text) <= 60 else text[:57] + "..."


def fresh(result: Any) -> Any:
    """A copy of a recorded result that a workflow may mutate without touching the record."""
    if isinstance(result, list):
        return [list(r) if isinstance(r, list) else r for r in result]
    return result


def send(gen: EpisodeGenerator, result: Any) -> Request:
    """Resume `gen` with a result, or throw BudgetExceeded into it for a `Thrown` step."""
    if isinstance(result, Thrown):
        return gen.throw(BudgetExceeded(result.reason))
    return gen.send(fresh(result))


def replay(workflow: Workflow, question: Question, history: list[Step], at: Request) -> EpisodeGenerator:
    """Re-run `workflow` on `question` through the recorded `history` up to the point where it yields `at`.

    Returns the generator suspended at that yield. Raises ReplayMismatch when the workflow asks for anything
    else on the way (or finishes early).
    """
    gen = workflow.run(question)
    where = f"workflow {workflow.name!r} is not deterministic (question {question.id!r})"
    try:
        request = next(gen)
        for i, (recorded, result) in enumerate(history):
            if not same_request(request, recorded):
                raise ReplayMismatch(
                    f"{where}: on replay, request #{i} was {describe(request)} but the recorded one was "
                    f"{describe(recorded)}"
                )
            request = send(gen, result)
    except StopIteration:
        raise ReplayMismatch(f"{where}: on replay it returned before reaching the forked act") from None
    if not same_request(request, at):
        raise ReplayMismatch(
            f"{where}: on replay, request #{len(history)} was {describe(request)} "
            f"but the forked act was {describe(at)}"
        )
    return gen
