"""A small pure driver for workflow logic tests: runs a workflow generator, feeding it scripted results.

It plays the engine's part without any model or index: the policy's text comes from a script per role, the
LLM's from a function, the retriever's hits from a function of the query. Every request and its result is
recorded, so tests can assert which roles acted, what was searched and what each prompt contained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ragteam.protocol import Act, Acted, Answer, AskLLM, BudgetExceeded, Retrieve, Workflow
from ragteam.types import Doc, Hit, Question, doc_id


def make_doc(title: str, text: str | None = None) -> Doc:
    text = text if text is not None else f"Text about {title}."
    return Doc(doc_id(title, text), title, text)


def hits_for(query: str, k: int) -> list[Hit]:
    """Deterministic fake hits: documents titled `<query> #1..k`."""
    return [Hit(make_doc(f"{query} #{i}"), float(k - i)) for i in range(1, k + 1)]


@dataclass
class Trace:
    answer: Answer | None
    truncated: bool = False  # the workflow let BudgetExceeded through (the engine records a truncated leaf)
    steps: list[tuple[Any, Any]] = field(default_factory=list)  # (request, result)

    def acts(self, role: str | None = None) -> list[tuple[Act, Acted]]:
        """The acts that ran (not those stopped by the budget), with their results."""
        return [
            (r, x)
            for r, x in self.steps
            if isinstance(r, Act) and isinstance(x, Acted) and (role is None or r.role == role)
        ]

    def stopped(self) -> list[str]:
        """Roles of the acts the budget stopped."""
        return [r.role for r, x in self.steps if isinstance(r, Act) and not isinstance(x, Acted)]

    def asks(self, purpose: str | None = None) -> list[tuple[AskLLM, str]]:
        return [
            (r, x)
            for r, x in self.steps
            if isinstance(r, AskLLM) and (purpose is None or r.purpose == purpose)
        ]

    def searches(self) -> list[tuple[Retrieve, list[list[Hit]]]]:
        return [(r, x) for r, x in self.steps if isinstance(r, Retrieve)]

    def queries(self) -> list[str]:
        return [q for r, _ in self.searches() for q in r.queries]

    def roles(self) -> list[str]:
        return [r.role for r, _ in self.acts()]


def drive(
    workflow: Workflow,
    question: Question,
    policy: dict[str, list[str] | str | Callable[[Act], str]] | None = None,
    llm: Callable[[AskLLM], str] | str = "the answer",
    retrieve: Callable[[str, int], list[Hit]] = hits_for,
    max_acts: int | None = None,
    max_steps: int = 200,
) -> Trace:
    """Run `workflow` on `question`. `policy[role]` is a list consumed in order (its last entry repeats), a
    fixed string, or a function of the Act; an act's forced prefix (`Act.prefix`) is put before it. From act number `max_acts` on, `BudgetExceeded` is thrown instead
    of a result, as the engine does. Raises AssertionError if the workflow runs for more than `max_steps`."""
    policy = policy or {}
    used: dict[str, int] = {}
    gen = workflow.run(question)
    trace = Trace(answer=None)
    acts = 0
    try:
        request = next(gen)
        for _ in range(max_steps):
            if isinstance(request, Act):
                if max_acts is not None and acts >= max_acts:
                    trace.steps.append((request, "BudgetExceeded"))
                    request = gen.throw(BudgetExceeded("scripted budget"))
                    continue
                script = policy.get(request.role, "")
                if callable(script):
                    text = script(request)
                elif isinstance(script, list):
                    i = used.get(request.role, 0)
                    used[request.role] = i + 1
                    text = script[min(i, len(script) - 1)] if script else ""
                else:
                    text = script
                text = request.prefix + text  # a forced prefix starts the reply, as the engine's backends do
                result: Any = Acted(text=text, action=request.parse(text), node_id=acts, act=request)
                acts += 1
            elif isinstance(request, AskLLM):
                result = llm(request) if callable(llm) else llm
            elif isinstance(request, Retrieve):
                result = [retrieve(q, request.k) for q in request.queries]
            else:
                raise TypeError(f"workflow yielded {request!r}")
            trace.steps.append((request, result))
            request = gen.send(result)
        raise AssertionError(f"workflow still running after {max_steps} requests")
    except StopIteration as stop:
        trace.answer = stop.value
    except BudgetExceeded:
        trace.truncated = True
    return trace


def question(text: str = "Who directed the film Holocaust 2000?", **kw: Any) -> Question:
    return Question(
        id=kw.pop("id", "q1"), question=text, golden_answers=kw.pop("golden_answers", ["x"]), **kw
    )


def prompt_text(request: Act | AskLLM) -> str:
    return "\n".join(m["content"] for m in request.messages)
