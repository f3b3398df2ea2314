"""Rejection sampling from episode trees: policy acts on paths that end in a correct answer become SFT rows.

A tree (C-3PO's tree rollout, or N independent samples per question) holds correct and wrong root-to-leaf
paths. A policy node is kept when at least one leaf below it is correct (`accept`): it is an ancestor of a
correct answer, so imitating it can lead there. A node above both correct and wrong leaves is kept once.
Unchosen keep-one-of-N siblings have no leaf below them and are never kept.

Each kept node is one row: its role, its prompt exactly as the policy saw it (`node.messages`, after any
fitting to the context) and its reply (`node.completion.text`, a forced prefix included: C-3PO's forced
`[No Retrieval]` is the router's reply on that branch). Nodes whose reply did not parse (`action.valid`
false: the workflow fell back) are dropped unless `keep_invalid`, so the policy does not learn malformed
output; empty replies are always dropped (the trainer rejects them). With `relabel` (role name -> the
role's `write`), such a node is kept instead with the canonical reply of the action the workflow took
(its fallback) as the target, the original reply recorded in the provenance: a model too weak to write the
format still shows, on its correct paths, which actions led there (relabeling by the executed action).

Everything here is pure: an episode and a leaf predicate in, rows and counts out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ragteam.collect.rows import SFTRow, dedupe
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Action

LeafTest = Callable[[Node], bool]
"""Whether an answer leaf is correct (see `ragteam.collect.accept.AcceptRule.predicate`)."""


def correct_leaves(episode: Episode, accept: LeafTest) -> list[Node]:
    """The answer leaves that are `ok` and accepted, in id order."""
    return [leaf for leaf in episode.leaves() if leaf.status == "ok" and accept(leaf)]


def kept_nodes(episode: Episode, accept: LeafTest) -> list[Node]:
    """The policy nodes on root-to-leaf paths whose leaf is correct, each once, in id order."""
    keep: set[int] = set()
    for leaf in correct_leaves(episode, accept):
        keep.update(n.id for n in episode.path(leaf.id) if n.kind == "policy")
    return [episode.nodes[i] for i in sorted(keep)]


def leaves_under(episode: Episode) -> dict[int, list[Node]]:
    """Node id -> the answer leaves in its subtree (every node kind), by one walk up from each leaf."""
    out: dict[int, list[Node]] = {n.id: [] for n in episode.nodes}
    for leaf in episode.leaves():
        for n in episode.path(leaf.id):
            out[n.id].append(leaf)
    return out


def sft_rows(
    episode: Episode,
    accept: LeafTest,
    *,
    value: Callable[[Node], float] | None = None,
    source: str = "rejection_sampling",
    teacher: str = "",
    keep_invalid: bool = False,
    relabel: dict[str, Callable[[Action], str]] | None = None,
) -> tuple[list[SFTRow], Counter]:
    """SFT rows of the kept nodes of one episode (deduplicated), and counts of what was dropped and why.

    `value(leaf)` is the metric the rule tests (recorded as the node's `reward`: the mean over the leaves
    below it, C-3PO's Monte Carlo value of the node); without it `reward` is the fraction of correct leaves.
    """
    counts: Counter = Counter()
    below = leaves_under(episode)
    rows: list[SFTRow] = []
    for node in kept_nodes(episode, accept):
        text = node.text
        if node.messages is None or text is None:
            counts["no_prompt_or_reply"] += 1
            continue
        if not text.strip():
            counts["empty_reply"] += 1
            continue
        relabeled = None
        if node.action is not None and not node.action.valid and not keep_invalid:
            writer = (relabel or {}).get(node.role)
            if writer is None:
                counts["invalid_action"] += 1
                continue
            relabeled, text = text, writer(node.action)
            counts["relabeled"] += 1
        leaves = below[node.id]
        good = {leaf.id for leaf in leaves if leaf.status == "ok" and accept(leaf)}
        score = value or (lambda leaf, good=good: 1.0 if leaf.id in good else 0.0)
        provenance: dict[str, Any] = {
            "workflow": episode.workflow,
            "source": source,
            "episode": episode.id,
            "node": node.id,
            "depth": node.depth,
            "reward": sum(score(leaf) for leaf in leaves) / len(leaves) if leaves else 0.0,
            "correct_leaves": len(good),
            "leaves": len(leaves),
            "teacher": teacher,
        }
        if relabeled is not None:
            provenance["relabeled_from"] = relabeled
        if node.completion is not None and node.completion.forced_tokens:
            provenance["forced"] = (node.sampling or {}).get("prefix", True)
        rows.append(SFTRow(node.role, list(node.messages), text, episode.question.id, provenance))
    rows, dropped = dedupe(rows)
    if dropped:
        counts["duplicates"] += dropped
    return rows, counts


def tree_counts(episode: Episode, accept: LeafTest) -> dict[str, Any]:
    """What one tree holds: leaves, correct leaves (= kept paths), policy nodes per role."""
    leaves = episode.leaves()
    good = correct_leaves(episode, accept)
    return {
        "leaves": len(leaves),
        "correct_leaves": len(good),
        "failed_leaves": sum(1 for leaf in leaves if leaf.status == "failed"),
        "policy_nodes": Counter(n.role for n in episode.policy_nodes()),
    }
