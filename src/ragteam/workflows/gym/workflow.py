"""RAG-Gym's search-or-answer process (the paper's high-level MDP) with its six agent designs.

State: the question and the information-seeking history, a list of (query, documents) — shown to the actor as
the documents themselves (RAG, ReAct) or as a short answer to each query written from them (Search-o1,
Re2Search). Each step the actor either searches a query (the retriever returns `cfg.topk` documents, the state
grows) or answers (the episode ends). At most `cfg.max_steps` actor steps, the paper's cap of 10
iterations. What the last step may do is `cfg.last_step`:

- `answer` (the `small` profile): the last step only answers (the forced-answer template), so every question
  gets an answer from at most `max_steps - 1` searches;
- `same` (the paper's Algorithm 1, `--profile paper`): the last step uses the agent's own template. A search
  there ends the episode without running it (no later step would read its documents): the answer is
  Re2Search's latest predicted answer, empty for the other designs (stop `max_steps`).

- direct, cot: one answering step, no retrieval.
- rag: the question itself is searched first (no actor step), then one answering step over its documents.
- react, search-o1: search or answer each step.
- re2search: each step states a predicted answer and, when its reasoning rests on an unverified claim, a
  query; no query ("None") means the answer stands.

Where the actor's prompt shows the history is `cfg.history_at`: `start` (the paper's Figure 9) or `end`, after
the question and the instructions, so each step's prompt extends the previous step's (`prompts.py`). The PRM,
the process data and PPO read the act's own messages, so they see the layout the actor saw.

Who plays what: the actor is the trainable policy (`Act`, role `actor`) in every design — it is what RAG-Gym
tunes. The document summaries of Search-o1 and Re2Search are written by the fixed LLM server (`AskLLM`,
purpose `summary`): in the paper only the actor is trained while the summarizer stays untuned (E.2).

If the engine's budget stops the actor (`BudgetExceeded`), the episode answers with Re2Search's last predicted
answer (empty for the other designs).

`Answer.info`: agent, steps (actor acts), searches (retrievals run), queries (the queries searched, then a
last step's unrun one), forced (answered at the last, answer-only step), invalid (invalid actions), stop
(answer | forced | max_steps | budget).
"""

from __future__ import annotations

from typing import Any

from ragteam.protocol import Answer, BudgetExceeded, EpisodeGenerator, Retrieve, Role, Workflow
from ragteam.types import Doc, Message, Question
from ragteam.workflows.answers import extract_answer
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import prompts
from ragteam.workflows.gym.options import PRESETS, GymOptions
from ragteam.workflows.gym.parsers import parse_actor, predicted_answer

AGENTS = ("direct", "cot", "rag", "react", "search-o1", "re2search")
SUMMARIZING = ("search-o1", "re2search")
DIRECT_MAX_TOKENS = 64
"""The direct agent's answer cap, unless `cfg.role_caps` is off (`--profile paper`: rollout.max_tokens)."""


def _actor_messages(
    agent: str,
    question: str,
    docs: list[tuple[str, list[Doc]]],
    notes: list[tuple[str, str]],
    forced: bool,
    history_at: prompts.HistoryAt = "start",
) -> list[Message]:
    """The actor's prompt: the state is the searches so far, with their documents (`docs`) or, for the
    summarizing designs, with the LLM's summaries (`notes`), shown before or after the question and the
    instructions (`history_at`, a field of the act so that fitting re-renders it in the same layout)."""
    history = (
        prompts.history_with_summaries(notes)
        if agent in SUMMARIZING
        else prompts.history_with_documents(docs)
    )
    return prompts.actor_messages(agent, question, history, forced=forced, history_at=history_at)


ACTOR = Role("actor", _actor_messages, parse_actor, docs="docs")  # the parser reads `mode` and `choices`
ACTOR_DIRECT = Role("actor", _actor_messages, parse_actor, max_tokens=DIRECT_MAX_TOKENS, docs="docs")
SUMMARY = Role("summary", prompts.summary_messages, docs="docs")


class GymAgent(Workflow):
    """One RAG-Gym agent design (`agent` in AGENTS) on the search-or-answer process."""

    Options = GymOptions  # its options: the flags of a command that runs it (options.py)
    presets = PRESETS  # its rows of each profile (options.py)

    def __init__(self, cfg: WorkflowConfig | None = None, agent: str = "react") -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown RAG-Gym agent {agent!r}; choose one of {', '.join(AGENTS)}")
        self.cfg = GymOptions.of(cfg)
        self.agent = agent
        self.name = f"gym:{agent}"

    roles = (ACTOR,)

    @property
    def needs(self) -> frozenset[str]:
        if self.agent in ("direct", "cot"):
            return frozenset({"policy"})
        return frozenset(
            {"policy", "llm", "retriever"} if self.agent in SUMMARIZING else {"policy", "retriever"}
        )

    def run(self, question: Question) -> EpisodeGenerator:
        q = question.question
        shown_question = prompts.question_block(q, question.choices)
        agent = self.agent
        docs_history: list[tuple[str, list[Doc]]] = []
        notes: list[tuple[str, str]] = []  # (query, summary) for the summarizing designs
        info: dict[str, Any] = {"agent": agent, "steps": 0, "searches": 0, "queries": [], "invalid": 0}
        last_guess: str | None = None

        if agent == "rag":
            ranked = yield Retrieve([q], k=self.cfg.topk)
            docs_history.append((q, [h.doc for h in ranked[0]] if ranked else []))
            info.update(searches=1, queries=[q])

        one_step = agent in ("direct", "cot", "rag")
        max_steps = 1 if one_step else self.cfg.max_steps
        for step in range(1, max_steps + 1):
            last = step == max_steps and not one_step
            forced = last and self.cfg.last_step == "answer"
            mode = (
                "answer"
                if one_step or forced
                else ("re2search" if agent == "re2search" else "search_or_answer")
            )
            try:
                role = ACTOR_DIRECT if agent == "direct" and self.cfg.role_caps else ACTOR
                acted = yield role.act(
                    agent=agent,
                    question=shown_question,
                    docs=list(docs_history),
                    notes=list(notes),
                    forced=forced,
                    history_at=self.cfg.history_at,
                    mode=mode,
                    choices=question.choices,
                )
            except BudgetExceeded:
                info["stop"] = "budget"
                return Answer(extract_answer(last_guess or "", question.choices), info=info)
            info["steps"] += 1
            info["invalid"] += 0 if acted.action.valid else 1
            if acted.action.kind == "answer":
                info.update(forced=forced, stop="forced" if forced else "answer")
                return Answer(str(acted.action.value or ""), info=info)
            query = str(acted.action.value)
            if agent == "re2search":
                last_guess = predicted_answer(acted.text) or last_guess
            if last:  # the paper's last step searched: nothing would read the documents
                info["queries"].append(query)
                info.update(forced=False, stop="max_steps")
                return Answer(extract_answer(last_guess or "", question.choices), info=info)
            ranked = yield Retrieve([query], k=self.cfg.topk)
            docs = [h.doc for h in ranked[0]] if ranked else []
            info["searches"] += 1
            info["queries"].append(query)
            if agent in SUMMARIZING:
                summary = yield SUMMARY.ask(question=q, query=query, docs=docs)
                notes.append((query, summary.strip()))
            else:
                docs_history.append((query, docs))
        # Unreachable: the last step answers (answer-only) or ends the episode (same).
        info["stop"] = "forced"
        return Answer(extract_answer(last_guess or "", question.choices), info=info)
