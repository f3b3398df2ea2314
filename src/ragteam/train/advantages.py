"""Advantage estimators: small pure functions registered by name, picked by `--ppo.advantage NAME`.

One contract for all of them (verl's shape: small pure functions over per-sample group indices):

    fn(token_rewards [B, T], mask [B, T], values [B, T] | None, index [B], *,
       siblings [B], episodes [B], leaves LeafTable, **settings) -> (advantages [B, T], returns [B, T])

B samples (acts), T token positions; `mask` is 1 on trained completion tokens. `token_rewards` holds the
act's credit at its last token and, when the KL sits in the reward (`--ppo.kl-in reward`), -beta * KL at
every token (`losses.token_rewards`), so an act's score s_a is the masked sum of its row. The ids come from
the rollout (`train/groups.group_ids`): `index`, one question group and role (the K episodes of a question,
`--rollout.group-size K`); `episodes`, the episode (one tree) each act belongs to; `siblings`, one parent
node in one episode (the branches of a fork: C-3PO's forced strategies, K(t) samples, keep-one-of-N
candidates), -1 where nothing forked; `leaves`, the answer leaves below each act and their rewards
(`LeafTable`, below). Returns are what a critic regresses to; estimators without a critic return their
advantages there (unused). Everything runs without gradient; outputs are 0 where masked.

Episode-level groups. A group estimator's statistics count every episode once, whatever its number of acts:
an episode's score e in a group is the mean score of its acts there, the group's baseline is the mean of its
episodes' e (RLOO: of the *other* episodes' e) and GRPO's std is the std of the e's. Each act is then scored
by its own s_a against that baseline, so per-act credits (MMOA-RAG's role penalties, a process reward
model's r(s, a)) keep their own part d_a = s_a - e. With outcome credit on a chain every act of an episode
has s_a = e and gets the episode's advantage. One failing 10-act episode and three successful 1-act episodes
of one question (e = 0, 1, 1, 1) give drgrpo -0.75 / +0.25 and rloo -1 / +1/3 on every act; act-level
groups (before issue 29) gave drgrpo -0.23 / +0.77. A group of one episode has no baseline: 0 everywhere.

| name         | baseline (A_a for act a of episode e)                          | per-act part d_a       | KL     | normalize | critic | source                                        |
|--------------|-----------------------------------------------------------------|------------------------|--------|-----------|--------|-----------------------------------------------|
| gae          | V(s) per token, lambda-returns                                  | in the token rewards   | reward | global    | yes    | Schulman et al. 2016 (PPO, both papers)       |
| grpo         | (s_a - mean_e) / std_e over the group's episodes                | divided by std_e       | loss   | none      | no     | DeepSeekMath (Shao et al. 2024)               |
| drgrpo       | s_a - mean_e                                                    | as is                  | loss   | none      | no     | Dr. GRPO (Liu et al. 2025)                    |
| rloo         | s_a - mean of the *other* episodes' e                           | as is                  | loss   | none      | no     | RLOO (Ahmadian et al. 2024)                   |
| reinforce_pp | return-to-go, whitened over the batch                           | in the token rewards   | reward | none      | no     | REINFORCE++ (Hu 2025)                         |
| tree_grpo    | mean over the act's leaf trajectories of A_intra + A_inter      | added as is            | loss   | none      | no     | Tree-GRPO (Ji et al., arXiv 2509.21240)       |
| sibling      | grpo's episode-level term + (s_a - fork mean) / fork std        | in both terms          | loss   | none      | no     | ragteam (node siblings, GiGPO-like)           |

`KL` and `normalize` are the defaults that `--ppo.kl-in auto` and `--ppo.normalize auto` resolve to
(`Estimator.kl_in`, `Estimator.normalize`): the critic-free estimators put beta * KL in the loss (k3,
DeepSeekMath), not in the score they normalise, and a group-normalised advantage is not whitened a second
time (verl and OpenRLHF do not; a global whitening would bring a std division back into Dr. GRPO).
`tree` was renamed (an error names the new names): it was the `sibling` estimator, not Tree-GRPO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ragteam.train.losses import masked_whiten

__all__ = [
    "ESTIMATORS",
    "NORMALIZE",
    "RENAMED",
    "Estimator",
    "LeafTable",
    "gae",
    "get_advantage",
    "group_center",
    "grpo",
    "leave_one_out",
    "normalize",
    "register_advantage",
    "reinforce_pp",
    "rloo",
    "sibling",
    "tree_grpo",
]

AdvantageFn = Callable[..., tuple[Tensor, Tensor]]

NORMALIZE = ("none", "global", "role")
"""The normalisations `normalize` applies (`--ppo.normalize`, besides `auto`)."""


class LeafTable(NamedTuple):
    """The answer leaves of an iteration's episode trees, what Tree-GRPO's leaf trajectories are made of.

    member [B, L] float: 1 where leaf l lies below act b (act b is on leaf l's trajectory); reward [L]: each
    leaf's outcome reward; tree [L] long: the episode (tree) it ends; group [L] long: its question (the trees
    of one question). L = 0 when the samples carry no leaves (`Sample.outcomes` unset)."""

    member: Tensor
    reward: Tensor
    tree: Tensor
    group: Tensor

    def select(self, keep: Tensor) -> LeafTable:
        """The table for the kept acts (rows of `member`); the leaves stay, whichever acts are trained."""
        return LeafTable(self.member[keep], self.reward, self.tree, self.group)

    def to(self, device: torch.device | str) -> LeafTable:
        return LeafTable(*(x.to(device) for x in self))


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function; whether it reads a value model's values (`value_model`); whether it compares
    episodes of one question (`groups`: needs --rollout.group-size > 1) or also the branches of one tree
    (`forks`: a forked rollout gives it something to compare with one episode per question); where the KL
    goes (`kl_in`) and how its advantages are normalised (`normalize`) under `--ppo.kl-in auto` and
    `--ppo.normalize auto`."""

    fn: AdvantageFn
    value_model: bool = False  # a value model is built, trained and scored only for these
    groups: bool = False
    forks: bool = False
    kl_in: str = "loss"  # "loss": beta * k3 in the loss (DeepSeekMath); "reward": -beta * KL per token
    normalize: str = "none"


