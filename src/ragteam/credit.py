"""Credit assignment: from one episode tree to a reward for each trained (policy) node.

Every credit function is pure, `(episode, reward) -> {policy node id: reward}`, registered by name
(`get_credit("tree_mc")`) so a trainer picks one from its config. `reward` is a leaf's scalar reward
(`RewardOf`, a function `(leaf) -> float`): what a leaf is worth is a reward's business
(`ragteam.metrics.rewards`, registered by name, bound to the episode's question), how that worth spreads over
the acts above it is credit's. See `leaf_reward` for failed and truncated leaves.

Which nodes get an entry: a policy node is credited from the answer leaves of its subtree, so a policy node
with no leaf below it gets no entry from `outcome`, `tree_mc` and `mmoa`. That covers the unchosen siblings
of a keep-one-of-N act (childless by construction: they are not on any path to a leaf) and the paths an
episode dropped when another path failed. `process` credits the unchosen siblings from their selector score.

| name    | paper    | a policy node's reward                                                             |
|---------|----------|-------------------------------------------------------------------------------------|
| outcome | (any)    | the reward of its path's leaf; the mean over the leaves below it in a branched tree |
| tree_mc | C-3PO    | mean reward of the leaves in its subtree (Monte Carlo estimate, C-3PO eq. 5)        |
| tree_mean | C-3PO  | recursive mean over its children (each branch weighs the same, however deep)        |
| mmoa    | MMOA-RAG | shared reward (as `tree_mc`) plus its own `action.penalty` (stored <= 0, added)     |
| process | RAG-Gym  | its selector `score` when it has one, else as `tree_mc`                             |

`outcome` and `tree_mc` give the same numbers (a path's leaf is the only leaf below a node on a chain, and a
branched node gets the mean of its leaves either way); they are two names for two intents: "broadcast the
final reward" on plain runs, "C-3PO's expectation over the tree rollout" on branched ones.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TypeAlias, overload

from ragteam.rollout.tree import Episode, Node

__all__ = [
    "CREDITS",
    "ENTRY_POINT_GROUP",
    "CreditFn",
    "RewardOf",
    "get_credit",
    "leaf_outcomes",
    "leaf_reward",
    "leaves_below",
    "mmoa",
    "outcome",
    "credit_help",
    "credit_names",
    "process",
    "register_credit",
    "tree_mc",
    "tree_mean",
]

RewardOf: TypeAlias = Callable[[Node], float]
"""A leaf's scalar reward: a registered reward bound to the episode's question (`metrics.rewards.for_question`)."""

CreditFn: TypeAlias = Callable[[Episode, RewardOf], dict[int, float]]

CREDITS: dict[str, CreditFn] = {}
"""Registered credit functions by name (iterate it for the known names)."""


ENTRY_POINT_GROUP = "ragteam.credits"
"""The entry-point group an installed package declares its credit functions in (name = "package.module:fn"),
as teams are declared in `ragteam.workflows`: listed in `--ppo.credit`'s help, loaded when first used."""


@overload
def register_credit(name: str) -> Callable[[CreditFn], CreditFn]: ...
@overload
def register_credit(name: str, fn: CreditFn) -> CreditFn: ...
def register_credit(name: str, fn: CreditFn | None = None) -> CreditFn | Callable[[CreditFn], CreditFn]:
    """Register a credit function under `name` (a name may be registered once), as `register_workflow`
    registers a team: a call, `register_credit("mine", fn)`, or a decorator, `@register_credit("mine")`;
    either returns the function. The same function registered again, by its module imported a second time
    (a reload, a test that re-imports a package), replaces itself; another function under a taken name is
    an error."""

    def deco(fn: CreditFn) -> CreditFn:
        if not callable(fn):
            raise TypeError(
                f"credit {name!r}: a credit is a function (episode, reward) -> {{node id: reward}}"
            )
        if name in CREDITS and _origin(CREDITS[name]) != _origin(fn):
            raise ValueError(f"credit {name!r} is already registered ({CREDITS[name].__qualname__})")
        CREDITS[name] = fn
        return fn

    return deco(fn) if fn is not None else deco


def credit_names() -> list[str]:
    """Every credit name `get_credit` knows: the registered ones, then installed packages' (entry points)."""
    installed = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in CREDITS)
    return [*CREDITS, *installed]


def credit_help() -> str:
    """`--ppo.credit`'s description, its names read from the registry (so a package's credits appear)."""
    return f"credit function (ragteam.credit; register your own with ragteam.register_credit): {', '.join(credit_names())}"


def _origin(fn: CreditFn) -> tuple[str, str]:
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def get_credit(name: str) -> CreditFn:
    """The credit function registered as `name`, or an installed package's of that name (its entry point
    loaded, which registers it); a ValueError naming the known ones otherwise."""
    if name not in CREDITS:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            register_credit(name, ep.load())
    try:
        return CREDITS[name]
    except KeyError:
        raise ValueError(f"unknown credit {name!r}; known: {', '.join(sorted(credit_names()))}") from None


def leaf_reward(leaf: Node, reward: RewardOf) -> float:
    """The scalar reward of one answer leaf, `reward(leaf)`, except that a failed or truncated leaf with an
    empty `rewards` dict (the engine's failed leaves carry none) is worth 0 without calling it."""
    if leaf.kind != "answer":
        raise ValueError(f"node {leaf.id} is a {leaf.kind!r} node, not an answer leaf")
    if not callable(reward):
        raise TypeError(
            f"reward must be a function (leaf) -> float (a registered reward bound to its question: "
            f"ragteam.metrics.rewards.for_question), not {type(reward).__name__}"
        )
    if leaf.status != "ok" and not leaf.rewards:
        return 0.0
    return float(reward(leaf))


