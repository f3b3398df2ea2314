"""The protocol between workflows and the engine: declared roles, the requests a workflow yields, their results.

A workflow is a generator: it yields one request at a time and receives its result, and finally returns an
`Answer`. It never calls a model or a retriever itself, so the engine can batch every episode's requests,
fork an episode at any policy act, keep one of N candidates, and replay a recorded prefix without calling a
model again. Workflows import this module, never the engine.

A **role** is declared once by its workflow (name, prompt template, parser, limits), so the engine, credit
assignment and trainers can enumerate a workflow's roles and rebuild a role's prompt from its fields:

    def filter_messages(question: str, docs: list[Doc]) -> list[Message]: ...   # the template
    def parse_filter(text: str, docs: list[Doc]) -> Action: ...                  # the parser, never raises

    FILTER = Role("filter", render=filter_messages, parse=parse_filter, stop=STOP, docs="docs")
    ANSWER = Role("answer", render=answer_messages, docs="docs")                 # no parser: an LLM call

    def run(self, q: Question) -> EpisodeGenerator:
        hits = yield Retrieve([q.question], k=5)
        docs = [h.doc for h in hits[0]]
        acted = yield FILTER.act(question=q.question, docs=docs)                  # -> Acted
        kept = [docs[i - 1] for i in acted.action.value]
        text = yield ANSWER.ask(question=q.question, docs=kept)                   # -> str
        return Answer(text)

`render(**fields) -> messages` is the template; `parse(text, **fields) -> Action` the parser (it never
raises: a malformed output is `Action(valid=False, penalty=...)`). Each receives only the fields its
signature names (all of them if it takes `**kwargs`), so a role's functions take what they use and a request
may carry more (MMOA-RAG's generator: `options` for its template, `choices` for its parser). The field
named by `docs` holds the ranked documents of the prompt (a list of `Doc`, or a list of `(query, [Doc])`
groups): when a prompt is longer than the model's context, the engine drops the lowest-ranked documents, then
shortens passages, and re-renders (see `ragteam.rollout.fit`). Roles and their functions live at module level, so workflows stay picklable.

A role may declare its **action space**: `constrain(**fields) -> Constraint` (the allowed texts, whose tokens
make a whitelist, and the equivalent regex; `ragteam.llm.constraint`). MMOA-RAG's Selector may write only
`Document`, the numbers of its K candidates and `,` (eq. 5), K being the number of documents in its fields.
The act carries it (`Act.constraint`) to the backend, which enforces it (a logits mask in process, the
server's structured-output field over HTTP); a workflow may drop it (`dataclasses.replace(act,
constraint=None)`) and a rebuilt act keeps it dropped.
"""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any, ClassVar

from ragteam.llm.constraint import Constraint
from ragteam.types import Action, Hit, Message, Question

__all__ = [
    "Act",
    "Acted",
    "Answer",
    "AskLLM",
    "BudgetExceeded",
    "Constraint",
    "EpisodeGenerator",
    "Request",
    "ResultOf",
    "Retrieve",
    "Role",
    "Workflow",
    "team_name",
]

# ---------------------------------------------------------------------------------------------- roles


