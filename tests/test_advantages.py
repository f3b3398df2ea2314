"""Advantage estimators pinned to hand-computed numbers (the arithmetic is in the comments)."""

from __future__ import annotations

from functools import partial

import pytest
import tensor_helpers
import torch
from tensor_helpers import t

from ragteam.train.advantages import (
    ESTIMATORS,
    LeafTable,
    gae,
    get_advantage,
    group_center,
    normalize,
    register_advantage,
)
from ragteam.train.experience import Sample
from ragteam.train.groups import group_ids, informative

# The expected values below are worked out by hand to 4-6 decimals: compare within 1e-4.
close = partial(tensor_helpers.close, atol=1e-4)


# ------------------------------------------------------------------------------------------ GAE

# One row, 5 positions, position 2 is an observation token (masked): its reward 9 and value 7 are ignored.
REWARDS = [[0.0, 0.0, 9.0, 0.0, 1.0]]
VALUES = [[0.5, 0.6, 7.0, 0.7, 0.8]]
MASK = [[1, 1, 0, 1, 1]]


def test_gae_gamma1_lam095_skips_masked_token():
    adv, ret = gae(t(REWARDS), t(MASK), t(VALUES), gamma=1.0, lam=0.95)
    # t4: delta = 1 + 1*0     - 0.8 = 0.2 ; A = 0.2
    # t3: delta = 0 + 1*0.8   - 0.7 = 0.1 ; A = 0.1 + 0.95*0.2    = 0.29
    # t2: masked                          ; A = 0   (chain goes on from t3 to t1)
    # t1: delta = 0 + 1*0.7   - 0.6 = 0.1 ; A = 0.1 + 0.95*0.29   = 0.3755   (next value is t3's 0.7, not 7)
    # t0: delta = 0 + 1*0.6   - 0.5 = 0.1 ; A = 0.1 + 0.95*0.3755 = 0.456725
    close(adv, [[0.456725, 0.3755, 0.0, 0.29, 0.2]])
    close(ret, [[0.956725, 0.9755, 0.0, 0.99, 1.0]])  # A + V, 0 where masked


def test_gae_gamma09_lam1_is_discounted_return_minus_value():
    adv, ret = gae(t(REWARDS), t(MASK), t(VALUES), gamma=0.9, lam=1.0)
    # t4: delta = 1 + 0          - 0.8 = 0.2  ; A = 0.2
    # t3: delta = 0 + 0.9*0.8    - 0.7 = 0.02 ; A = 0.02 + 0.9*0.2  = 0.2
    # t1: delta = 0 + 0.9*0.7    - 0.6 = 0.03 ; A = 0.03 + 0.9*0.2  = 0.21
    # t0: delta = 0 + 0.9*0.6    - 0.5 = 0.04 ; A = 0.04 + 0.9*0.21 = 0.229
    close(adv, [[0.229, 0.21, 0.0, 0.2, 0.2]])
    # lam = 1: returns are the discounted reward-to-go over valid tokens: 0.9^3, 0.9^2, -, 0.9, 1
    close(ret, [[0.729, 0.81, 0.0, 0.9, 1.0]])


def test_gae_batch_rows_are_independent_and_hole_equals_compacted_row():
    rewards = t([REWARDS[0], [0.0, 1.0, 5.0, 5.0, 5.0]])
    values = t([VALUES[0], [0.5, 0.5, 3.0, 3.0, 3.0]])
    mask = t([MASK[0], [1, 1, 0, 0, 0]])  # row 1: right padding
    adv, ret = gae(rewards, mask, values, gamma=1.0, lam=0.95)
    # row 1: t1: delta = 1 - 0.5 = 0.5, A = 0.5 ; t0: delta = 0 + 0.5 - 0.5 = 0, A = 0.95*0.5 = 0.475
    close(adv[1], [0.475, 0.5, 0.0, 0.0, 0.0])
    close(ret[1], [0.975, 1.0, 0.0, 0.0, 0.0])
    close(adv[0], [0.456725, 0.3755, 0.0, 0.29, 0.2])
    # dropping the observation token altogether gives the same advantages on the valid tokens
    keep = [0, 1, 3, 4]
    adv_c, _ = gae(rewards[:1, keep], torch.ones(1, 4), values[:1, keep], gamma=1.0, lam=0.95)
    close(adv_c[0], adv[0, keep].tolist())


