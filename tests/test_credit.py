"""Credit assignment on small hand-built episode trees (expected numbers worked out in the comments)."""

from __future__ import annotations

import pytest

from ragteam.credit import (
    CREDITS,
    get_credit,
    leaf_reward,
    leaves_below,
    mmoa,
    outcome,
    process,
    register_credit,
    tree_mc,
    tree_mean,
)
from ragteam.metrics.rewards import recorded
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Action, Question


def metric(name: str):
    """The metric reward `name` as a credit function gets it: bound to a question (one it does not read)."""
    reward = recorded(name)
    return lambda leaf: reward(leaf, None)


def _episode(nodes: list[Node]) -> Episode:
    ep = Episode(id="q", workflow="test", question=Question(id="q", question="Who?", golden_answers=["Ann"]))
    for n in nodes:
        ep.add(n)
    return ep


def policy(parent: int | None, role: str = "actor", **kw) -> Node:
    return Node(id=-1, parent=parent, kind="policy", role=role, **kw)


def leaf(parent: int, status: str = "ok", **rewards: float) -> Node:
    return Node(id=-1, parent=parent, kind="answer", answer="x", status=status, rewards=dict(rewards))


def c3po_tree() -> Episode:
    """A branched C-3PO-like tree:

    0 policy router
    ├── 1 policy query
    │   └── 2 retrieve
    │       ├── 3 policy filter ── 4 answer ok          f1 1.0  em 1
    │       └── 5 policy filter ── 6 answer ok          f1 0.5  em 0
    ├── 7 policy query
    │   ├── 8 answer failed (no rewards)                -> 0
    │   └── 11 policy filter  (dropped when 8 failed: no leaf)
    └── 9 llm ── 10 answer truncated                    f1 0.25 em 0
    """
    return _episode(
        [
            policy(None, "router"),  # 0
            policy(0, "query"),  # 1
            Node(id=-1, parent=1, kind="retrieve", queries=["q"]),  # 2
            policy(2, "filter"),  # 3
            leaf(3, f1=1.0, em=1.0),  # 4
            policy(2, "filter"),  # 5
            leaf(5, f1=0.5, em=0.0),  # 6
            policy(0, "query"),  # 7
            leaf(7, status="failed"),  # 8
            Node(id=-1, parent=0, kind="llm", role="answer"),  # 9
            leaf(9, status="truncated", f1=0.25, em=0.0),  # 10
            policy(7, "filter"),  # 11
        ]
    )


def gym_tree() -> Episode:
    """RAG-Gym keep-one-of-N: after one plain act and a search, 3 scored candidates, the 0.9 one continued.

    0 policy actor ── 1 retrieve ─┬── 2 policy actor  score 0.2 chosen False (childless)
                                  ├── 3 policy actor  score 0.9 chosen True ── 5 answer ok f1 0.6
                                  └── 4 policy actor  score 0.4 chosen False (childless)
    """
    return _episode(
        [
            policy(None),  # 0
            Node(id=-1, parent=0, kind="retrieve", queries=["q"]),  # 1
            policy(1, score=0.2, chosen=False),  # 2
            policy(1, score=0.9, chosen=True),  # 3
            policy(1, score=0.4, chosen=False),  # 4
            leaf(3, f1=0.6),  # 5
        ]
    )


def mmoa_chain() -> Episode:
    """MMOA-RAG chain: rewriter (-0.5: too many sub-questions) -> retrieve -> selector (-1: bad ids) ->
    generator (no penalty) -> answer f1 0.8. Plus a second generator-like node without an action."""
    return _episode(
        [
            policy(None, "rewriter", action=Action("rewrite", ["a"] * 5, penalty=-0.5)),  # 0
            Node(id=-1, parent=0, kind="retrieve", queries=["a"]),  # 1
            policy(1, "selector", action=Action("select", [0, 0], valid=False, penalty=-1.0)),  # 2
            policy(2, "generator", action=Action("answer", "Ann")),  # 3
            policy(3, "generator"),  # 4 (no action: adds 0)
            leaf(4, f1=0.8),  # 5
        ]
    )


# ------------------------------------------------------------------------------------------ building blocks


def test_leaves_below_every_policy_node():
    below = leaves_below(c3po_tree())
    assert {k: [lf.id for lf in v] for k, v in below.items()} == {
        0: [4, 6, 8, 10],
        1: [4, 6],
        3: [4],
        5: [6],
        7: [8],
        11: [],
    }


def test_leaves_below_rejects_dangling_parent():
    ep = c3po_tree()
    ep.nodes[3].parent = 99
    with pytest.raises(ValueError, match="parent 99"):
        leaves_below(ep)


def test_leaf_reward_failed_truncated_missing():
    ep = c3po_tree()
    assert leaf_reward(ep.nodes[4], metric("f1")) == 1.0
    assert leaf_reward(ep.nodes[8], metric("f1")) == 0.0  # failed, no rewards: 0
    assert (
        leaf_reward(ep.nodes[10], metric("f1")) == 0.25
    )  # truncated but scored: its rewards dict says otherwise
    assert leaf_reward(ep.nodes[10], metric("cover_em")) == 0.0  # truncated, metric missing: 0
    assert leaf_reward(ep.nodes[8], lambda lf: 5.0) == 0.0  # callable not asked about an unscored failed leaf
    assert leaf_reward(ep.nodes[10], lambda lf: lf.rewards["f1"] * 2) == 0.5
    with pytest.raises(KeyError, match=r"no reward 'F1'.*\['em', 'f1'\]"):
        leaf_reward(ep.nodes[4], metric("F1"))  # an ok leaf without the metric is an error, not a silent 0
    with pytest.raises(ValueError, match="not an answer leaf"):
        leaf_reward(ep.nodes[0], metric("f1"))


