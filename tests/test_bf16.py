"""`--ppo.bf16`: the trainer's forwards under bfloat16 autocast score what float32 scores, within bf16's
precision, and hand the losses float32 tensors (the log-softmax over the vocabulary in float32)."""

from __future__ import annotations

import pytest
import torch
from test_share_prefix import grouped_batch, tiny_llama

from ragteam.train.actor_critic import ActorCritic
from ragteam.train.experience import pack_samples


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("share_prefix", [False, True])
def test_bf16_scores_track_float32(attention: str, share_prefix: bool) -> None:
    ac = ActorCritic.from_policy(tiny_llama(attention))
    torch.nn.init.normal_(ac.value_head.weight, std=0.1)  # a zero head would make the values trivially equal
    batch = pack_samples(grouped_batch(), share_prefix=share_prefix)
    with torch.no_grad():
        full = ac(batch, entropy=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = ac(batch, entropy=True)
    for name in ("logp", "entropy", "values"):
        a, b = getattr(full, name), getattr(half, name)
        assert b.dtype == torch.float32, name
        assert torch.isfinite(b).all(), name
        gap = (a - b).abs()[batch.mask].max()
        assert gap < 0.1, f"{name}: bf16 differs from float32 by {gap:.3f}"
    assert not torch.equal(full.logp, half.logp)  # autocast did run the matrix products in bf16


def test_the_learner_precision_follows_the_switch() -> None:
    from ragteam.train.ppo.learner import Learner
    from ragteam.train.ppo_config import PPOConfig

    def precision(bf16: bool):
        cfg = PPOConfig.model_validate({"data": "d.jsonl", "out": "o", "ppo": {"bf16": bf16}})
        learner = Learner.__new__(Learner)
        learner.opts, learner.device = cfg.ppo, torch.device("cpu")
        return learner.precision()

    x = torch.randn(4, 4)
    with precision(True):
        assert (x @ x).dtype == torch.bfloat16
    with precision(False):
        assert (x @ x).dtype == torch.float32