ESTIMATORS: dict[str, Estimator] = {}
"""Advantage estimators by name (iterate it for the known names)."""

RENAMED = {
    "tree": "--ppo.advantage tree was renamed: it compared each act with the siblings of its fork plus a "
    "question group and was not Tree-GRPO. Use tree_grpo (Tree-GRPO as published: leaf trajectories, "
    "intra-tree + inter-tree) or sibling (the former estimator, with episode-level groups)",
}
"""Names no longer registered, with what replaces them (an old config fails naming the new names)."""


def register_advantage(
    name: str,
    value_model: bool = False,
    groups: bool = False,
    forks: bool = False,
    kl_in: str = "loss",
    normalize: str = "none",
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: register an estimator under `name` (once); see `Estimator` for the flags."""
    if kl_in not in ("loss", "reward"):
        raise ValueError(f"kl_in is loss or reward, not {kl_in!r}")
    if normalize not in NORMALIZE:
        raise ValueError(f"normalize is one of {', '.join(NORMALIZE)}, not {normalize!r}")

    def deco(fn: AdvantageFn) -> AdvantageFn:
        if name in ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ESTIMATORS[name] = Estimator(fn, value_model, groups, forks, kl_in, normalize)
        return fn

    return deco


def get_advantage(name: str) -> Estimator:
    """The estimator registered as `name`; a ValueError naming the known ones (or the new name) otherwise."""
    if name in RENAMED and name not in ESTIMATORS:
        raise ValueError(RENAMED[name])
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name]


# ------------------------------------------------------------------------------------------ helpers


def sequence_scores(token_rewards: Tensor, mask: Tensor) -> Tensor:
    """An act's total reward s_a: the masked sum of its row, [B, T] -> [B] (its credit, minus beta * summed
    KL when the KL sits in the reward)."""
    return (token_rewards.float() * mask.float()).sum(-1)


def _units(index: Tensor, episodes: Tensor) -> tuple[Tensor, Tensor]:
    """One unit per (group, episode) pair: (unit [B] long, -1 for a sample outside any group (negative
    index), and unit_group [U] long, each unit's group)."""
    unit = torch.full_like(index, -1)
    valid = index >= 0
    if not bool(valid.any()):
        return unit, index[:0]
    pairs = torch.stack([index[valid], episodes[valid]], dim=1)
    uniq, inverse = torch.unique(pairs, dim=0, return_inverse=True)
    unit[valid] = inverse
    return unit, uniq[:, 0]


@dataclass(frozen=True)
class _Groups:
    """Episode-level statistics of one grouping, for the valid samples (`valid` [B] bool): each sample's
    group `g` and unit `u`, each unit's episode score `e` [U], each group's episode count, sum and mean [G]."""

    valid: Tensor
    g: Tensor
    u: Tensor
    unit_group: Tensor
    e: Tensor
    count: Tensor
    total: Tensor

    @property
    def mean(self) -> Tensor:
        return self.total / self.count.clamp_min(1)


def _groups(scores: Tensor, index: Tensor, episodes: Tensor | None) -> _Groups | None:
    """`_Groups` of `scores` [B] under `index` [B], each episode once (`episodes` [B]; None: every sample is
    its own episode); None when no sample is in a group."""
    if episodes is None:
        episodes = torch.arange(scores.shape[0], device=index.device)
    unit, unit_group = _units(index, episodes)
    valid = unit >= 0
    if not bool(valid.any()):
        return None
    u = unit[valid]
    ones = torch.ones_like(scores[valid])
    n_units, n_groups = unit_group.numel(), int(unit_group.max()) + 1
    per_unit = scores.new_zeros(n_units).index_add_(0, u, ones)
    e = scores.new_zeros(n_units).index_add_(0, u, scores[valid]) / per_unit
    count = scores.new_zeros(n_groups).index_add_(0, unit_group, torch.ones_like(e))
    total = scores.new_zeros(n_groups).index_add_(0, unit_group, e)
    return _Groups(valid, unit_group[u], u, unit_group, e, count, total)


def group_center(
    scores: Tensor, index: Tensor, scale: bool = True, eps: float = 1e-6, episodes: Tensor | None = None
) -> Tensor:
    """Each score minus its group's baseline, the mean of the group's episode scores, divided by the std of
    those episode scores when `scale`.

    scores [B] float, index [B] long (group id; negative ids are groups of one), episodes [B] long (None: each
    sample its own episode) -> [B]. An episode's score is the mean of its samples in the group, so it counts
    once however many acts it has; each sample keeps its own deviation from it. Groups of one episode get 0.
    The std is the unbiased one (n - 1), as GRPO's reference implementations use; where the episodes all
    scored alike (std <= eps) nothing is divided (only the samples' own parts remain, unscaled).
    """
    scores = scores.float()
    out = torch.zeros_like(scores)
    st = _groups(scores, index, episodes)
    if st is None:
        return out
    centered = scores[st.valid] - st.mean[st.g]
    if scale:
        var = scores.new_zeros(st.count.numel()).index_add_(
            0, st.unit_group, (st.e - st.mean[st.unit_group]) ** 2
        )
        std = (var / (st.count - 1).clamp_min(1)).sqrt()
        centered = centered / torch.where(std > eps, std + eps, torch.ones_like(std))[st.g]
    out[st.valid] = torch.where(st.count[st.g] > 1, centered, torch.zeros_like(centered))
    return out


def leave_one_out(scores: Tensor, index: Tensor, episodes: Tensor | None = None) -> Tensor:
    """Each score minus the mean of the *other* episodes of its group (RLOO's baseline, which does not
    include the sample's own episode, so it is independent of it: the estimator stays unbiased).

    scores [B], index [B] long, episodes [B] long (None: each sample its own episode) -> [B]; 0 for groups
    of one episode."""
    scores = scores.float()
    out = torch.zeros_like(scores)
    st = _groups(scores, index, episodes)
    if st is None:
        return out
    k = st.count[st.g]
    others = (st.total[st.g] - st.e[st.u]) / (k - 1).clamp_min(1)
    adv = scores[st.valid] - others
    out[st.valid] = torch.where(k > 1, adv, torch.zeros_like(adv))
    return out


def _broadcast(per_sample: Tensor, mask: Tensor) -> Tensor:
    """[B] -> [B, T]: one advantage for every trained token of the act, 0 where masked."""
    return per_sample.unsqueeze(1) * mask.float()


# ------------------------------------------------------------------------------------------ estimators


@register_advantage("gae", value_model=True, kl_in="reward", normalize="global")
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
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor,
    *,
    episodes: Tensor | None = None,
    eps: float = 1e-6,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """GRPO (DeepSeekMath): (s_a - mean of the group's episode scores) / their std, the same for every token
    of the act; each episode counts once (`group_center`)."""
    with torch.no_grad():
        per = group_center(sequence_scores(token_rewards, mask), index, True, eps, episodes)
        adv = _broadcast(per, mask)
    return adv, adv


@register_advantage("drgrpo", groups=True)
def drgrpo(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor,
    *,
    episodes: Tensor | None = None,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Dr. GRPO: s_a - mean of the group's episode scores, not divided by their std (which favours groups
    that barely differ, i.e. questions too easy or too hard)."""
    with torch.no_grad():
        adv = _broadcast(
            group_center(sequence_scores(token_rewards, mask), index, False, episodes=episodes), mask
        )
    return adv, adv


@register_advantage("rloo", groups=True)
def rloo(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor,
    *,
    episodes: Tensor | None = None,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): s_a minus the mean score of the group's *other* K-1
    episodes (`leave_one_out`): no act of its own episode is in its baseline."""
    with torch.no_grad():
        adv = _broadcast(leave_one_out(sequence_scores(token_rewards, mask), index, episodes), mask)
    return adv, adv


@register_advantage("reinforce_pp", kl_in="reward")
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
    it), whitened over the whole batch: the batch mean is the baseline, no group or critic needed. The KL
    sits in the reward, as REINFORCE++ defines it; the whitening is its own (no second one by default)."""
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


@register_advantage("tree_grpo", groups=True, forks=True)
def tree_grpo(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor | None = None,
    *,
    leaves: LeafTable | None = None,
    eps: float = 1e-6,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Tree-GRPO (Ji et al., "Tree Search for LLM Agent Reinforcement Learning", arXiv 2509.21240, sec. 3.3):
    every leaf trajectory H_i (root to answer leaf) of a question's M trees gets one advantage

        A_intra(H_i) = (R(H_i) - mean{R(H_j): H_j in the tree of H_i}) / std{same}
        A_inter(H_i) = (R(H_i) - mean{R(H_j): H_j in any tree of the question}) / std{same}
        A(H_i)       = A_intra(H_i) + A_inter(H_i)

    (the released code, AMAP-ML/Tree-GRPO `ray_trainer_ts.py`, estimator `tree`, sums two GRPO terms, one
    grouped by the tree's id and one by the prompt's; unbiased std, eps 1e-6). An episode here is one tree,
    `--rollout.group-size K` gives a question K trees, and R is the leaf's outcome reward (`leaves.reward`).

    The paper's sample is a whole trajectory, so an act shared by several leaf trajectories (an inner node
    above a fork) is trained once per leaf there, each time with that leaf's A. Here an act is one sample:
    it gets the *mean* of A over the leaves below it. The direction of its update is the same (the sum's
    sign); the mean keeps a shared act on the scale of an unshared one instead of weighing it by its number
    of leaves, which the prefix-sharing budget saving would otherwise turn into a larger step for the acts
    nearest the root. An act's credit beyond the mean reward of its leaves (its per-act part: MMOA-RAG's
    role penalty; -beta * KL under `--ppo.kl-in reward`) is added as is. A tree with one leaf (nothing
    forked) and a question with one leaf have no comparison: their term is 0 (the released code gives such a
    group mean 0 and std 1, which adds the raw R). Acts with no leaf below them get 0.
    """
    if leaves is None or leaves.member.shape[-1] == 0:
        raise ValueError(
            "tree_grpo reads the answer leaves below each act (train/groups.group_ids(samples).leaves, from "
            "Sample.outcomes, which samples_from_episodes records): none were given"
        )
    with torch.no_grad():
        reward = leaves.reward.float()
        leaf_adv = group_center(reward, leaves.tree, True, eps) + group_center(
            reward, leaves.group, True, eps
        )
        member = leaves.member.float()
        n = member.sum(-1)
        mean_adv = (member @ leaf_adv) / n.clamp_min(1)
        outcome = (member @ reward) / n.clamp_min(1)
        own = sequence_scores(token_rewards, mask) - outcome
        adv = _broadcast(torch.where(n > 0, mean_adv + own, torch.zeros_like(own)), mask)
    return adv, adv