@lru_cache(maxsize=512)
def _names(fn: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments `fn` accepts; None when it takes `**kwargs` (any)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


@dataclass(frozen=True)
class Bound:
    """A role's function called with only the fields its signature names (every field if it takes
    `**kwargs`): what `Role` wraps its template, parser and action space in, so each takes what it uses."""

    fn: Callable[..., Any]

    def __call__(self, *args: Any, **fields: Any) -> Any:
        names = _names(self.fn)
        return self.fn(
            *args, **(fields if names is None else {k: v for k, v in fields.items() if k in names})
        )


@dataclass(frozen=True)
class Role:
    """A part played in a workflow: by the trainable policy (`act`) or by the fixed LLM server (`ask`).

    name        the role's name in traces, credit and training data (`router`, `filter`, `actor`, `answer`)
    render      the prompt template: `render(**fields) -> list[Message]`
    parse       the parser of a policy role: `parse(text, **fields) -> Action`, never raises (None for LLM calls)
    max_tokens  tokens per reply (None: the engine's default)
    stop        stop strings
    docs        the field holding the prompt's ranked documents, which fitting may cut (None: no documents)
    write       the canonical reply that parses to an action, `write(action) -> str` (None: not declared):
                the parser's inverse up to free text, so a malformed reply the workflow recovered from can
                be relabeled by what was done (`ragteam collect sft --relabel-invalid`)
    constrain   the action space of a policy role, `constrain(**fields) -> Constraint | None` (None: free
                text): it may depend on the fields (the Selector's K is the number of its documents)

    `render`, `parse` and `constrain` are wrapped in `Bound` on construction: each is called with the fields
    its signature names, so `ROLE.render(**fields)` works with any superset of them.
    """

    name: str
    render: Callable[..., list[Message]]
    parse: Callable[..., Action] | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    docs: str | None = None
    write: Callable[[Action], str] | None = None
    constrain: Callable[..., Constraint | None] | None = None

    def __post_init__(self) -> None:
        for name in ("render", "parse", "constrain"):
            fn = getattr(self, name)
            if fn is not None and not isinstance(fn, Bound):
                object.__setattr__(self, name, Bound(fn))

    def act(self, **fields: Any) -> Act:
        """A request for the policy to play this role on the prompt rendered from `fields`."""
        if self.parse is None:
            raise TypeError(f"role {self.name!r} has no parser: it is an LLM call, use .ask()")
        return Act(
            self.name,
            self.render(**fields),
            partial(self.parse, **fields),
            max_tokens=self.max_tokens,
            stop=self.stop,
            spec=self,
            fields=fields,
            constraint=self.constrain(**fields) if self.constrain is not None else None,
        )

    def ask(self, **fields: Any) -> AskLLM:
        """A request for the fixed LLM server to answer the prompt rendered from `fields`."""
        return AskLLM(
            self.name,
            self.render(**fields),
            max_tokens=self.max_tokens,
            stop=self.stop,
            spec=self,
            fields=fields,
        )

    def rebuild(self, request: Act | AskLLM, **changes: Any) -> Act | AskLLM:
        """The same request with some fields changed (re-rendered, parser re-bound): how fitting cuts. An act's
        constraint is declared again from the new fields (fewer documents, fewer ids), or stays dropped."""
        fields = {**(request.fields or {}), **changes}
        if isinstance(request, Act):
            new = self.act(**fields)
            return dataclasses.replace(
                new,
                max_tokens=request.max_tokens,
                branch=request.branch,
                prefix=request.prefix,
                constraint=new.constraint if request.constraint is not None else None,
            )
        return dataclasses.replace(self.ask(**fields), max_tokens=request.max_tokens)


# ---------------------------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class Act:
    """The trainable policy plays `role` on `messages`; `parse` turns its text into an Action (never raises).

    Result: `Acted`. Only `Act` nodes are trained; only they fork and keep one of N (`branch=False` pins
    one sample). `spec` and `fields` are set when the act comes from a declared `Role` (`Role.act`).
    `prefix` forces the start of the reply and the policy writes the rest (C-3PO's fixed-strategy ablation:
    `[Retrieval]`, then the policy's query): the engine sends it as the tree rollout sends a forced
    strategy (`ChatRequest.prefix`), the reply's text starts with it, and the act's own prefix takes the
    place of a fork rule's forced prefixes (`RolloutConfig.forks`). `constraint` restricts the reply (the
    role's declared action space, `Role.constrain`); the engine sends it as `ChatRequest.constraint`.
    """

    role: str
    messages: list[Message]
    parse: Callable[[str], Action] = field(compare=False, repr=False)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    branch: bool = True
    prefix: str = ""
    spec: Role | None = field(default=None, compare=False, repr=False)
    fields: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    constraint: Constraint | None = None


@dataclass(frozen=True)
class AskLLM:
    """The fixed LLM server answers `messages`; `purpose` labels the call in traces (`answer`, `roadmap`).

    Result: the completion text (str).
    """

    purpose: str
    messages: list[Message]
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    spec: Role | None = field(default=None, compare=False, repr=False)
    fields: dict[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Retrieve:
    """Search the retriever with each query. Result: `list[list[Hit]]`, one ranked list per query."""

    queries: list[str]
    k: int


Request = Act | AskLLM | Retrieve


@dataclass(frozen=True)
class Acted:
    """Result of an `Act`: the policy's text, its parsed action, and the id of the recorded node.

    `act` is the request as it was finally sent: when the prompt was cut to fit the context, its `fields`
    hold the documents the policy actually saw (e.g. a filter's ids refer to those).
    """

    text: str
    action: Action
    node_id: int
    act: Act | None = field(default=None, compare=False, repr=False)


@dataclass
class Answer:
    """What a workflow returns: the final answer text, plus facts for reports (e.g. `{"strategy": "planning"}`)."""

    text: str
    info: dict[str, Any] = field(default_factory=dict)


EpisodeGenerator = Generator[Request, Any, Answer]
"""What a workflow's `run(question)` returns: a generator that plays one episode, yielding requests, receiving
their results and returning the `Answer`."""


class BudgetExceeded(Exception):
    """Thrown into a workflow when its path exceeds the engine's depth or token budget.

    A workflow may catch it and finish (e.g. ask the LLM to answer with what it has); if it does not,
    the path ends as a leaf with status `truncated` and an empty answer.
    """


# ---------------------------------------------------------------------------------------------- workflows


class Workflow(ABC):
    """The control flow of one system (C-3PO, MMOA-RAG, a RAG-Gym agent...). Pure logic, no I/O, picklable.

    `roles` declares the policy roles it may play (what credit and trainers enumerate); `needs` says which
    parts of the environment a run must provide (`policy`, `llm`, `retriever`), so entry points build only
    those.
    """

    name: str = "workflow"
    roles: ClassVar[tuple[Role, ...]] = ()

    @property
    def needs(self) -> frozenset[str]:
        """The parts this configured workflow calls: a subset of {"policy", "llm", "retriever"}."""
        return frozenset({"policy", "llm", "retriever"} if self.roles else {"llm", "retriever"})

    @abstractmethod
    def run(self, question: Question) -> EpisodeGenerator:
        """Yield requests, receive their results, return the `Answer`. Must be deterministic given results."""


ResultOf = Acted | str | list[list[Hit]]


def team_name(workflow: Workflow, requested: str) -> str:
    """A team's one name in metrics.json, report.md, collect's summary, the progress bar, `/health` and the
    served model id: its class's `name` (`name = "self-ask"`), or `requested` (the `--workflow` value, e.g.
    `selfask.team:SelfAsk`) when the class keeps the base's placeholder. The server also answers to
    `requested`, an alias."""
    name = getattr(workflow, "name", None)
    return name if isinstance(name, str) and name.strip() and name != Workflow.name else requested


RANKING_PROMPTS: dict[str, str] = {}
"""The prompt of each keep-one-of-N ranking scorer, by the scorer's name, registered by the package that
states it (the `llm` scorer's: RAG-Gym's Fig. 10, `workflows/gym/ranking.py`)."""


def register_ranking_prompt(scorer: str, template: str) -> str:
    """Register `template` (a `str.format` template of `question`, `history`, `actions`) as scorer `scorer`'s
    prompt (once; at import time of the package that states it); returns it."""
    if scorer in RANKING_PROMPTS:
        raise ValueError(f"a ranking prompt is already registered for scorer {scorer!r}")
    RANKING_PROMPTS[scorer] = template
    return template
