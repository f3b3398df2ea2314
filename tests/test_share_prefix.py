"""Shared prompts (`--ppo.share-prefix`): samples with one prompt packed as one segment, the prompt once.

The scores (log-probs, entropies, values) and the gradients must equal the unshared packing's: the 4D mask
keeps each completion to its prompt and its own tokens, and its positions continue from the prompt's length.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ragteam.train.actor_critic import ActorCritic
from ragteam.train.experience import (
    Sample,
    micro_batches,
    minibatches,
    pack_samples,
    packed_tokens,
    prompt_groups,
)

VOCAB = 64


def tiny_llama(attention: str) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        attn_implementation=attention,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def sample(prompt: list[int], completion: list[int], i: int, **kw) -> Sample:
    return Sample("e", i, "r", list(prompt), list(completion), reward=float(i % 3), **kw)


def grouped_batch() -> list[Sample]:
    """Two groups (3 and 2 members, different completion lengths), a group of one, a constrained member and
    one drawn at temperature 0.7; members of a group are not consecutive."""
    a, b, c = [3, 4, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14], [20, 21, 22, 23, 24, 25]
    return [
        sample(a, [30, 31, 32], 0),
        sample(b, [40, 41, 42, 43], 1),
        sample(a, [33, 34, 35, 36, 37], 2, temperature=0.7),
        sample(c, [50, 51, 52], 3),
        sample(a, [38], 4, allowed_ids=[38, 39, 44, 45]),
        sample(b, [46, 47], 5),
    ]


def scored(ac: ActorCritic, batch) -> tuple[torch.Tensor, ...]:
    out = ac(batch, entropy=True)
    return out.logp, out.entropy, out.values


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("critic", ["shared", "separate"])
@pytest.mark.parametrize("row", [None, 64])  # a row per group, or every group in one row
def test_shared_scores_equal_the_unshared(attention: str, critic: str, row: int | None) -> None:
    ac = ActorCritic.from_policy(tiny_llama(attention), shared=critic == "shared")
    torch.nn.init.normal_(ac.value_head.weight)  # a zero head would hide the values
    samples = grouped_batch()
    shared = pack_samples(samples, max_tokens=row, share_prefix=True)
    assert shared.input_ids.shape[0] == (1 if row else 3)
    with torch.no_grad():
        for x, y in zip(scored(ac, pack_samples(samples)), scored(ac, shared)):
            assert torch.isfinite(y).all()
            torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_gradients_equal_the_unshared(attention: str) -> None:
    ac = ActorCritic.from_policy(tiny_llama(attention), shared=False)
    torch.nn.init.normal_(ac.value_head.weight)
    samples = grouped_batch()
    adv = torch.linspace(-1, 1, len(samples))[:, None]

    def grads(batch) -> list[torch.Tensor]:
        ac.zero_grad(set_to_none=True)
        out = ac(batch, entropy=True)
        loss = -(out.logp * adv * batch.mask).sum() + (out.values**2).sum() - 0.1 * out.entropy.sum()
        loss.backward()
        return [p.grad.clone() for p in ac.parameters() if p.grad is not None]

    plain = grads(pack_samples(samples))
    shared = grads(pack_samples(samples, max_tokens=40, share_prefix=True))
    assert len(plain) == len(shared) and len(plain) > 0
    for x, y in zip(plain, shared):  # float32 sums in another order: relative to the tensor's scale
        assert torch.isfinite(y).all()
        assert float((y - x).abs().max()) <= 1e-5 * max(1.0, float(x.abs().max()))


def test_the_row_holds_each_prompt_once() -> None:
    samples = grouped_batch()
    plain = pack_samples(samples, max_tokens=64)
    shared = pack_samples(samples, max_tokens=64, share_prefix=True)
    # prompts 7, 5, 6 once each + completions 3+5+1, 4+2, 3
    assert shared.input_ids.shape == (1, 7 + 9 + 5 + 6 + 6 + 3) == (1, packed_tokens(samples, True))
    assert plain.input_ids.numel() == sum(s.length for s in samples) == packed_tokens(samples) == 55
    assert shared.attention_mask is not None and plain.attention_mask is None
    assert shared.attention_mask.shape == (1, 1, 36, 36)
    for b, s in enumerate(samples):  # token 0 is predicted at the prompt's last position, t > 0 at t - 1
        for t, token in enumerate(s.completion_ids):
            r, c = shared.rows[b, t], shared.cols[b, t]
            if t == 0:
                assert shared.input_ids[r, c] == s.prompt_ids[-1]
                assert shared.position_ids[r, c] == len(s.prompt_ids) - 1
            else:
                assert shared.input_ids[r, c + 1] == token
                assert shared.position_ids[r, c + 1] == len(s.prompt_ids) + t
    # a group too big for a row is split, each part with its prompt
    split = pack_samples(samples, max_tokens=12, share_prefix=True)
    assert split.input_ids.shape[1] <= 12 and split.input_ids.shape[0] >= 4


def test_padding_attends_to_itself_only() -> None:
    samples = grouped_batch()
    batch = pack_samples(samples, max_tokens=20, share_prefix=True)
    allowed = batch.attention_mask[:, 0]
    assert allowed.any(-1).all()  # every query attends somewhere (no NaN row under sdpa)


def random_groups(seed: int) -> list[Sample]:
    rng = random.Random(seed)
    out: list[Sample] = []
    for g in range(12):
        prompt = [g + 1] * rng.randint(5, 40)
        for _ in range(rng.randint(1, 5)):
            out.append(sample(prompt, [1] * rng.randint(1, 8), len(out)))
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_keep_each_prompt_group_together(seed: int) -> None:
    samples = random_groups(seed)
    group_of = {i: k for k, g in enumerate(prompt_groups(samples, range(len(samples)))) for i in g}

    def whole(batches: list[list[int]]) -> None:
        assert sorted(i for b in batches for i in b) == list(range(len(samples)))
        for b in batches:
            for i in b:
                members = {j for j, k in group_of.items() if k == group_of[i]}
                assert members <= set(b)

    split = minibatches(samples, 400, torch.Generator().manual_seed(seed), share_prefix=True)
    whole(split)
    assert split == minibatches(samples, 400, torch.Generator().manual_seed(seed), share_prefix=True)
    for mb in split:
        micro = micro_batches(samples, mb, 120, share_prefix=True)
        whole_in = sorted(i for b in micro for i in b)
        assert whole_in == sorted(mb)
        for b in micro:
            groups = prompt_groups(samples, b)
            assert sum(len(samples[g[0]].prompt_ids) for g in groups) + sum(
                len(samples[i].completion_ids) for i in b
            ) <= max(120, max(packed_tokens([samples[i] for i in g], True) for g in groups))
            for g in groups:  # a group is split only when it alone costs more than the budget
                full = [j for j, k in group_of.items() if k == group_of[g[0]]]
                if set(full) <= set(mb):
                    assert set(g) == set(full) or packed_tokens([samples[j] for j in full], True) > 120


@pytest.mark.slow  # a PPO run of whole iterations
def test_a_tiny_grpo_run_with_shared_prompts_finishes(
    hotpot_small: Path, tmp_path: Path, monkeypatch
) -> None:
    """grpo with groups of 2 and --ppo.share-prefix: two iterations train, and the batches the trainer packs
    do share prompts (the group's first acts), so they cost fewer tokens than unshared."""
    from test_ppo import tiny_cfg

    from ragteam.train import ppo
    from ragteam.train.ppo import learner as ppo_learner

    packed: list[tuple[int, int]] = []  # (tokens shared, tokens unshared) of every packed batch

    def spy(samples, *a, share_prefix: bool = False, **kw):
        assert share_prefix
        packed.append((packed_tokens(samples, True), packed_tokens(samples)))
        return pack_samples(samples, *a, share_prefix=share_prefix, **kw)

    monkeypatch.setattr(ppo_learner, "pack_samples", spy)  # the advantage and update phases pack
    base = tiny_cfg(hotpot_small, tmp_path)
    cfg = tiny_cfg(
        hotpot_small,
        tmp_path / "out",
        questions_per_iteration=2,
        iterations=2,
        rollout={"group_size": 2},
        ppo={
            **base.ppo.model_dump(),
            "advantage": "grpo",
            "share_prefix": True,
            "skip_uninformative": False,
        },
    )
    assert cfg.ppo.share_prefix
    out = ppo.train_ppo(cfg)
    assert (out / "config.json").exists()
    assert packed and any(shared < plain for shared, plain in packed)


def test_a_batch_with_no_repeated_prompt_is_packed_as_without_sharing():
    """The switch is on by default: where no prompt repeats (PPO with one episode per question), the batch is
    the plain packing, tensor for tensor, with no attention mask."""
    samples = [sample([1, 2, 3], [30, 31], 0), sample([4, 5], [32], 1), sample([6, 7, 8, 9], [33, 34, 35], 2)]
    plain, shared = (
        pack_samples(samples, max_tokens=16),
        pack_samples(samples, max_tokens=16, share_prefix=True),
    )
    assert shared.attention_mask is None
    for name in ("input_ids", "position_ids", "rows", "cols", "mask", "completion_ids"):
        assert torch.equal(getattr(plain, name), getattr(shared, name)), name


def test_shared_prompts_need_an_attention_that_takes_the_mask(capsys):
    """sdpa and eager take the 4D mask; a policy loaded with flash attention runs without sharing, said once
    by the main process, and the switch off stays off."""
    from types import SimpleNamespace

    from ragteam.train.ppo.run import shares_prefix

    def policy(attention: str) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(_attn_implementation=attention))

    assert shares_prefix(True, policy("sdpa"), True) and shares_prefix(True, policy("eager"), True)
    assert not shares_prefix(True, policy("flash_attention_2"), True)
    assert "needs sdpa or eager attention, not flash_attention_2" in capsys.readouterr().err
    assert not shares_prefix(True, policy("flash_attention_2"), False) and capsys.readouterr().err == ""
    assert not shares_prefix(False, policy("sdpa"), True)
