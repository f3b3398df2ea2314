"""The depth t of a node in an episode tree: one definition per workflow, read by the fork schedule, the depth
limit and the depth statistics alike.

A `DepthRule` says which node kinds are one step deeper than their parent; the question (the root, which is
not a node) is at depth 0, and a node's depth is the number of steps on the path from the root down to it,
itself included. Three things read it, and nothing else counts depth:

- the fork schedule: an act taken on a path whose last node is at depth t (the act's state is at depth t;
  its node will be at t + 1) forks by the first `ForkRule` whose `depth_from <= t <= depth_to`;
- the depth limit: an act runs only if its node and the `tail` steps every path still takes after its last
  act fit within `RolloutConfig.max_depth`, so that no node of the tree, leaf included, is deeper than it
  (as long as max_depth leaves room for the shortest ending);
- the statistics: the depth of an episode is the depth of its primary leaf (`stats/episodes.py`).

`ACTS` (every workflow but C-3PO) counts policy acts: the limit bounds the acts on a path, as before.
`C3PO` counts the steps of C-3PO's tree (paper, section 5.1 and Fig. 6; the argument is in
docs/workflows.md, *Depth t*): every act of the proxy, every call to the LLM server (roadmap, answer) and the
answer leaf. A search is part of the transition to the filter's state (the paper's appendix B.2), not a step.
Direct answering ends at depth 3 (router, answer call, answer), single pass at 4 (router, filter, answer call,
answer), planning with R retrieval-filter rounds at 2R + 5 (router, roadmap, R deciders and R filters, the
decider's [LLM], answer call, answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DepthRule:
    """Which node kinds add one to the depth, and how many steps every path takes after its last act."""

    name: str
    steps: frozenset[str]
    tail: int = 0

    def step(self, kind: str) -> int:
        """1 when a node of `kind` is one step deeper than its parent, else 0."""
        return 1 if kind in self.steps else 0

    def of(self, ep: Any, node_id: int) -> int:
        """The depth of node `node_id` of episode `ep` (a `rollout.tree.Episode`; not imported: workflows
        declare their rule from here, below the rollout): the steps on the path from the root down to it."""
        return sum(self.step(n.kind) for n in ep.path(node_id))

    def act_fits(self, t: int, max_depth: int) -> bool:
        """Whether an act taken at depth `t` (its node at t + 1) leaves room for the path's last steps."""
        return t + self.step("policy") + self.tail <= max_depth


ACTS = DepthRule("acts", frozenset({"policy"}))
"""Depth as the number of policy acts on the path (every workflow except C-3PO)."""

C3PO = DepthRule("c3po", frozenset({"policy", "llm", "answer"}), tail=2)
"""C-3PO's depth t: proxy acts, LLM calls and the answer leaf are steps; every path ends with the LLM's answer
call and the answer leaf (tail 2), so an act at depth t runs only if t + 3 <= max_depth."""


def depth_rule(workflow: Any) -> DepthRule:
    """The depth rule a workflow declares (`depth_rule` attribute), else `ACTS`."""
    rule = getattr(workflow, "depth_rule", None)
    if rule is None:
        return ACTS
    if not isinstance(rule, DepthRule):
        raise TypeError(f"{type(workflow).__name__}.depth_rule is {type(rule).__name__}, not a DepthRule")
    return rule
