"""Learning-signal checks, CleanRL style: PPO must raise a reward the policy can obviously raise.

The task: one role, one short reply per question, reward 1 when the reply's first token is one of half the
vocabulary (an even token id), else 0. The untrained tiny model starts near 0.5; any estimator wired right
drives it to near 1 in a few updates, and one wired wrong (a sign flipped, a group key mixed up, advantages
that never reach the loss, log-probs at the wrong temperature) does not. The loop is the trainer's own
phases (`phases.play`, `credit_samples`, `Learner.score`, `Learner.update`) on the real engine and the
real tiny model.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch

from ragteam.credit import CREDITS
from ragteam.protocol import Act, Answer
from ragteam.rollout.tree import Episode
from ragteam.train.advantages import ESTIMATORS, Estimator, get_advantage
from ragteam.train.ppo_config import PPOConfig
from ragteam.types import Action, Question

pytestmark = pytest.mark.slow  # PPO trained for many iterations, once per estimator

ITERATIONS = 12  # rollouts (each followed by one update of 2 epochs x ~4 minibatches)


def even_first_token(episode: Episode, reward: Any) -> dict[int, float]:
    """1 for an act whose first completion token has an even id, else 0 (the reward is the act's own). The
    act's answer leaf gets the same reward under the metric's name, which is what tree_grpo reads (each
    leaf trajectory is one act here)."""
    out = {}
    for node in episode.policy_nodes():
        ids = node.completion.completion_ids if node.completion is not None else None
        if ids:
            out[node.id] = 1.0 if ids[0] % 2 == 0 else 0.0
            for leaf in episode.children(node.id):
                if leaf.kind == "answer":
                    leaf.rewards[reward] = out[node.id]
    return out


class Say:
    """A one-role workflow: the policy says a word; that is the answer."""

    name = "say"
    roles = ()

    def run(self, question: Question) -> Generator[Any, Any, Answer]:
        acted = yield Act(
            "speaker",
            [{"role": "user", "content": f"Say one word about {question.question[:20]}"}],
            lambda text: Action("say", text),
            max_tokens=3,
        )
        return Answer(acted.text)


def reward_curve(data: Path, out: Path, estimator: str, bf16: bool = False) -> list[float]:
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    est = get_advantage(estimator)
    # tree estimators: 2 trees per question, each act forked in 2 (a tree of two leaf trajectories)
    group, forks = (2, [2]) if est.forks else (4 if est.groups else 1, [])
    cfg = PPOConfig.model_validate(
        {
            "recipe": "mmoa",  # its retriever and models are built and unused: the workflow is replaced
            "data": str(data),
            "out": str(out),
            "policy": {"model": "tiny"},
            "limit": 16,
            "iterations": ITERATIONS,
            "questions_per_iteration": 32 // (group * (forks or [1])[0]),
            "variant": "s-g",
            "retriever": {"kind": "bm25"},
            "progress": False,
            "tensorboard": False,
            "rollout": {"group_size": group, "top_p": 1.0, "forks": forks},
            "ppo": {
                "advantage": estimator,
                "credit": "test_even_first_token",
                "lr": 3e-3,
                "value_lr": 3e-3,
                "shared_value": False,
                "kl_beta": 0.0,
                "kl_anneal_to": None,
                "kl_beta_min": 0.0,
                "lr_schedule": "constant",
                "epochs": 2,
                "minibatch_tokens": 256,
                "micro_tokens": 2048,
                "bf16": bf16,
            },
        }
    )
    run = ppo.start(cfg)
    run.workflow = Say()
    curve = []
    for it in range(ITERATIONS):
        episodes = phases.play(run, it)
        samples, _ = phases.credit_samples(run, episodes)
        curve.append(sum(s.reward for s in samples) / len(samples))
        run.learner.update(run.learner.score(samples), it)
    return curve


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's reward and its broken estimator, registered for the test only."""
    monkeypatch.setitem(CREDITS, "test_even_first_token", even_first_token)
    monkeypatch.setitem(ESTIMATORS, "test_flipped", Estimator(flipped, groups=True))


@pytest.mark.parametrize(
    "estimator", ["gae", "grpo", "drgrpo", "rloo", "reinforce_pp", "tree_grpo", "sibling"]
)
def test_every_estimator_learns_an_obvious_reward(estimator: str, hotpot_small: Path, tmp_path: Path) -> None:
    curve = reward_curve(hotpot_small, tmp_path / "out", estimator)
    start, end = curve[0], sum(curve[-2:]) / 2
    assert 0.2 < start < 0.8, curve  # the untrained policy: about half its first tokens are even
    assert end >= 0.9 and end >= start + 0.25, f"{estimator}: reward per iteration {curve}"


def test_bf16_autocast_learns_the_obvious_reward_too(hotpot_small: Path, tmp_path: Path) -> None:
    """--ppo.bf16 runs every trainer forward under bfloat16 autocast: the check still passes (a cast that broke
    the log-probs' float32 softmax, or the ratio of old to new, would stall it)."""
    curve = reward_curve(hotpot_small, tmp_path / "out", "grpo", bf16=True)
    start, end = curve[0], sum(curve[-2:]) / 2
    assert end >= 0.9 and end >= start + 0.25, f"grpo under bf16: reward per iteration {curve}"


def flipped(*args: Any, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO with its sign flipped: a wiring bug the check must catch."""
    adv, ret = get_advantage("grpo").fn(*args, **kw)
    return -adv, -ret


def test_the_check_catches_a_flipped_advantage(hotpot_small: Path, tmp_path: Path) -> None:
    curve = reward_curve(hotpot_small, tmp_path / "out", "test_flipped")
    assert sum(curve[-2:]) / 2 <= 0.2, f"a flipped sign should unlearn the reward: {curve}"
