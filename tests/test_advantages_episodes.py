"""Episode-level groups and Tree-GRPO, pinned to hand-computed numbers (issue 29, items 1 and 2).

The samples come from real episode trees through `samples_from_episodes` and `group_ids`, so the tests pin
the wiring (which acts share a group, an episode, a leaf trajectory) as well as the arithmetic.
"""

from __future__ import annotations

import math
from functools import partial

import tensor_helpers
from tensor_helpers import t

from ragteam.credit import get_credit
from ragteam.llm.base import Completion
from ragteam.metrics.rewards import get_reward
from ragteam.rollout.tree import Episode, Node
from ragteam.train.advantages import ESTIMATORS, get_advantage, resolved
from ragteam.train.experience import Sample, samples_from_episodes
from ragteam.train.groups import group_ids, informative
from ragteam.types import Action, Question

close = partial(tensor_helpers.close, atol=1e-4)


def act(node_id: int, parent: int | None, role: str = "actor", penalty: float = 0.0) -> Node:
    action = Action("say", "x", penalty=penalty)
    return Node(node_id, parent, "policy", role=role, completion=Completion("x", prompt_ids=[1], completion_ids=[2]),
                action=action)  # fmt: skip


def leaf(node_id: int, parent: int, f1: float) -> Node:
    return Node(node_id, parent, "answer", answer="a", rewards={"f1": f1})


def episode(member: int, nodes: list[Node], group: str = "q") -> Episode:
    question = Question(f"{group}#{member}", "?", ["a"], metadata={"group": group})
    return Episode(f"{group}#{member}", "test", question, nodes)


def chain(member: int, acts: int, f1: float, group: str = "q") -> Episode:
    """An episode of `acts` acts in a row, then its answer."""
    nodes = [act(i, i - 1 if i else None) for i in range(acts)]
    return episode(member, [*nodes, leaf(acts, acts - 1, f1)], group)


def run(name: str, samples: list[Sample], ids=None) -> list[float]:
    """The estimator's per-act advantage (one token per act), credit as the score."""
    ids = ids if ids is not None else group_ids(samples)
    scores = t([[s.reward] for s in samples])
    adv, _ = get_advantage(name).fn(
        scores, t([[1]] * len(samples)), None, ids.index, siblings=ids.siblings, episodes=ids.episodes,
        leaves=ids.leaves,
    )  # fmt: skip
    return [round(float(x), 4) for x in adv[:, 0]]


# ------------------------------------------------------------------------------------------ episode-level groups


def mixed_lengths() -> list[Sample]:
    """One question: a failing 10-act episode and three successful 1-act episodes (credits 0, 1, 1, 1)."""
    episodes = [chain(0, 10, 0.0), chain(1, 1, 1.0), chain(2, 1, 1.0), chain(3, 1, 1.0)]
    samples, skipped = samples_from_episodes(episodes, get_credit("outcome"), get_reward("f1"))
    assert len(samples) == 13 and not skipped
    return samples


def test_an_episode_counts_once_in_its_group_whatever_its_number_of_acts():
    samples = mixed_lengths()
    # episode scores 0, 1, 1, 1: mean 0.75 -> -0.75 on each of the 10 failing acts, +0.25 on the others
    assert run("drgrpo", samples) == [-0.75] * 10 + [0.25] * 3
    # leave-one-out: the failing episode against mean(1, 1, 1) = 1; a successful one against mean(0, 1, 1)
    assert run("rloo", samples) == [-1.0] * 10 + [round(1 / 3, 4)] * 3
    # grpo: std of (0, 1, 1, 1) = sqrt(0.75 / 3) = 0.5 -> -1.5 / +0.5
    assert run("grpo", samples) == [-1.5] * 10 + [0.5] * 3


def test_per_act_credits_keep_their_own_part():
    """RAG-Gym's process rewards: acts of one episode credited apart. Episode 0's acts score 0.2 and 0.6
    (e = 0.4), episode 1's one act 0.8 (e = 0.8): the baseline counts each episode once, each act keeps
    its own score."""
    samples = [
        Sample("q#0", 0, "actor", [1], [2], 0.2, group="q"),
        Sample("q#0", 1, "actor", [1], [2], 0.6, group="q", parent=0),
        Sample("q#1", 0, "actor", [1], [2], 0.8, group="q"),
    ]
    assert run("drgrpo", samples) == [-0.4, 0.0, 0.2]  # mean of e: 0.6
    assert run("rloo", samples) == [-0.6, -0.2, 0.4]  # against the other episode: 0.8; 0.4
    # grpo: std of e (0.4, 0.8) = 0.28284 -> -0.4 / 0.28284, 0, 0.2 / 0.28284
    assert run("grpo", samples) == [-1.4142, 0.0, 0.7071]