@register_advantage("sibling", groups=True, forks=True)
def sibling(
    token_rewards: Tensor,
    mask: Tensor,
    values: Tensor | None,
    index: Tensor,
    *,
    siblings: Tensor | None = None,
    episodes: Tensor | None = None,
    eps: float = 1e-6,
    **_: Any,
) -> tuple[Tensor, Tensor]:
    """Node-sibling advantage (ragteam's, not a published estimator; the former `tree`): grpo's
    episode-level group term plus a fork term, the act's score against the other children of its parent
    node in its episode ((s_a - fork mean) / fork std; C-3PO's forced strategies, K(t) samples). A forked
    act counts once in each: its episode (all its forced siblings together) is one unit of the group term.
    An act that was not forked gets only the group term; a question rolled out once (group size 1) has no
    group term, so its acts get only the fork term."""
    with torch.no_grad():
        scores = sequence_scores(token_rewards, mask)
        per = group_center(scores, index, True, eps, episodes)
        if siblings is not None:
            per = per + group_center(scores, siblings, True, eps)
        adv = _broadcast(per, mask)
    return adv, adv


# ------------------------------------------------------------------------------------------ normalisation


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


def resolved(option: str, estimator: Estimator, what: str) -> str:
    """`--ppo.kl-in` / `--ppo.normalize` as the run applies it: `auto` is the estimator's own default
    (`Estimator.kl_in`, `Estimator.normalize`), any other value is kept. `what`: "kl_in" or "normalize"."""
    return getattr(estimator, what) if option == "auto" else option
