"""Where the KL goes, the KL anneal's end, resumed settings, a server grammar's mask and one reward scale per
run (issue 29, items 3 and 6)."""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ragteam.rollout.tree import Episode, Node
from ragteam.train.constrained import mask_structured
from ragteam.train.experience import Sample
from ragteam.train.groups import group_ids
from ragteam.train.losses import KLController
from ragteam.train.ppo.checkpoint import apply_kl_beta, apply_settings
from ragteam.train.ppo.learner import anneal_steps
from ragteam.train.ppo.tree_scores import unscorable
from ragteam.train.ppo_config import PPOConfig, PPOOptions
from ragteam.types import Question

TOKENS = 8192


def cfg_of(data: Path, out: Path, **ppo) -> PPOConfig:
    return PPOConfig.model_validate(
            dict(
                recipe="mmoa", data=str(data), out=str(out), policy={"model": "tiny"}, limit=12, iterations=2,
                questions_per_iteration=2, variant="s-g", topk=2, candidates=2, retriever={"kind": "bm25"},
                progress=False, tensorboard=False, rollout={"group_size": 2},
                ppo={"max_sample_tokens": TOKENS, "micro_tokens": TOKENS, "minibatch_tokens": 2 * TOKENS, **ppo},
            )
        )  # fmt: skip


# ---- KL in the loss or in the reward ------------------------------------------------------------------------


def test_group_estimators_pay_the_kl_in_the_loss_and_gae_in_the_reward(hotpot_small: Path, tmp_path: Path):
    """grpo (kl-in auto = loss): the advantages are the credits' group-normalised scores whatever the KL,
    and the update's loss carries beta * k3; --ppo.kl-in reward puts -beta * KL back into the scores."""
    from ragteam.train import ppo
    from ragteam.train.advantages import get_advantage
    from ragteam.train.ppo import phases

    run = ppo.start(
        cfg_of(hotpot_small, tmp_path / "a", advantage="grpo", kl_beta=0.2, kl_anneal_to=None, lr=1e-2)
    )
    assert run.learner.kl_loss_coef() == 0.2
    samples, _ = phases.credit_samples(run, phases.play(run, 0))
    run.learner.update(run.learner.score(samples), 0)  # moves the policy away from the reference
    samples, _ = phases.credit_samples(run, phases.play(run, 1))
    kept, ids = samples, group_ids(samples)  # every act, uninformative ones too (the tiny model's F1 is ~0)
    exp = run.learner.score(kept, ids)
    assert float(exp.kl.abs().sum()) > 0  # the policy moved: there is a KL to pay
    scores = torch.tensor([[s.reward] for s in kept])
    want, _ = get_advantage("grpo").fn(
        scores, torch.ones(len(kept), 1), None, ids.index, episodes=ids.episodes
    )
    assert torch.allclose(exp.advantages[:, 0], want[:, 0], atol=1e-5)  # no KL in them, no second whitening
    overall, _ = run.learner.update(exp, 1).means()
    assert overall["kl_loss"] > 0

    run.learner.opts = run.learner.opts.model_copy(update={"kl_in": "reward"})
    assert run.learner.kl_loss_coef() == 0.0
    in_reward = run.learner.score(kept, ids)
    assert not torch.allclose(in_reward.advantages[:, 0], want[:, 0], atol=1e-5)


def test_gae_keeps_the_kl_in_the_reward_and_whitens() -> None:
    from ragteam.train.advantages import ESTIMATORS, resolved

    assert resolved("auto", ESTIMATORS["gae"], "kl_in") == "reward"
    assert resolved("auto", ESTIMATORS["gae"], "normalize") == "global"
    fields = PPOOptions.model_fields
    assert fields["normalize"].default == fields["kl_in"].default == "auto"
    assert fields["kl_loss_estimator"].default == "k3"


# ---- the KL anneal ------------------------------------------------------------------------------------------


def test_the_kl_anneal_reaches_beta_min_on_the_last_iteration(tmp_path: Path) -> None:
    """MMOA-RAG: beta 0.2 annealed to 0.06 over 4 iterations runs at 0.2, 0.153, 0.107, 0.06 (it ran at 0.2,
    0.165, 0.13, 0.095 before). The trainer reads beta in an iteration and updates it after."""
    cfg = cfg_of(tmp_path / "d.jsonl", tmp_path / "o").model_copy(update={"iterations": 4})
    kl = KLController(
        0.2, beta_min=0.06, beta_max=0.2, anneal_to=0.06, anneal_steps=anneal_steps(cfg.ppo, cfg.iterations)
    )
    used = []
    for _ in range(cfg.iterations):
        used.append(round(kl.beta, 4))
        kl.update(0.0, 1)
    assert used == [0.2, 0.1533, 0.1067, 0.06]
    one = cfg.model_copy(update={"iterations": 1})
    assert anneal_steps(one.ppo, one.iterations) == 1  # a one-iteration run stays at the initial beta
    assert anneal_steps(cfg.ppo.model_copy(update={"kl_anneal_to": None}), cfg.iterations) == 0


