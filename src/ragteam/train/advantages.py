"""Advantage estimators: small pure functions registered by name, picked by `--ppo.advantage NAME`.

One contract for all of them (verl's shape):

    fn(token_rewards [B, T], mask [B, T], values [B, T] | None, index [B], *, siblings [B], **settings)
        -> (advantages [B, T], returns [B, T])

B samples (acts), T token positions; `mask` is 1 on trained completion tokens. `token_rewards` holds the
act's credit at its last token and -beta * KL at every token (`losses.token_rewards`), so an act's
sequence score is the masked sum of its row. `index` is a group id per sample (long): samples that share
a question and a role (K sampled episodes of one question, `--rollout.group-size K`); `siblings` a second
group id: samples that share a parent node in one episode tree (the branches of one fork: C-3PO's forced
strategies, K(t) samples, keep-one-of-N candidates), -1 where a sample has no sibling group. Both come
from the rollout (`experience.group_ids`). Returns are what a critic regresses to; estimators without a
critic return their advantages there (unused). Everything runs without gradient; outputs are 0 where masked.

| name         | baseline                                   | critic | source                                   |
|--------------|--------------------------------------------|--------|------------------------------------------|
| gae          | V(s) per token, lambda-returns             | yes    | Schulman et al. 2016 (PPO, both papers)  |
| grpo         | group mean, divided by the group's std     | no     | DeepSeekMath (GRPO)                      |
| drgrpo       | group mean, not divided by std             | no     | Dr. GRPO (Liu et al. 2025)               |
| rloo         | mean of the *other* samples of the group   | no     | RLOO (Ahmadian et al. 2024)              |
| reinforce_pp | return-to-go, whitened over the batch      | no     | REINFORCE++ (Hu 2025)                    |
| tree         | sibling mean at every fork + group (grpo)  | no     | Tree-GRPO (Ji et al. 2026), GiGPO        |

A group of one sample has no baseline to compare with: its group-relative advantage is 0 (it teaches
nothing, rather than pushing up whatever it did).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ragteam.train.losses import masked_whiten

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "gae",
    "get_advantage",
    "group_center",
    "grpo",
    "normalize",
    "register_advantage",
    "reinforce_pp",
    "rloo",
    "tree",
]

AdvantageFn = Callable[..., tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function, whether it reads a critic's values, whether it needs groups."""

    fn: AdvantageFn
    critic: bool = False  # a value model is built, trained and scored only for these
    groups: bool = False  # compares samples of one group: needs --rollout.group-size > 1 (or forks)


ESTIMATORS: dict[str, Estimator] = {}
"""Advantage estimators by name (iterate it for the known names)."""


