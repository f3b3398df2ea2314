"""C-3PO's inference (the paper's Algorithm 1) as a workflow: a proxy between the retriever and the LLM server.

    router  -> [No Retrieval]        : the LLM answers the question alone                (direct answering)
            -> [Retrieval]<query>    : retrieve(query) -> filter -> LLM answers with the kept documents
                                                                                          (single pass)
            -> [Planning]            : LLM writes a roadmap; then, at most `max_rounds` rounds of
                                       decider -> [Retrieval]<subquery> -> retrieve -> filter -> accumulate,
                                       until the decider says [LLM]; the LLM answers with everything kept
                                                                                          (multi-step)

The router, filter and decider are roles of the trainable policy (`Act`); the roadmap and the answer are the
fixed LLM server's (`AskLLM`). `C3POOptions.strategy` (`--strategy`) other than `auto` forces one strategy for every
question (the paper's fixed-strategy ablation, Table 3). A forced `retrieval` still asks the router, with its
reply forced to start with `[Retrieval]` (`Act.prefix`, the mechanism of the tree rollout's forced
strategies): the proxy writes the query, and the router node is recorded; a malformed query falls back to the
question, as the router's parser does. A forced `no_retrieval` or `planning` leaves the proxy nothing to write,
so the router is not asked. The filter's objective in the planning loop is the decider's thought, as in the
paper's state transition (B.2). When a search keeps no document, the decider sees a note saying so under the
query's name.

If the engine's budget stops a policy act (`BudgetExceeded`), the episode does not die: a stopped filter keeps
every document, a stopped decider ends the loop, and the LLM answers with what was gathered.

Depth is C-3PO's t (`depth_rule = tree.DEPTH`): the router, filter and decider acts, the LLM's roadmap
and answer calls and the answer leaf are one step each; the engine's fork schedule, its depth limit and the
depth statistics all count it so (docs/workflows.md, *Depth t*).

`Answer.info`: strategy (no_retrieval | retrieval | planning), forced (bool), acts (policy acts on the path),
rounds (retrieval-filter rounds), invalid (invalid actions, fallbacks taken), stop (planning: llm | max_rounds
| budget), doc_ids (the documents the LLM answered with).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

from ragteam.protocol import Answer, BudgetExceeded, EpisodeGenerator, Retrieve, Role, Workflow
from ragteam.types import Action, Doc, Hit, Message, Question
from ragteam.workflows.answers import extract_answer, format_options
from ragteam.workflows.c3po import prompts
from ragteam.workflows.c3po.options import PRESETS, C3POOptions
from ragteam.workflows.c3po.parsers import (
    extract_thought,
    parse_decider,
    parse_filter,
    parse_router,
    write_decider,
    write_filter,
    write_router,
)
from ragteam.workflows.c3po.settings import ROUTER_TAGS
from ragteam.workflows.c3po.tree import DEPTH as C3PO_DEPTH
from ragteam.workflows.config import WorkflowConfig

ROUTER_MAX_TOKENS = 64
"""The router writes one tag and at most a short query (its cap unless `cfg.role_caps` is off, as under
`--profile paper`: then it gets `rollout.max_tokens`, Table 7's 2048, like the filter and the decider)."""

FORCED_RETRIEVAL = ROUTER_TAGS["retrieval"]
"""The router's reply under `--strategy retrieval`: this prefix, then the proxy's own query."""

STOP = ("\nQuestion:",)
"""Filter and decider stop if they start a new question (small models repeat the prompt's pattern); the
action comes before it."""

MAX_OBJECTIVE_CHARS = 600
"""The decider's thought, passed to the filter as the step's objective, is cut to this length."""

_Sub = Generator[Any, Any, list[Doc]]


# ---- the roles: the proxy's three (policy) and the LLM server's two, with their templates and parsers
# (each function takes the fields it uses: `Role` binds only those)


def _router_messages(question: str) -> list[Message]:
    return prompts.messages(prompts.router_prompt(question))


def _filter_messages(question: str, docs: list[Doc], objective: str | None = None) -> list[Message]:
    return prompts.messages(prompts.filter_prompt(question, docs, objective))


def _parse_filter(text: str, docs: list[Doc]) -> Action:
    return parse_filter(text, n_docs=len(docs))


def _decider_messages(question: str, roadmap: str, docs: list[Doc]) -> list[Message]:
    return prompts.messages(prompts.decider_prompt(question, roadmap, docs))


def _parse_decider(text: str, question: str, docs: list[Doc]) -> Action:
    return parse_decider(text, question=question, have_docs=bool(docs))


def _roadmap_messages(question: str) -> list[Message]:
    return prompts.messages(prompts.roadmap_prompt(question))


def _answer_messages(question: str, docs: list[Doc], options: str = "") -> list[Message]:
    return prompts.messages(prompts.answer_prompt(question, docs, options))


ROUTER = Role("router", _router_messages, parse_router, max_tokens=ROUTER_MAX_TOKENS, write=write_router)
FILTER = Role("filter", _filter_messages, _parse_filter, stop=STOP, docs="docs", write=write_filter)
DECIDER = Role("decider", _decider_messages, _parse_decider, stop=STOP, docs="docs", write=write_decider)
ROADMAP = Role("roadmap", _roadmap_messages)
ANSWER = Role("answer", _answer_messages, docs="docs")


def _docs(ranked: list[list[Hit]]) -> list[Doc]:
    return [h.doc for h in ranked[0]] if ranked else []


class C3PO(Workflow):
    """Reasoning Router, Information Filter and Decision Maker between the retriever and the LLM server."""

    name = "c3po"
    Options = C3POOptions  # its options: the flags of a command that runs it (options.py)
    presets = PRESETS  # its rows of each profile (options.py)
    roles = (ROUTER, FILTER, DECIDER)
    depth_rule = C3PO_DEPTH

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = C3POOptions.of(cfg)

    @property
    def needs(self) -> frozenset[str]:
        if self.cfg.strategy == "no_retrieval":
            return frozenset({"llm"})
        return frozenset({"policy", "llm", "retriever"})

    def run(self, question: Question) -> EpisodeGenerator:
        q = question.question
        acts: list[Action] = []  # the actions of this path's policy acts, for Answer.info
        strategy = self.cfg.strategy
        query = q
        if strategy in ("auto", "retrieval"):
            act = ROUTER.act(question=q)
            if not self.cfg.role_caps:
                act = dataclasses.replace(act, max_tokens=None)  # the engine's rollout.max_tokens
            if strategy == "retrieval":
                act = dataclasses.replace(act, prefix=FORCED_RETRIEVAL)
            try:
                acted = yield act
            except BudgetExceeded:  # no act may run at all: the LLM answers alone (or, forced, searches q)
                acted = None
            if acted is None:
                strategy = "no_retrieval" if strategy == "auto" else strategy
            else:
                acts.append(acted.action)
                strategy = acted.action.kind if strategy == "auto" else strategy
                if strategy == "retrieval" and acted.action.kind == "retrieval":
                    query = str(acted.action.value or q)
        info: dict[str, Any] = {"strategy": strategy, "forced": self.cfg.strategy != "auto"}
        if strategy == "no_retrieval":
            docs: list[Doc] = []
        elif strategy == "retrieval":
            info["rounds"] = 1
            docs = yield from self._single_pass(q, query, acts)
        else:
            docs = yield from self._planning(q, acts, info)
        text = yield ANSWER.ask(question=q, docs=docs, options=format_options(question))
        info.update(acts=len(acts), invalid=sum(not a.valid for a in acts), doc_ids=[d.id for d in docs])
        info.setdefault("rounds", 0)
        return Answer(extract_answer(text, question.choices), info=info)

    def _filter(
        self, q: str, docs: list[Doc], acts: list[Action], objective: str | None = None, reraise: bool = False
    ) -> _Sub:
        """The Information Filter over `docs`: the documents it keeps. Stopped by the budget, it keeps them
        all, or re-raises `BudgetExceeded` when `reraise` (so the planning loop can stop too)."""
        if not docs:
            return []
        try:
            acted = yield FILTER.act(question=q, docs=docs, objective=objective)
        except BudgetExceeded:
            if reraise:
                raise
            return list(docs)
        acts.append(acted.action)
        shown = acted.act.fields["docs"] if acted.act and acted.act.fields else docs  # after any fitting
        return [shown[i - 1] for i in acted.action.value if 1 <= i <= len(shown)]

    def _single_pass(self, q: str, query: str, acts: list[Action]) -> _Sub:
        ranked = yield Retrieve([query], k=self.cfg.topk)
        return (yield from self._filter(q, _docs(ranked), acts))

    def _planning(self, q: str, acts: list[Action], info: dict[str, Any]) -> _Sub:
        roadmap = yield ROADMAP.ask(question=q)
        gathered: list[Doc] = []  # what the LLM will answer with
        shown: list[Doc] = []  # what the decider sees: gathered documents and "nothing found" notes
        rounds, stop = 0, "max_rounds"
        while rounds < self.cfg.max_rounds:
            try:
                acted = yield DECIDER.act(question=q, roadmap=roadmap, docs=shown)
            except BudgetExceeded:
                stop = "budget"
                break
            acts.append(acted.action)
            if acted.action.kind == "llm":
                stop = "llm"
                break
            subquery = str(acted.action.value or q)
            # the step's objective for the filter: the decider's thought (none when its output was malformed)
            objective = extract_thought(acted.text)[:MAX_OBJECTIVE_CHARS] if acted.action.valid else ""
            objective = objective or None
            ranked = yield Retrieve([subquery], k=self.cfg.topk)
            rounds += 1
            docs = _docs(ranked)
            stopped = False
            try:
                kept = yield from self._filter(q, docs, acts, objective, reraise=True)
            except BudgetExceeded:
                kept, stopped = docs, True
            known = {d.id for d in gathered}
            new = [d for d in kept if d.id not in known]
            gathered += new
            shown += new if kept else [Doc(id="", title=subquery, text=prompts.NO_RELEVANT)]
            if stopped:
                stop = "budget"
                break
        info.update(rounds=rounds, stop=stop)
        return gathered