def test_gae_has_no_gradient_and_is_registered_with_a_value_model():
    v = t(VALUES).requires_grad_()
    adv, ret = gae(t(REWARDS), t(MASK), v)
    assert not adv.requires_grad and not ret.requires_grad
    assert get_advantage("gae").fn is gae and get_advantage("gae").value_model
    assert not any(
        ESTIMATORS[n].value_model for n in ("grpo", "drgrpo", "rloo", "reinforce_pp", "tree_grpo", "sibling")
    )
    with pytest.raises(ValueError, match="needs a critic"):
        gae(t(REWARDS), t(MASK), None)


# ------------------------------------------------------------------------------------------ group baselines

# Five one-token acts: a group of three (index 0) that scored 1, 0, 0 and a group of two (index 1) that tied.
SCORES = [[1.0], [0.0], [0.0], [0.5], [0.5]]
ONES = [[1]] * 5
INDEX = torch.tensor([0, 0, 0, 1, 1])


def test_grpo_divides_by_the_unbiased_group_std_and_ties_give_zero():
    adv, ret = get_advantage("grpo").fn(t(SCORES), t(ONES), None, INDEX)
    # group 0: mean 1/3, deviations 2/3, -1/3, -1/3; var = (4/9 + 1/9 + 1/9) / 2 = 1/3; std = 0.57735
    close(adv, [[1.1547], [-0.57735], [-0.57735], [0.0], [0.0]])
    close(ret, adv.tolist())


def test_drgrpo_keeps_the_scale_and_rloo_leaves_itself_out():
    adv, _ = get_advantage("drgrpo").fn(t(SCORES), t(ONES), None, INDEX)
    close(adv, [[2 / 3], [-1 / 3], [-1 / 3], [0.0], [0.0]])
    adv, _ = get_advantage("rloo").fn(t(SCORES), t(ONES), None, INDEX)
    # 1 - mean(0, 0) = 1 ; 0 - mean(1, 0) = -0.5 (twice) ; 0.5 - 0.5 = 0
    close(adv, [[1.0], [-0.5], [-0.5], [0.0], [0.0]])


def test_a_group_of_one_teaches_nothing_and_the_score_is_the_row_sum():
    # row 0 pays 0.1 of KL at its first token and earns 1 at its last: score 0.9; row 2 is alone
    rewards, mask = t([[-0.1, 1.0], [0.0, 0.0], [0.0, 5.0]]), t([[1, 1], [1, 0], [1, 1]])
    adv, _ = get_advantage("drgrpo").fn(rewards, mask, None, torch.tensor([0, 0, 1]))
    close(adv, [[0.45, 0.45], [-0.45, 0.0], [0.0, 0.0]])  # 0.9 vs 0: mean 0.45; masked stays 0
    close(group_center(t([3.0, 1.0]), torch.tensor([-1, -1])), [0.0, 0.0])  # negative ids: no group


def test_reinforce_pp_whitens_the_return_to_go_over_the_batch():
    adv, ret = get_advantage("reinforce_pp").fn(t([[0.0, 1.0], [0.0, 0.0]]), t([[1, 1], [1, 1]]), None, None)
    close(ret, [[1.0, 1.0], [0.0, 0.0]])  # gamma 1: every token's return-to-go
    close(adv, [[1.0, 1.0], [-1.0, -1.0]])  # mean 0.5, population std 0.5


def test_sibling_adds_the_fork_term_to_the_episode_group_term():
    # one question, one role, two episodes; acts 0 and 1 are the two branches of a fork in episode 0, acts 2
    # and 3 of a fork in episode 1
    scores = t([[1.0], [0.0], [1.0], [1.0]])
    adv, _ = get_advantage("sibling").fn(
        scores,
        t([[1]] * 4),
        None,
        torch.tensor([0, 0, 0, 0]),
        siblings=torch.tensor([0, 0, 1, 1]),
        episodes=torch.tensor([0, 0, 1, 1]),
    )
    # group: episode scores 0.5 and 1, mean 0.75, std sqrt(2 * 0.0625) = 0.35355 -> acts: 0.25/0.35355 =
    # 0.7071, -2.1213, 0.7071, 0.7071 ; fork 0: 1 vs 0, mean 0.5, std sqrt(0.5) -> +-0.7071 ; fork 1 tied -> 0
    close(adv, [[1.4142], [-2.8284], [0.7071], [0.7071]])
    # one episode (no group term): the forced siblings of one fork get the fork term alone
    alone, _ = get_advantage("sibling").fn(
        scores[:2], t([[1]] * 2), None, torch.tensor([0, 0]), siblings=torch.tensor([0, 0]),
        episodes=torch.tensor([0, 0]),
    )  # fmt: skip
    close(alone, [[0.7071], [-0.7071]])