def register_advantage(
    name: str, critic: bool = False, groups: bool = False
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: register an estimator under `name` (once); `critic`: it needs values V(s)."""

    def deco(fn: AdvantageFn) -> AdvantageFn:
        if name in ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ESTIMATORS[name] = Estimator(fn, critic, groups)
        return fn

    return deco


def get_advantage(name: str) -> Estimator:
    """The estimator registered as `name`; a ValueError naming the known ones otherwise."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name]


# ------------------------------------------------------------------------------------------ helpers


def sequence_scores(token_rewards: Tensor, mask: Tensor) -> Tensor:
    """An act's total reward: the masked sum of its row, [B, T] -> [B] (credit minus beta * summed KL)."""
    return (token_rewards.float() * mask.float()).sum(-1)


def group_center(scores: Tensor, index: Tensor, scale: bool = True, eps: float = 1e-6) -> Tensor:
    """Each score minus the mean of its group, divided by the group's standard deviation when `scale`.

    scores [B] float, index [B] long (group id; negative ids are groups of one) -> [B]. Groups of one
    sample get 0. The std is the unbiased one (n - 1), as GRPO's reference implementations use; a group
    whose scores are all equal gets 0 everywhere (eps keeps the division finite).
    """
    scores = scores.float()
    out = torch.zeros_like(scores)
    valid = index >= 0
    if not bool(valid.any()):
        return out
    idx = index[valid]
    groups = int(idx.max()) + 1

    def per_group(x: Tensor) -> Tensor:  # the sum of x over each group, on the scores' device
        return scores.new_zeros(groups).index_add_(0, idx, x)

    count = per_group(torch.ones_like(scores[valid]))
    mean = per_group(scores[valid]) / count.clamp_min(1)
    centered = scores[valid] - mean[idx]
    if scale:
        var = per_group(centered**2) / (count - 1).clamp_min(1)
        centered = centered / (var.sqrt()[idx] + eps)
    centered = torch.where(count[idx] > 1, centered, torch.zeros_like(centered))
    out[valid] = centered
    return out


def group_sizes(index: Tensor) -> Tensor:
    """[B] long -> [B] long: how many samples share each sample's group (1 for negative ids: alone)."""
    valid = index >= 0
    if not bool(valid.any()):
        return torch.ones_like(index)
    count = torch.bincount(index[valid], minlength=int(index[valid].max()) + 1)
    return torch.where(valid, count[index.clamp_min(0)], torch.ones_like(index))


def _broadcast(per_sample: Tensor, mask: Tensor) -> Tensor:
    """[B] -> [B, T]: one advantage for every trained token of the act, 0 where masked."""
    return per_sample.unsqueeze(1) * mask.float()


# ------------------------------------------------------------------------------------------ estimators


@register_advantage("gae", critic=True)
def gae(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor | None = None,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016), backwards over the mask-1 tokens of each row.

    Returns (advantages, returns = advantages + values). Masked positions are skipped, not treated as steps:
    the "next value" of a token is the value of the next mask-1 token of its row (0 after the last one), so
    observation tokens inside a multi-turn completion do not break the chain; rewards at masked positions
    are ignored. delta_t = r_t + gamma * V_next - V_t;  A_t = delta_t + gamma * lam * A_next. `index` unused.
    """
    if values is None:
        raise ValueError("gae needs a critic's values")
    with torch.no_grad():
        valid = mask.bool()
        r = token_rewards.float()
        v = values.float()
        next_value = torch.zeros_like(v[:, 0])
        next_adv = torch.zeros_like(v[:, 0])
        adv = torch.zeros_like(v)
        for t in range(v.shape[1] - 1, -1, -1):
            delta = r[:, t] + gamma * next_value - v[:, t]
            a = delta + gamma * lam * next_adv
            ok = valid[:, t]
            adv[:, t] = torch.where(ok, a, torch.zeros_like(a))
            next_value = torch.where(ok, v[:, t], next_value)
            next_adv = torch.where(ok, a, next_adv)
        returns = torch.where(valid, adv + v, torch.zeros_like(v))
    return adv.to(values.dtype), returns.to(values.dtype)


@register_advantage("grpo", groups=True)
def grpo(
    token_rewards: Tensor, mask: Tensor, values: Tensor | None, index: Tensor, *, eps: float = 1e-6, **_: Any
) -> tuple[Tensor, Tensor]:
    """GRPO: (score - group mean) / group std, the same for every token of the act."""
    with torch.no_grad():
        adv = _broadcast(group_center(sequence_scores(token_rewards, mask), index, True, eps), mask)
    return adv, adv


@register_advantage("drgrpo", groups=True)
def drgrpo(
    token_rewards: Tensor, mask: Tensor, values: Tensor | None, index: Tensor, **_: Any
) -> tuple[Tensor, Tensor]:
    """Dr. GRPO: score - group mean, not divided by the group's std (which favours groups that barely
    differ, i.e. questions too easy or too hard)."""
    with torch.no_grad():
        adv = _broadcast(group_center(sequence_scores(token_rewards, mask), index, False), mask)
    return adv, adv


@register_advantage("rloo", groups=True)
def rloo(
    token_rewards: Tensor, mask: Tensor, values: Tensor | None, index: Tensor, **_: Any
) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out: score minus the mean of the other K-1 samples of its group, which is
    K / (K - 1) times the score minus the group mean (an unbiased baseline: it does not include itself)."""
    with torch.no_grad():
        scores = sequence_scores(token_rewards, mask)
        centered = group_center(scores, index, False)
        k = group_sizes(index).float()
        adv = _broadcast(centered * k / (k - 1).clamp_min(1), mask)
    return adv, adv


@register_advantage("reinforce_pp")
def reinforce_pp(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor | None = None,
    *,
    gamma: float = 1.0,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """REINFORCE++: the discounted return-to-go of every token (its act's credit and the KL penalties after
    it), whitened over the whole batch: the batch mean is the baseline, no group or critic needed."""
    with torch.no_grad():
        valid = mask.bool()
        r = token_rewards.float()
        running = torch.zeros_like(r[:, 0])
        ret = torch.zeros_like(r)
        for t in range(r.shape[1] - 1, -1, -1):
            g = r[:, t] + gamma * running
            ret[:, t] = torch.where(valid[:, t], g, torch.zeros_like(g))
            running = torch.where(valid[:, t], g, running)
        adv = masked_whiten(ret, mask) if int(valid.sum()) > 1 else ret
    return adv, ret


@register_advantage("tree", groups=True)
def tree(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor,
    *,
    siblings: Tensor | None = None,
    eps: float = 1e-6,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Tree-relative advantage (Tree-GRPO's intra-tree plus inter-tree terms): the act's score against its
    siblings' at the fork it came from (same parent node, same episode), plus against its question group,
    each normalised by its own group's std. An act that was not forked gets only the group term; a question
    rolled out once gets only the sibling term."""
    with torch.no_grad():
        scores = sequence_scores(token_rewards, mask)
        per = group_center(scores, index, True, eps)
        if siblings is not None:
            per = per + group_center(scores, siblings, True, eps)
        adv = _broadcast(per, mask)
    return adv, adv


# ------------------------------------------------------------------------------------------ normalisation

NORMALIZE = ("none", "global", "role")


def normalize(adv: Tensor, mask: Tensor, roles: Tensor, how: str) -> Tensor:
    """Whiten advantages [B, T] over the batch's trained tokens (`global`), over each role's own tokens
    (`role`: Dr. MAS's per-agent normalisation, so that a role whose rewards vary little is not drowned by
    one whose rewards vary much), or leave them (`none`). roles [B] long: a role id per sample."""
    if how == "none" or int(mask.sum()) < 2:
        return adv
    if how == "global":
        return masked_whiten(adv, mask)
    if how != "role":
        raise ValueError(f"unknown normalisation {how!r}; known: {', '.join(NORMALIZE)}")
    out = torch.zeros_like(adv)
    for r in roles.unique().tolist():
        m = mask.bool() & (roles == r).unsqueeze(1)
        if int(m.sum()) > 1:
            out = out + masked_whiten(adv, m)
    return out
