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

`ACTS` (every workflow that declares no rule of its own) counts policy acts: the limit bounds the acts on a
path. A workflow that counts otherwise declares its rule in its own package (C-3PO's steps:
`workflows/c3po/tree.py`).

A *tree* is a workflow's own tree rollout: fork rules by depth t (as that workflow counts it) and a depth
limit, as `RolloutConfig` fields. A workflow's package registers it under the workflow's name
(`register_tree`), and `--rollout.forks NAME` and `collect sft --tree NAME` look it up here (`tree`), so
neither the rollout nor collect names a paper.
"""

from __future__ import annotations

from collections.abc import Mapping
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
"""Depth as the number of policy acts on the path (every workflow that declares no rule of its own)."""


def depth_rule(workflow: Any) -> DepthRule:
    """The depth rule a workflow declares (`depth_rule` attribute), else `ACTS`."""
    rule = getattr(workflow, "depth_rule", None)
    if rule is None:
        return ACTS
    if not isinstance(rule, DepthRule):
        raise TypeError(f"{type(workflow).__name__}.depth_rule is {type(rule).__name__}, not a DepthRule")
    return rule


@dataclass(frozen=True)
class Tree:
    """A workflow's tree rollout: `fields` are `RolloutConfig` fields (`forks`, `max_depth`) with depth t as
    workflow `name` counts it; `about` says what it forks, for errors (`C-3PO's router`)."""

    name: str
    fields: Mapping[str, Any]
    about: str


TREES: dict[str, Tree] = {}
"""The registered trees by the name of the workflow whose roles they fork."""


def register_tree(name: str, fields: Mapping[str, Any], about: str) -> Tree:
    """Register workflow `name`'s tree rollout (once; at import time of its package) and return it."""
    if name in TREES:
        raise ValueError(f"a tree is already registered for workflow {name!r}")
    TREES[name] = Tree(name, fields, about)
    return TREES[name]


def tree(name: str) -> Tree | None:
    """The tree rollout registered for workflow `name`, if its package registered one."""
    return TREES.get(name)