def test_per_role_normalisation_puts_every_role_on_one_scale():
    adv, mask, roles = t([[1.0], [3.0], [10.0], [20.0]]), t([[1]] * 4), torch.tensor([0, 0, 1, 1])
    close(normalize(adv, mask, roles, "role"), [[-1.0], [1.0], [-1.0], [1.0]])
    glob = normalize(adv, mask, roles, "global")  # one scale: role 0's two acts both look bad
    assert float(glob[0, 0]) < 0 and float(glob[1, 0]) < 0
    close(normalize(adv, mask, roles, "none"), adv.tolist())


def test_group_ids_name_the_question_groups_and_the_forks():
    def sample(episode: str, group: str, role: str, parent: int | None) -> Sample:
        return Sample(episode, 0, role, [1], [2], 0.0, group=group, parent=parent)

    samples = [
        sample("q#0", "q", "selector", None),
        sample("q#1", "q", "selector", None),
        sample("q#0", "q", "generator", 3),
        sample("r", "r", "router", None),  # a fork of three at the root of one episode
        sample("r", "r", "router", None),
        sample("r", "r", "router", None),
    ]
    ids = group_ids(samples)
    assert ids.index.tolist() == [0, 0, 1, 2, 2, 2]
    assert ids.siblings.tolist() == [-1, -1, -1, 3, 3, 3]  # one episode's children of one parent
    assert ids.roles.tolist() == [0, 0, 1, 2, 2, 2]
    assert ids.episodes.tolist() == [0, 1, 0, 2, 2, 2]
    assert ids.leaves.member.shape == (6, 0)  # no sample recorded its leaves


def test_registry_errors():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'nope'; known: .*grpo"):
        get_advantage("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("gae")(gae)
    with pytest.raises(ValueError, match="renamed.*tree_grpo.*sibling"):
        get_advantage("tree")


def test_groups_that_scored_alike_are_uninformative_unless_their_fork_differs():
    def sample(episode: str, group: str, reward: float, parent: int | None = None) -> Sample:
        return Sample(episode, 0, "actor", [1], [2], reward, group=group, parent=parent)

    samples = [
        sample("a#0", "a", 1.0),  # question a: 1 vs 0, informative
        sample("a#1", "a", 0.0),
        sample("b#0", "b", 0.5),  # question b: both 0.5, nothing to compare
        sample("b#1", "b", 0.5),
        sample("c", "c", 0.0, parent=4),  # question c: one episode, but a fork whose branches differ
        sample("c", "c", 1.0, parent=4),
        sample("d", "d", 1.0),  # alone
    ]
    assert informative(samples) == [True, True, False, False, True, True, False]


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_computes_on_its_inputs_device(name: str):
    """No tensor is made on the default device behind the inputs' back: with the default set to `meta`, any
    such tensor meets the CPU inputs and fails, as it did on CUDA (group sums built on the CPU beside CUDA
    scores). The CPU suite catches what only a GPU run used to show."""
    rewards = t([[0.0, 1.0], [0.0, 0.0], [1.0, 0.5], [0.0, 0.2]])
    mask, values = t([[1, 1]] * 4), t([[0.1, 0.2]] * 4)
    index, siblings = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, -1, -1])
    episodes = torch.tensor([0, 1, 2, 2])
    leaves = LeafTable(
        t([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1]]).float(),
        torch.tensor([1.0, 0.0, 0.5]),
        torch.tensor([0, 1, 2]),
        torch.tensor([0, 0, 1]),
    )
    with torch.device("meta"):
        adv, ret = get_advantage(name).fn(
            rewards,
            mask,
            values,
            index,
            siblings=siblings,
            episodes=episodes,
            leaves=leaves,
            gamma=1.0,
            lam=0.95,
        )
        whitened = normalize(adv, mask, torch.tensor([0, 1, 0, 1], device="cpu"), "role")
    assert adv.device.type == ret.device.type == whitened.device.type == "cpu"
    assert torch.isfinite(whitened).all()
