"""Which samples an advantage estimator compares: question groups, episodes, forks and leaf trajectories.

`group_ids` numbers them for the estimators (`train/advantages.py`): a sample's question group and role
(`index`), its fork (`siblings`), its role, its episode (one tree: what an episode-level group counts once)
and the answer leaves below it (`LeafTable`, Tree-GRPO's leaf trajectories). `informative` says which
samples a group baseline learns nothing from (their group, fork and tree all scored alike), which the trainer
leaves out of the update (DAPO's dynamic-sampling filter, without resampling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ragteam.train.advantages import LeafTable

if TYPE_CHECKING:
    from ragteam.train.experience import Sample

__all__ = ["GroupIds", "group_ids", "informative", "leaf_table"]


@dataclass(frozen=True)
class GroupIds:
    """The ids the advantage estimators and the per-role normalisation read, each [B] long: `index` (one
    question group and role), `siblings` (one parent node, episode and role; -1 for an act with no sibling:
    nothing forked there), `roles` (one role), `episodes` (one episode, i.e. one tree: what an
    episode-level group counts once), and `leaves`, the answer leaves below each act (Tree-GRPO's leaf
    trajectories, `advantages.LeafTable`)."""

    index: Tensor
    siblings: Tensor
    roles: Tensor
    episodes: Tensor
    leaves: LeafTable

    def select(self, keep: Tensor) -> GroupIds:
        """The ids of the kept samples (`keep` [B] bool); the groups, forks and leaves they name stay."""
        return GroupIds(
            self.index[keep],
            self.siblings[keep],
            self.roles[keep],
            self.episodes[keep],
            self.leaves.select(keep),
        )

    def to(self, device: torch.device | str) -> GroupIds:
        return GroupIds(
            *(x.to(device) for x in (self.index, self.siblings, self.roles, self.episodes)),
            self.leaves.to(device),
        )


def _numbered(keys: Sequence) -> Tensor:
    """Each key's number, in order of first appearance, [len(keys)] long."""
    table: dict = {}
    return torch.tensor([table.setdefault(k, len(table)) for k in keys], dtype=torch.long)


def group_ids(samples: Sequence[Sample]) -> GroupIds:
    """The samples' `GroupIds`, numbered in order of first appearance."""
    index = _numbered([(s.group, s.role) for s in samples])
    fork = _numbered([(s.episode, s.parent, s.role) for s in samples])
    size = torch.bincount(fork, minlength=1)
    siblings = torch.where(size[fork] > 1, fork, torch.full_like(fork, -1))
    episodes = _numbered([s.episode for s in samples])
    return GroupIds(index, siblings, _numbered([s.role for s in samples]), episodes, leaf_table(samples))


def leaf_table(samples: Sequence[Sample]) -> LeafTable:
    """The answer leaves below the samples (`Sample.outcomes`), each once: which acts lie on each leaf's
    trajectory, its reward, its tree (episode) and its question (`Sample.group`)."""
    leaves: dict[tuple[str, int], tuple[float, str, str]] = {}
    for s in samples:
        for leaf, r in (s.outcomes or {}).items():
            leaves.setdefault((s.episode, leaf), (float(r), s.episode, s.group))
    column = {key: i for i, key in enumerate(leaves)}
    member = torch.zeros(len(samples), len(leaves))
    for b, s in enumerate(samples):
        for leaf in s.outcomes or {}:
            member[b, column[(s.episode, leaf)]] = 1.0
    values = list(leaves.values())
    return LeafTable(
        member,
        torch.tensor([v[0] for v in values], dtype=torch.float32),
        _numbered([v[1] for v in values]),
        _numbered([v[2] for v in values]),
    )


def informative(samples: Sequence[Sample], ids: GroupIds | None = None, trees: bool = False) -> list[bool]:
    """Per sample: does a group baseline learn anything from it? True when its question group holds at least
    two episodes and its samples were credited differently, or when the other branches of its fork were
    credited differently, or (`trees`: an estimator that compares leaf trajectories, tree_grpo) when the
    leaves of its own tree differ. A group whose samples all scored alike gets advantage 0 from every group
    estimator (so no gradient; a group of one episode has no baseline at all), and GRPO's division by the
    group's std would blow tiny differences up to +-1: DAPO's dynamic sampling drops such groups before the
    update. `ids`: the samples' `group_ids`, when the caller has them already."""
    ids = ids if ids is not None else group_ids(samples)
    rewards = [s.reward for s in samples]
    question = _spread(ids.index.tolist(), rewards)
    fork = _spread(ids.siblings.tolist(), rewards)
    episodes: dict[int, set[int]] = {}
    for g, e in zip(ids.index.tolist(), ids.episodes.tolist()):
        episodes.setdefault(g, set()).add(e)
    tree: dict[int, bool] = {}
    if trees and ids.leaves.reward.numel():
        spread = _spread(ids.leaves.tree.tolist(), ids.leaves.reward.tolist())
        tree = {e: spread[t] for e, t in _tree_of(ids).items()}
    return [
        (question.get(q, False) and len(episodes[q]) > 1) or fork.get(f, False) or tree.get(e, False)
        for q, f, e in zip(ids.index.tolist(), ids.siblings.tolist(), ids.episodes.tolist())
    ]


def _spread(groups: list[int], values: list[float]) -> dict[int, bool]:
    """For each group id >= 0: do its values differ?"""
    seen: dict[int, tuple[float, float]] = {}
    for g, v in zip(groups, values):
        if g >= 0:
            lo, hi = seen.get(g, (v, v))
            seen[g] = (min(lo, v), max(hi, v))
    return {g: hi > lo for g, (lo, hi) in seen.items()}


def _tree_of(ids: GroupIds) -> dict[int, int]:
    """Each sample's episode id -> the leaf table's tree id of its leaves (episodes with leaves only)."""
    out: dict[int, int] = {}
    member = ids.leaves.member
    for b, e in enumerate(ids.episodes.tolist()):
        cols = member[b].nonzero().flatten().tolist()
        if cols:
            out[e] = int(ids.leaves.tree[cols[0]])
    return out