def test_a_group_of_one_episode_has_no_baseline():
    samples, _ = samples_from_episodes([chain(0, 3, 1.0)], get_credit("outcome"), get_reward("f1"))
    for name in ("grpo", "drgrpo", "rloo"):
        assert run(name, samples) == [0.0, 0.0, 0.0]
    assert informative(samples) == [False] * 3  # nothing to compare: left out of the update


# ------------------------------------------------------------------------------------------ Tree-GRPO

SQRT3 = math.sqrt(3)


def unbalanced_tree() -> list[Episode]:
    """One question, two trees. Tree 0 (episode q#0): act r forks into a1 and a2; a1 forks again into b1
    and b2; leaves L1 = 1 (below b1), L2 = 0 (below b2), L3 = 0 (below a2). Tree 1 (q#1): one act c, leaf 1."""
    tree = episode(0, [
        act(0, None),  # r
        act(1, 0), act(2, 0),  # a1, a2
        act(3, 1), act(4, 1),  # b1, b2
        leaf(5, 3, 1.0), leaf(6, 4, 0.0), leaf(7, 2, 0.0),
    ])  # fmt: skip
    return [tree, chain(1, 1, 1.0)]


def test_tree_grpo_pins_the_published_intra_and_inter_tree_terms_on_an_unbalanced_tree():
    samples, _ = samples_from_episodes(unbalanced_tree(), get_credit("tree_mc"), get_reward("f1"))
    assert [(s.episode, s.node) for s in samples] == [("q#0", i) for i in range(5)] + [("q#1", 0)]
    # intra-tree, tree 0: R = 1, 0, 0, mean 1/3, std sqrt(1/3) -> L1 +2/sqrt3, L2 and L3 -1/sqrt3; tree 1
    #   has one leaf: 0.
    # inter-tree, the question's four leaves 1, 0, 0, 1: mean 0.5, std sqrt(1/3) -> +-sqrt3/2.
    # A(L1) = 2/sqrt3 + sqrt3/2 = 2.0207 ; A(L2) = A(L3) = -1/sqrt3 - sqrt3/2 = -1.4434 ; A(L4) = 0.8660
    l1, l2, l4 = 2 / SQRT3 + SQRT3 / 2, -1 / SQRT3 - SQRT3 / 2, SQRT3 / 2
    # acts: r (L1, L2, L3), a1 (L1, L2), a2 (L3), b1 (L1), b2 (L2), c (L4): the mean of their leaves' A
    want = [(l1 + 2 * l2) / 3, (l1 + l2) / 2, l2, l1, l2, l4]
    assert run("tree_grpo", samples) == [round(x, 4) for x in want]
    assert [round(x, 4) for x in want[:2]] == [round(-0.5 / SQRT3, 4), round(0.5 / SQRT3, 4)]


def test_tree_grpo_adds_an_acts_own_credit_beyond_its_leaves():
    """MMOA-RAG's penalty on a2 (-0.5): its credit is its leaf's reward plus the penalty, and the penalty
    is added to its leaf-trajectory advantage as is."""
    trees = unbalanced_tree()
    trees[0].nodes[2].action = Action("say", "x", penalty=-0.5)
    samples, _ = samples_from_episodes(trees, get_credit("mmoa"), get_reward("f1"))
    got = run("tree_grpo", samples)
    assert got[2] == round(-1 / SQRT3 - SQRT3 / 2 - 0.5, 4)
    assert got[0] == round(-0.5 / SQRT3, 4)  # the others as without it


def test_tree_grpo_informative_reads_the_trees_leaves():
    """One tree per question (group size 1): no episode-level group, yet its leaves differ, so its acts
    teach Tree-GRPO something; a tree whose leaves all scored alike does not."""
    alike = episode(0, [act(0, None), act(1, 0), act(2, 0), leaf(3, 1, 1.0), leaf(4, 2, 1.0)], group="p")
    samples, _ = samples_from_episodes([unbalanced_tree()[0], alike], get_credit("tree_mc"), get_reward("f1"))
    assert informative(samples, trees=True) == [True] * 5 + [False] * 3
    assert run("tree_grpo", samples)[5:] == [0.0, 0.0, 0.0]


# ------------------------------------------------------------------------------------------ defaults


def test_kl_placement_and_normalisation_follow_the_estimator_unless_set():
    kl = {n: resolved("auto", e, "kl_in") for n, e in ESTIMATORS.items()}
    norm = {n: resolved("auto", e, "normalize") for n, e in ESTIMATORS.items()}
    assert kl["gae"] == kl["reinforce_pp"] == "reward"
    assert {kl[n] for n in ("grpo", "drgrpo", "rloo", "tree_grpo", "sibling")} == {"loss"}
    assert norm["gae"] == "global"
    assert {norm[n] for n in ("grpo", "drgrpo", "rloo", "reinforce_pp", "tree_grpo", "sibling")} == {"none"}
    assert resolved("reward", ESTIMATORS["grpo"], "kl_in") == "reward"  # a flag wins
