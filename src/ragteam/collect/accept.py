"""When a leaf counts as correct: the acceptance rule of rejection sampling (`--accept`).

    cover_em      the leaf's cover-EM is 1 (a bare metric name means `>= 1`)
    em            exact match
    f1>=0.5       token F1 of at least 0.5 (any metric the eval records: em, f1, precision, recall,
                  cover_em, mc_acc)
    judge         an LLM judge (C-3PO's validator prompt) says the answer is correct; needs --judge.base-url

Only an `ok` leaf can be correct: a failed path, or one a budget cut off (`truncated`), never is, whatever its
rewards say (`f1>=0` therefore accepts every answered path: plain sampling without rejection, useful for
smoke tests). The rule is data (`AcceptRule`), so the pure selection functions take a leaf predicate and
know nothing about metrics or judges.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ragteam.rollout.tree import Episode, Node

METRICS = ("em", "f1", "precision", "recall", "cover_em", "mc_acc", "judge")
"""What `--accept` may test: the leaf rewards the engine records (`metrics.answer.score_answer`) or judge."""

_RULE = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s*(?:>=\s*([-+]?(?:\d+\.?\d*|\.\d+)))?\s*$")

Verdicts = dict[tuple[str, str], float]
"""Judge verdicts (1.0 / 0.0) by (question id, answer text)."""


@dataclass(frozen=True)
class AcceptRule:
    """`metric >= threshold` on an answer leaf; `metric` is a leaf reward name or `judge`."""

    metric: str
    threshold: float = 1.0

    @classmethod
    def parse(cls, text: str) -> AcceptRule:
        """`cover_em`, `em`, `f1>=0.5`, `judge`; ValueError naming the accepted forms otherwise."""
        m = _RULE.match(text or "")
        if m is None or m.group(1) not in METRICS:
            raise ValueError(
                f"--accept {text!r}: expected a metric, optionally with a threshold (e.g. cover_em, em, "
                f"f1>=0.5, judge); metrics: {', '.join(METRICS)}"
            )
        threshold = float(m.group(2)) if m.group(2) is not None else 1.0
        if m.group(1) == "judge" and m.group(2) is not None:
            raise ValueError(f"--accept {text!r}: judge takes no threshold (its verdict is 1 or 0)")
        return cls(m.group(1), threshold)

    def __str__(self) -> str:
        return self.metric if self.threshold == 1.0 else f"{self.metric}>={self.threshold:g}"

    @property
    def needs_judge(self) -> bool:
        return self.metric == "judge"

    def value(self, episode: Episode, leaf: Node, verdicts: Verdicts | None = None) -> float:
        """The leaf's value of the rule's metric (0 for a leaf that is not `ok`)."""
        if leaf.status != "ok":
            return 0.0
        if self.metric == "judge":
            if verdicts is None:
                raise ValueError("--accept judge needs the judge's verdicts (pass --judge.base-url)")
            return verdicts.get((episode.question.id, leaf.answer or ""), 0.0)
        if leaf.kind != "answer":
            raise ValueError(f"node {leaf.id} is a {leaf.kind!r} node, not an answer leaf")
        if self.metric not in leaf.rewards:  # e.g. mc_acc on a question without options: say which question
            raise ValueError(
                f"--accept {self}: question {episode.question.id}: answer leaf {leaf.id} has no reward "
                f"{self.metric!r}; it has: {sorted(leaf.rewards) or 'none'}"
            )
        return float(leaf.rewards[self.metric])

    def predicate(self, episode: Episode, verdicts: Verdicts | None = None) -> Callable[[Node], bool]:
        """`leaf -> bool` for the leaves of `episode`: ok and `value >= threshold`."""
        return lambda leaf: leaf.status == "ok" and self.value(episode, leaf, verdicts) >= self.threshold


def judge_answers(judge_cfg: Any, episodes: Iterable[Episode]) -> tuple[Verdicts, dict[str, Any]]:
    """Judge every distinct (question, answer) of the `ok` leaves once; verdicts and the judge's settings.

    `judge_cfg` is eval's `JudgeConfig` (an OpenAI-compatible endpoint); the judge is asked at temperature 0,
    so rerunning a collection judges the same answers the same way."""
    from ragteam.metrics.judge import LLMJudge

    if not judge_cfg.base_url:
        raise ValueError("--accept judge needs a judge endpoint: pass --judge.base-url URL")
    todo: dict[tuple[str, str], Any] = {}
    for ep in episodes:
        for leaf in ep.leaves():
            if leaf.status == "ok":
                todo.setdefault((ep.question.id, leaf.answer or ""), ep.question)
    model = judge_cfg.chat_model()
    judge = LLMJudge(model)
    keys = list(todo)
    scores = judge.judge([todo[k] for k in keys], [k[1] for k in keys]) if keys else []
    info = {"endpoint": judge_cfg.base_url, **judge.settings(), "counts": dict(judge.stats)}
    return dict(zip(keys, scores)), info