def leaves_below(episode: Episode) -> dict[int, list[Node]]:
    """For every policy node id, the answer leaves of its subtree in id order (empty when it has none).

    One pass builds the child lists, one depth-first walk from the roots collects leaves bottom-up, so the
    cost is the number of nodes plus the size of the result, up to a log factor for keeping id order (no
    `episode.children()` scan per node, which would be quadratic).
    """
    kids: dict[int | None, list[Node]] = {}
    ids = {n.id for n in episode.nodes}
    for n in episode.nodes:
        if n.parent is not None and n.parent not in ids:
            raise ValueError(f"episode {episode.id}: node {n.id} has parent {n.parent}, which is not a node")
        kids.setdefault(n.parent, []).append(n)
    below: dict[int, list[Node]] = {}
    # Iterative post-order: a node is finished after all its children are (no recursion limit on deep chains).
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(kids.get(None, []))]
    while stack:
        node, done = stack.pop()
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(kids.get(node.id, [])))
            continue
        if node.kind == "answer":
            below[node.id] = [node]
        else:
            below[node.id] = sorted(
                (lf for c in kids.get(node.id, []) for lf in below[c.id]), key=lambda x: x.id
            )
    return {n.id: below.get(n.id, []) for n in episode.nodes if n.kind == "policy"}


def leaf_outcomes(episode: Episode, reward: RewardOf) -> dict[int, dict[int, float]] | None:
    """For every policy node id, the answer leaves below it and their rewards ({leaf id: reward}): the leaf
    trajectories that pass through the act, which Tree-GRPO scores (`train/advantages.tree_grpo`). None when
    a leaf cannot be read under `reward` (an `ok` leaf without the metric it reads: a credit function of its
    own may not need it; an estimator that does says so)."""
    try:
        return {
            node_id: {lf.id: leaf_reward(lf, reward) for lf in leaves}
            for node_id, leaves in leaves_below(episode).items()
        }
    except (KeyError, TypeError):
        return None


def _mean_leaf_reward(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """Policy node id -> mean reward of the leaves below it, for policy nodes with at least one leaf."""
    out = {}
    for node_id, leaves in leaves_below(episode).items():
        if leaves:
            out[node_id] = sum(leaf_reward(lf, reward) for lf in leaves) / len(leaves)
    return out


@register_credit("outcome")
def outcome(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """Broadcast the final reward: each policy node on a path gets that path's leaf reward.

    A node above several leaves (a branched tree) gets their mean, which makes this equal to `tree_mc`; nodes
    with no leaf below them (unchosen keep-one-of-N siblings, dropped paths) get no entry.
    """
    return _mean_leaf_reward(episode, reward)


@register_credit("tree_mc")
def tree_mc(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """C-3PO's Monte Carlo credit (eq. 5): a policy node's value is the mean reward of the leaves reachable
    from it, an estimate of E[R | s, a] over the tree rollout. Nodes with no leaf below get no entry."""
    return _mean_leaf_reward(episode, reward)


@register_credit("mmoa")
def mmoa(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """MMOA-RAG's per-agent reward R_i = R_shared + P_i (eq. 3, 6, 9): the shared reward of the final answer
    (e.g. its F1; the leaf mean when the tree branches) plus the node's own `action.penalty`.

    Sign convention: penalties are stored as they are added, negative or zero (-0.5 rewriter with more than 4
    sub-questions, -1 selector with malformed ids, -0.5 generator over-long; see workflows/mmoa/parsers.py).
    A node without an action adds 0. Nodes with no leaf below get no entry.
    """
    shared = _mean_leaf_reward(episode, reward)
    penalty = {n.id: n.action.penalty if n.action is not None else 0.0 for n in episode.policy_nodes()}
    return {i: r + penalty[i] for i, r in shared.items()}


@register_credit("process")
def process(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """RAG-Gym's process reward: a policy node with a selector `score` (a keep-one-of-N candidate, chosen or
    not) gets that score as is, on the selector's own scale (e.g. a critic's logit or probability; nothing is
    rescaled here, so do not mix it with leaf rewards of another scale); other policy nodes fall back to
    `tree_mc`. Unchosen siblings are credited too, which is what makes preference pairs out of siblings.
    """
    out = tree_mc(episode, reward)
    for n in episode.policy_nodes():
        if n.score is not None:
            out[n.id] = float(n.score)
    return dict(sorted(out.items()))


@register_credit("tree_mean")
def tree_mean(episode: Episode, reward: RewardOf) -> dict[int, float]:
    """Recursive mean: a leaf is worth its reward, any other node the mean of its children's worth (children
    with no leaf below are left out). Where eq. 5's flat mean over leaves lets a branch that forked again
    weigh more (a node whose first child forks 2 x 2 and whose second ends at once counts 4 leaves against
    1), this weighs each child once: the estimate of E[R | s, a] under the policy that sampled the children
    (each child one draw). Equal to `tree_mc` on chains and on trees whose forks are all equally deep."""
    worth: dict[int, list[float]] = {}  # node id -> its children's worth (a leaf: its reward)
    value: dict[int, float] = {}
    for node in reversed(episode.nodes):  # children come after their parent (Episode.add): bottom-up
        if node.parent is not None and node.parent >= node.id:
            raise ValueError(f"episode {episode.id}: node {node.id} comes before its parent {node.parent}")
        if node.kind == "answer":
            value[node.id] = leaf_reward(node, reward)
        elif worth.get(node.id):
            value[node.id] = sum(worth[node.id]) / len(worth[node.id])
        if node.id in value and node.parent is not None:
            worth.setdefault(node.parent, []).append(value[node.id])
    return {n.id: value[n.id] for n in episode.policy_nodes() if n.id in value}
