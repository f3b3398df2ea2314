"""PPO maths pinned to hand-computed numbers (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from tensor_helpers import close, t

from ragteam.train.losses import (
    POLICY_LOSSES,
    KLController,
    entropy_from_logits,
    get_policy_loss,
    kl_penalty,
    masked_mean,
    masked_whiten,
    policy_loss,
    register_policy_loss,
    token_logprobs,
    token_rewards,
    value_loss,
)

# ------------------------------------------------------------------------------------------ reductions


def test_masked_mean_all_and_per_row():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[True, True, False], [False, True, False]])
    close(masked_mean(x, mask), 8.0 / 3.0)  # (1 + 2 + 5) / 3
    close(masked_mean(x, mask, dim=1), [1.5, 5.0])  # (1 + 2) / 2, 5 / 1
    close(masked_mean(x, torch.zeros(2, 3)), 0.0)  # nothing valid: 0, not NaN


def test_masked_whiten():
    x = t([[1.0, 3.0, 100.0]])
    mask = t([[1, 1, 0]])
    # valid values 1, 3: mean 2, population variance ((1-2)^2 + (3-2)^2) / 2 = 1 -> (x - 2) / 1; masked -> 0
    close(masked_whiten(x, mask), [[-1.0, 1.0, 0.0]])
    close(masked_whiten(x, mask, shift_mean=False), [[1.0, 3.0, 0.0]])  # (x - 2) / 1 + 2


# ------------------------------------------------------------------------------------------ rewards and KL


def test_token_rewards_kl_everywhere_score_at_last_valid_token():
    scores = t([2.0, 5.0, 7.0])
    kl = t([[0.1, 0.2, 0.3, 0.4], [1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    mask = t([[1, 1, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    out = token_rewards(scores, kl, mask, beta=0.5)
    # row 0: -0.5*[0.1, 0.2, 0.3] and +2 at t2 (its last valid token): [-0.05, -0.1, -0.15 + 2, 0]
    # row 1: -0.5*1 at t0, t2; +5 at t2 (t1 is an observation token): [-0.5, 0, -0.5 + 5, 0]
    # row 2: nothing valid: zeros, the score is dropped
    close(out, [[-0.05, -0.1, 1.85, 0.0], [-0.5, 0.0, 4.5, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    "kind, expected",
    [
        # r = logp - ref = [0.5, -1.0]
        ("k1", [0.5, -1.0]),  # r
        ("k2", [0.125, 0.5]),  # r^2 / 2
        ("k3", [0.10653066, 0.71828183]),  # exp(-r) + r - 1: e^-0.5 - 0.5 = 0.1065307 ; e^1 - 2 = 0.7182818
        ("abs", [0.5, 1.0]),  # |r|
    ],
)
def test_kl_penalty_kinds(kind, expected):
    close(kl_penalty(t([-1.0, -2.0]), t([-1.5, -1.0]), kind=kind), expected)


def test_kl_penalty_unknown_kind_names_known():
    with pytest.raises(ValueError, match=r"'k4'.*k1, k2, k3, abs"):
        kl_penalty(t([0.0]), t([0.0]), kind="k4")


# ------------------------------------------------------------------------------------------ PPO losses


def test_policy_loss_clipped_and_unclipped_tokens():
    logp = t([[-1.0, -2.1, -3.0, 5.0]]).requires_grad_()
    old = t([[-1.5, -2.0, -2.5, 0.0]])
    adv = t([[1.0, 2.0, -1.0, 100.0]])
    mask = t([[1, 1, 1, 0]])  # t3 is masked: its huge ratio and advantage must not count
    loss, stats = policy_loss(logp, old, adv, mask, clip=0.2)
    # t0: rho = e^0.5  = 1.648721, A = 1 : max(-1.648721, -1.2)          = -1.2      (clipped)
    # t1: rho = e^-0.1 = 0.904837, A = 2 : max(-1.809675, -1.809675)     = -1.809675 (inside [0.8, 1.2])
    # t2: rho = e^-0.5 = 0.606531, A = -1: max(0.606531, 0.8)            = 0.8       (clipped)
    # loss = (-1.2 - 1.809675 + 0.8) / 3 = -0.736558
    close(loss, -0.7365583, atol=1e-6)
    assert stats["clip_frac"] == pytest.approx(2 / 3)
    # approx_kl = mean(e^x - 1 - x) for x = logp - old: (0.148721 + 0.004837 + 0.106531) / 3 = 0.086696
    assert stats["approx_kl"] == pytest.approx(0.0866965, abs=1e-6)
    loss.backward()
    # gradient only through the unclipped token: d/dlogp (-A rho / 3) = -2 * 0.904837 / 3 = -0.603225
    close(logp.grad, [[0.0, -0.6032247, 0.0, 0.0]])
    assert get_policy_loss("ppo") is policy_loss and "ppo" in POLICY_LOSSES


def test_value_loss_clipped_and_unclipped_tokens():
    values = t([[0.9, 0.5, 9.0]]).requires_grad_()
    old = t([[0.0, 0.4, 0.0]])
    returns = t([[1.0, 1.0, 0.0]])
    mask = t([[1, 1, 0]])
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    # t0: (0.9 - 1)^2 = 0.01 ; V_clip = 0 + clip(0.9, +-0.2) = 0.2, (0.2 - 1)^2 = 0.64 -> 0.64 (clipped)
    # t1: (0.5 - 1)^2 = 0.25 ; V_clip = 0.4 + 0.1 = 0.5 (inside), 0.25                 -> 0.25
    # loss = 0.5 * (0.64 + 0.25) / 2 = 0.2225
    close(loss, 0.2225)
    assert stats["clip_frac"] == pytest.approx(0.5)
    loss.backward()
    # t0's clipped value is constant in V: no gradient; t1: 0.5 * 2 * (0.5 - 1) / 2 = -0.25
    close(values.grad, [[0.0, -0.25, 0.0]])


def test_value_loss_mse_is_the_plain_squared_error_c3po_eq_10():
    values = t([[0.9, 0.5, 9.0]]).requires_grad_()
    old = t([[0.0, 0.4, 0.0]])
    returns = t([[1.0, 1.0, 0.0]])
    mask = t([[1, 1, 0]])
    loss, stats = value_loss(values, old, returns, mask, clip=0.2, kind="mse")
    # no clip: t0 (0.9 - 1)^2 = 0.01, t1 (0.5 - 1)^2 = 0.25 -> 0.5 * (0.01 + 0.25) / 2 = 0.065
    close(loss, 0.065)
    assert stats["clip_frac"] == 0.0
    loss.backward()
    # every trained token has a gradient, the one the clipped loss cut off included:
    # d/dV 0.5 * (V - R)^2 / 2 = (V - R) / 2 -> t0 -0.05, t1 -0.25, the masked token 0
    close(values.grad, [[-0.05, -0.25, 0.0]])
    # the old values play no part; a clip range wider than every error makes `clipped` the same loss
    assert value_loss(values, old + 5.0, returns, mask, kind="mse")[0].item() == pytest.approx(0.065)
    assert value_loss(values, old, returns, mask, clip=100.0)[0].item() == pytest.approx(0.065)
    with pytest.raises(ValueError, match="unknown value loss 'huber'.*clipped, mse"):
        value_loss(values, old, returns, mask, kind="huber")


def test_the_value_loss_is_a_ppo_setting_and_the_c3po_recipe_uses_mse():
    from ragteam.train.ppo_config import PPOConfig, PPOOptions

    assert PPOOptions().value_loss == "clipped" and PPOOptions(value_loss="mse").value_loss == "mse"
    with pytest.raises(ValueError):
        PPOOptions(value_loss="huber")
    names = ("c3po", "c3po-no-tree", "mmoa")
    recipe = {name: PPOConfig(recipe=name, data="d", out="o").ppo.value_loss for name in names}
    assert recipe["c3po"] == recipe["c3po-no-tree"] == "mse" and recipe["mmoa"] == "clipped"
    flag = PPOConfig(recipe="c3po", data="d", out="o", ppo={"value_loss": "clipped"})
    assert flag.ppo.value_loss == "clipped"  # a flag wins over the recipe


def test_entropy_and_logprobs():
    logits = t([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    # uniform over 2: ln 2
    # p = (1/4, 3/4): -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.3465736 + 0.2157616 = 0.5623351
    close(entropy_from_logits(logits), [[math.log(2.0), 0.5623351]])
    close(entropy_from_logits(t([[[7.0, 7.0, 7.0, 7.0]]])), [[math.log(4.0)]])  # shift-invariant: ln 4
    lp = token_logprobs(logits, torch.tensor([[0, 1]]))
    close(lp, [[math.log(0.5), math.log(0.75)]])  # -0.693147, -0.287682


# ------------------------------------------------------------------------------------------ KL controller


def test_kl_controller_fixed():
    kl = KLController(beta=0.1)
    assert kl.update(observed_kl=50.0, n_steps=1000) == 0.1


def test_kl_controller_linear_anneal():
    kl = KLController(beta=0.2, anneal_to=0.06, anneal_steps=100)
    assert kl.update(0.0, 25) == pytest.approx(0.165)  # 0.2 + (0.06 - 0.2) * 25/100 = 0.2 - 0.035
    assert kl.update(0.0, 25) == pytest.approx(0.13)  # 0.2 - 0.14 * 0.5
    assert kl.update(0.0, 50) == pytest.approx(0.06)  # done
    assert kl.update(0.0, 10) == pytest.approx(0.06)  # stays


def test_kl_controller_adaptive():
    kl = KLController(beta=0.1, target=6.0, horizon=10_000)
    # e = clip(9/6 - 1 = 0.5, +-0.2) = 0.2 ; beta = 0.1 * (1 + 0.2 * 1000/10000) = 0.1 * 1.02 = 0.102
    assert kl.update(9.0, 1000) == pytest.approx(0.102)
    # e = 5.4/6 - 1 = -0.1 ; beta = 0.102 * (1 - 0.1 * 0.1) = 0.102 * 0.99 = 0.10098
    assert kl.update(5.4, 1000) == pytest.approx(0.10098)


def test_kl_controller_clamps():
    kl = KLController(beta=0.1, target=1.0, horizon=10, beta_min=0.09, beta_max=0.12)
    assert kl.update(100.0, 10) == pytest.approx(0.12)  # 0.1 * (1 + 0.2) = 0.12 (= beta_max)
    assert kl.update(100.0, 10) == pytest.approx(0.12)  # 0.144 -> clamped to 0.12
    assert kl.update(0.0, 10) == pytest.approx(0.096)  # e = clip(-1) = -0.2: 0.12 * 0.8 = 0.096
    assert kl.update(0.0, 10) == pytest.approx(0.09)  # 0.0768 -> clamped to 0.09
    # annealing below beta_min stops at beta_min
    anneal = KLController(beta=0.2, anneal_to=0.0, anneal_steps=10, beta_min=0.06)
    assert anneal.update(0.0, 10) == pytest.approx(0.06)


def test_kl_controller_rejects_bad_configs():
    with pytest.raises(ValueError, match="not both"):
        KLController(beta=0.1, target=1.0, anneal_to=0.05, anneal_steps=10)
    with pytest.raises(ValueError, match="anneal_steps"):
        KLController(beta=0.1, anneal_to=0.05)


# ------------------------------------------------------------------------------------------ registries


def test_registry_errors():
    with pytest.raises(ValueError, match=r"unknown policy loss 'nope'; known: .*ppo"):
        get_policy_loss("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("ppo")(policy_loss)


def test_the_update_losses_compute_on_their_inputs_device():
    """As for the advantage estimators (test_advantages.py): with the default device set to `meta`, a tensor
    made without its inputs' device would meet the CPU inputs and fail."""
    from ragteam.train.losses import get_policy_loss, value_loss

    logp, old, adv = (
        t([[-1.0, -2.0], [-0.5, -0.1]]),
        t([[-1.1, -1.9], [-0.4, -0.2]]),
        t([[1.0, 1.0], [-1, -1]]),
    )
    mask, scores = torch.tensor([[True, True], [True, False]]), t([1.0, 0.0])
    with torch.device("meta"):
        rewards = token_rewards(scores, kl_penalty(logp, old, "k3"), mask, 0.1)
        pg, _ = get_policy_loss("ppo")(logp, old, adv, mask, clip=0.2)
        vf, _ = value_loss(logp, old, adv, mask, clip=0.2, kind="clipped")
    assert {x.device.type for x in (rewards, pg, vf)} == {"cpu"}
