"""The statistics the learner measures on the way, for the iteration's log row: the rollout backend's log-prob
drift (in the advantage pass) and the per-role PPO statistics of each micro-batch (in the update).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragteam.train.experience import Sample
from ragteam.train.losses import masked_mean, value_loss
from ragteam.train.meters import RoleMeters

__all__ = ["logprob_drift", "role_stats"]


def logprob_drift(samples: list[Sample], old_logp: Tensor) -> float | None:
    """Mean absolute gap per token between the trainer's log-probs and the rollout backend's (recorded at
    temperature 1, so compared on the samples drawn at 1): ~1e-6 in process, larger from a server (other
    kernels, bf16) or when its weights lag the trainer's."""
    total, count = 0.0, 0
    for b, s in enumerate(samples):
        recorded = s.rollout_logprobs
        if s.temperature == 1 and recorded is not None and len(recorded) == len(s.completion_ids):
            ours = old_logp[b, : len(s.completion_ids)].cpu()
            total += float((ours - torch.tensor(recorded)).abs().sum())
            count += len(s.completion_ids)
    return total / count if count else None


@torch.no_grad()
def role_stats(meters: RoleMeters, batch, out, old, adv, ret, old_v, cfg, pg_loss) -> None:
    """Token-weighted PPO statistics of one micro-batch: overall and for each role in it."""
    roles = sorted({s.role for s in batch.samples})
    role_of = [s.role for s in batch.samples]
    for role in [None, *roles]:
        m = (
            batch.mask
            if role is None
            else batch.mask
            & torch.tensor([r == role for r in role_of], device=batch.mask.device).unsqueeze(1)
        )
        n = float(m.sum())
        if n == 0:
            continue
        pg, pstats = pg_loss(out.logp, old, adv, m, clip=cfg.clip)
        stats = {
            "policy_loss": pg.item(),
            "clip_frac": pstats["clip_frac"],
            "approx_kl": pstats["approx_kl"],
            "entropy": masked_mean(out.entropy, m).item(),
            "advantage_abs": masked_mean(adv.abs(), m).item(),
        }
        if old_v is not None:
            vf, vstats = value_loss(out.values, old_v, ret, m, clip=cfg.value_clip, kind=cfg.value_loss)
            stats |= {"value_loss": vf.item(), "value_clip_frac": vstats["clip_frac"]}
        for name, value in stats.items():
            meters.add(role, name, value, n)
