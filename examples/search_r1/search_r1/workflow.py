"""Search-R1's agent: one trainable policy that searches for up to `max_turns` turns, then answers.

Each turn the policy (role `agent`) writes a reply; its first tag decides:

- `<answer> a </answer>`: the episode ends with answer `a` (outcome reward: exact match with a gold answer,
  `--ppo.reward em`, credited to every turn, `--ppo.credit outcome`);
- `<search> q </search>`: the retriever's top `topk` passages for `q` come back as the next prompt's
  `<information>` block (an observation: prompt tokens, never trained);
- neither: the next prompt carries the invalid-action note.

After `max_turns` searching turns (`--max-turns N`, the team's own option, `options.py`; the recipe's 4 is
the paper's budget), one last turn may only answer: a search there is not run and the episode ends with no answer (Search-R1's final rollout without
the search engine). The documents of every turn are the role's `docs` field, so an over-long prompt drops the
lowest-ranked hits of the longest search first.

`Answer.info`: turns (policy replies), searches, queries, invalid (replies without a valid tag), stop
(answer | max_turns | budget).
"""

from __future__ import annotations

from typing import Any

from ragteam import (
    Answer,
    BudgetExceeded,
    Doc,
    EpisodeGenerator,
    Question,
    Retrieve,
    Role,
    Workflow,
    WorkflowConfig,
)
from search_r1 import prompts
from search_r1.options import SearchR1Options
from search_r1.parsers import parse_reply, write_reply

AGENT = Role(
    "agent", prompts.messages, parse_reply, stop=("</search>", "</answer>"), docs="docs", write=write_reply
)


def _closed(text: str, kind: str) -> str:
    """The reply as the next prompt shows it: a search ends with its `</search>` tag even where the backend
    left the stop string out of the text (Search-R1's transcripts keep it)."""
    return text if kind != "search" or text.rstrip().endswith("</search>") else text + "</search>"


class SearchR1(Workflow):
    """Search-R1's think / search / answer loop over any retriever, trained as one role."""

    name = "search-r1"
    roles = (AGENT,)
    needs = frozenset({"policy", "retriever"})
    Options = SearchR1Options  # its own options: every command running the team takes `--max-turns`

    def __init__(self, cfg: WorkflowConfig | None = None, max_turns: int | None = None) -> None:
        self.cfg = cfg if isinstance(cfg, SearchR1Options) else SearchR1Options(**dict(cfg or {}))
        self.max_turns = max_turns if max_turns is not None else self.cfg.max_turns  # --max-turns

    def run(self, question: Question) -> EpisodeGenerator:
        replies: list[str] = []
        seen: list[tuple[str, list[Doc]]] = []  # per earlier turn: (query, hits); ("", []) when invalid
        info: dict[str, Any] = {"turns": 0, "searches": 0, "queries": [], "invalid": 0}
        for turn in range(self.max_turns + 1):
            try:
                acted = yield AGENT.act(question=question.question, replies=list(replies), docs=list(seen))
            except BudgetExceeded:
                return Answer("", info={**info, "stop": "budget"})
            action = acted.action
            info["turns"] += 1
            info["invalid"] += 0 if action.valid else 1
            if action.kind == "answer":
                return Answer(str(action.value), info={**info, "stop": "answer"})
            if turn == self.max_turns:  # the last turn may only answer
                break
            if action.kind == "search":
                ranked = yield Retrieve([action.value], k=self.cfg.topk)
                seen.append((action.value, [h.doc for h in ranked[0]] if ranked else []))
                info["searches"] += 1
                info["queries"].append(action.value)
            else:
                seen.append(("", []))
            replies.append(_closed(acted.text, action.kind))
        return Answer("", info={**info, "stop": "max_turns"})