# ---- resume with changed settings ---------------------------------------------------------------------------


def _optimizer(lr: float) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr, weight_decay=0.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.5**it)


def test_a_resumed_run_uses_its_own_learning_rate_not_the_checkpoints() -> None:
    old, old_sched = _optimizer(1e-3)
    for _ in range(2):
        old.step()
        old_sched.step()
    saved = old.state_dict(), old_sched.state_dict()

    opt, sched = _optimizer(4e-3)  # the resumed run, built with --ppo.lr 4e-3
    opt.load_state_dict(saved[0])
    sched.load_state_dict(saved[1])
    assert opt.param_groups[0]["lr"] == pytest.approx(2.5e-4)  # the checkpoint's: 1e-3 x 0.25
    learner = SimpleNamespace(
        opts=SimpleNamespace(lr=4e-3, value_lr=1e-5, weight_decay=0.01), optimizer=opt, scheduler=sched
    )
    assert apply_settings(learner) == ["--ppo.lr 0.001 -> 0.004", "--ppo.weight-decay 0 -> 0.01"]
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3)  # 4e-3 x 0.25, the schedule's step kept
    assert opt.param_groups[0]["weight_decay"] == 0.01
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-4)  # and the schedule goes on from it
    assert apply_settings(learner) == []  # nothing changed: nothing said


def test_a_changed_kl_beta_restarts_its_schedule_or_is_refused_when_adaptive() -> None:
    fixed = KLController(0.05, steps=3)
    assert apply_kl_beta(fixed, 0.1) == ["--ppo.kl-beta 0.05 -> 0.1"] and fixed.beta == 0.1
    anneal = KLController(0.2, anneal_to=0.06, anneal_steps=4)
    for _ in range(2):
        anneal.update(0.0, 1)
    apply_kl_beta(anneal, 0.3)
    assert anneal.beta == pytest.approx(0.3 + (0.06 - 0.3) * 0.5)  # its anneal from 0.3, at step 2 of 4
    adaptive = KLController(0.05, target=0.1)
    with pytest.raises(ValueError, match="--ppo.kl-beta 0.2 differs.*adaptive"):
        apply_kl_beta(adaptive, 0.2)
    assert apply_kl_beta(adaptive, 0.05) == []


# ---- a server's grammar: scored under its whitelist ---------------------------------------------------------


def test_a_reply_decoded_under_a_server_grammar_is_scored_under_its_whitelist() -> None:
    from ragteam.llm.constraint import Constraint
    from ragteam.llm.local import LocalChatModel
    from ragteam.train.constrained import stop_ids, text_ids

    tiny = LocalChatModel("tiny", device="cpu")
    constraint = Constraint.from_regex("Document[0-4](,Document[0-4])*", "selector")
    reply = tiny._text_ids("Document1,Document3", literal=True)
    record = {"name": "selector", "regex": constraint.regex, "by": "vllm", "enforced": True}
    grammar = Sample("e", 0, "selector", [1, 2], reply, 0.0, constraint=record)
    free = Sample("e", 1, "generator", [1, 2], reply, 0.0)
    unread = Sample("e", 2, "x", [1, 2], reply, 0.0, constraint={**record, "regex": "a.b"})
    masked = Sample("e", 3, "selector", [1, 2], reply, 0.0, allowed_ids=[5], constraint=record)
    stops = stop_ids(tiny.tokenizer, tiny.model)
    assert mask_structured([grammar, free, unread, masked], partial(text_ids, tiny.tokenizer), stops) == 1
    assert grammar.allowed_ids == sorted(set(tiny.allowed_ids(constraint)) | set(reply))  # the decoder's mask
    assert free.allowed_ids is None and unread.allowed_ids is None and masked.allowed_ids == [5]


# ---- one reward scale per run -------------------------------------------------------------------------------


def test_a_process_reward_run_refuses_an_act_it_cannot_score() -> None:
    from ragteam.train.ppo.tree_scores import score_acts

    question = Question("q", "?", ["a"])
    nodes = [
        Node(0, None, "policy", role="actor", messages=[{"role": "user", "content": "?"}]),
        Node(1, 0, "policy", role="actor"),  # no prompt recorded
        Node(2, 1, "answer", answer="a", rewards={"f1": 1.0}),
    ]
    episode = Episode("q", "test", question, nodes)
    assert unscorable([episode]) == ["q/1 (actor)"]
    with pytest.raises(ValueError, match=r"1 acts have no prompt recorded \(q/1 \(actor\)\).*two scales"):
        score_acts(SimpleNamespace(prm=None), [episode])
    assert unscorable([dataclasses.replace(episode, nodes=nodes[:1] + nodes[2:])]) == []