# ------------------------------------------------------------------------------------------ credit functions


def test_tree_mc_on_branched_tree():
    ep = c3po_tree()
    # 3: leaf 4 -> 1.0 ; 5: leaf 6 -> 0.5 ; 1: (1.0 + 0.5)/2 = 0.75 ; 7: leaf 8 (failed) -> 0
    # 0: (1.0 + 0.5 + 0 + 0.25)/4 = 0.4375 ; 11 has no leaf: no entry
    assert tree_mc(ep, metric("f1")) == {0: 0.4375, 1: 0.75, 3: 1.0, 5: 0.5, 7: 0.0}
    # em: 3: 1 ; 5: 0 ; 1: 0.5 ; 7: 0 ; 0: (1 + 0 + 0 + 0)/4 = 0.25
    assert tree_mc(ep, metric("em")) == {0: 0.25, 1: 0.5, 3: 1.0, 5: 0.0, 7: 0.0}
    # callable doubling f1 (failed leaf stays 0): 0: (2 + 1 + 0 + 0.5)/4 = 0.875
    assert tree_mc(ep, lambda lf: 2 * lf.rewards["f1"])[0] == 0.875


def test_tree_mean_weighs_each_branch_once_on_an_unbalanced_tree():
    ep = c3po_tree()
    # 3 -> 1.0 ; 5 -> 0.5 ; retrieve 2 -> mean(1.0, 0.5) = 0.75 ; 1 -> 0.75 ; 7 -> mean(failed leaf 0) = 0
    # (11 has no leaf: left out) ; llm 9 -> 0.25 ; 0 -> mean(0.75, 0, 0.25) = 1/3, where tree_mc's flat
    # mean over the four leaves gives the twice-forked branch two votes: 0.4375
    got = tree_mean(ep, metric("f1"))
    assert got.keys() == {0, 1, 3, 5, 7}
    assert got[1] == 0.75 and got[3] == 1.0 and got[5] == 0.5 and got[7] == 0.0
    assert abs(got[0] - 1 / 3) < 1e-12 and tree_mc(ep, metric("f1"))[0] == 0.4375
    assert tree_mean(mmoa_chain(), metric("f1")) == tree_mc(mmoa_chain(), metric("f1"))  # a chain: the same


def test_outcome_broadcasts_on_a_chain_and_averages_on_branches():
    # chain: every policy node gets the one leaf's 0.8
    assert outcome(mmoa_chain(), metric("f1")) == {0: 0.8, 2: 0.8, 3: 0.8, 4: 0.8}
    # branched: the mean of the leaves below (the same numbers as tree_mc)
    ep = c3po_tree()
    assert (
        outcome(ep, metric("f1")) == tree_mc(ep, metric("f1")) == {0: 0.4375, 1: 0.75, 3: 1.0, 5: 0.5, 7: 0.0}
    )


def test_mmoa_adds_penalties_to_the_shared_reward():
    # shared f1 0.8: rewriter 0.8 - 0.5 = 0.3 ; selector 0.8 - 1 = -0.2 ; generator 0.8 + 0 ; no action 0.8
    assert mmoa(mmoa_chain(), metric("f1")) == pytest.approx({0: 0.3, 2: -0.2, 3: 0.8, 4: 0.8})


def test_mmoa_on_a_branched_tree_uses_the_leaf_mean():
    ep = c3po_tree()
    ep.nodes[1] = Node(**{**vars(ep.nodes[1]), "action": Action("q", penalty=-0.5)})
    # node 1: mean(1.0, 0.5) - 0.5 = 0.25 ; others as tree_mc (no penalties)
    assert mmoa(ep, metric("f1")) == {0: 0.4375, 1: 0.25, 3: 1.0, 5: 0.5, 7: 0.0}


def test_keep_one_of_n_siblings():
    ep = gym_tree()
    # tree_mc / outcome / mmoa: only nodes 0 and 3 are on the path to leaf 5 (f1 0.6); 2 and 4 get no entry
    assert tree_mc(ep, metric("f1")) == {0: 0.6, 3: 0.6}
    assert outcome(ep, metric("f1")) == {0: 0.6, 3: 0.6}
    assert mmoa(ep, metric("f1")) == {0: 0.6, 3: 0.6}
    # process: scored nodes get the selector's score (chosen or not), node 0 (no score) falls back to tree_mc
    assert process(ep, metric("f1")) == {0: 0.6, 2: 0.2, 3: 0.9, 4: 0.4}


def test_process_without_scores_is_tree_mc():
    ep = c3po_tree()
    assert process(ep, metric("f1")) == tree_mc(ep, metric("f1"))


# ------------------------------------------------------------------------------------------ registry


def test_registry():
    assert set(CREDITS) >= {"outcome", "tree_mc", "mmoa", "process"}
    assert get_credit("tree_mc") is tree_mc and get_credit("mmoa") is mmoa
    with pytest.raises(
        ValueError, match=r"unknown credit 'montecarlo'; known: mmoa, outcome, process, .*tree_mean"
    ):
        get_credit("montecarlo")  # (a test that imports the Search-R1 example adds its credit to the list)
    with pytest.raises(ValueError, match="already registered"):
        register_credit("outcome")(tree_mc)  # another function under a taken name
    assert register_credit("outcome")(outcome) is outcome  # the same one again (a re-import): replaces itself
    assert get_credit("outcome") is outcome


def test_every_credit_keys_policy_nodes_only():
    for ep in (c3po_tree(), gym_tree(), mmoa_chain()):
        policy_ids = {n.id for n in ep.policy_nodes()}
        for name in CREDITS:
            got = get_credit(name)(ep, metric("f1"))
            assert set(got) <= policy_ids, name
            assert all(isinstance(v, float) for v in got.values()), name
