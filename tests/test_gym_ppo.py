"""RAG-Gym's PPO (section 2.2.2, `--recipe gym`): every act's reward is the process reward model's score
r(s, a) of that act, not the broadcast outcome; the outcome recipe stays as `gym-outcome`.

The tiny model plays the Re2Search actor (and writes its summaries) over BM25 on HotpotQA paragraphs; the
process reward model is a one-output classifier built in code from the tiny model (a random score head:
what matters here is that each act's reward is exactly its score).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ragteam.train.ppo_config import PPOConfig

TOKENS = 8192


@pytest.fixture(scope="module")
def tiny_prm(tmp_path_factory) -> Path:
    """A PRM folder as `ragteam train prm` writes one: the tiny LM's body with a seeded score head."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from ragteam.llm.tiny import tiny_model_dir

    out = tmp_path_factory.mktemp("prm") / "prm"
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir()), num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir()))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def gym_cfg(data: Path, out: Path, **over) -> PPOConfig:
    values = dict(
        recipe="gym",
        data=str(data),
        out=str(out),
        policy={"model": "tiny"},
        limit=6,
        iterations=1,
        questions_per_iteration=2,
        topk=2,
        max_steps=2,
        llm={"model": "tiny"},
        retriever={"kind": "bm25"},
        rollout={"max_tokens": 16, "llm_max_tokens": 8},
        progress=False,
        tensorboard=False,
        ppo={"max_sample_tokens": TOKENS, "micro_tokens": TOKENS, "minibatch_tokens": 2 * TOKENS},
    )
    values.update(over)
    return PPOConfig.model_validate(values)


def test_gym_recipe_needs_a_prm_and_gym_outcome_is_the_outcome_recipe(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"--prm\.model DIR.*gym-outcome"):  # pydantic's, naming the flag
        PPOConfig(recipe="gym", data="q", out=str(tmp_path))
    gym = PPOConfig(recipe="gym", data="q", out=str(tmp_path), prm={"model": "prm"})
    assert (gym.ppo.process_reward, gym.ppo.credit, gym.workflow) == ("prm", "process", "gym:re2search")
    outcome = PPOConfig(recipe="gym-outcome", data="q", out=str(tmp_path))
    assert (outcome.ppo.process_reward, outcome.ppo.credit) == ("none", "outcome")
    assert (outcome.workflow, outcome.max_steps, outcome.ppo.lr) == (gym.workflow, 10, gym.ppo.lr)
    mixed = {"recipe": "gym", "data": "q", "out": "o", "prm": {"model": "p"}, "ppo": {"credit": "outcome"}}
    with pytest.raises(ValueError, match="only --ppo.credit process reads"):
        PPOConfig.model_validate(mixed)


def test_gym_recipe_rewards_every_act_with_the_prms_score(
    hotpot_small: Path, tiny_prm: Path, tmp_path: Path
) -> None:
    """One iteration of the gym recipe: the acts are scored in one batched PRM call, and every trained
    act's reward (and so the update's) is the PRM's score of its prompt and reply, as scored directly."""
    from ragteam.llm.prm import ProcessRewardModel
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    cfg = gym_cfg(hotpot_small, tmp_path / "run", prm={"model": str(tiny_prm), "device": "cpu"})
    run = ppo.build(cfg)
    prm = ProcessRewardModel.from_config(cfg.prm)
    calls: list[int] = []
    score = prm.score
    prm.score = lambda items: calls.append(len(items)) or score(items)  # type: ignore[method-assign]
    run.prm = prm

    episodes = phases.play(run, 0)
    acts = [n for ep in episodes for n in ep.policy_nodes()]
    assert len(episodes) == 2 and acts
    samples, skipped = phases.credit_samples(run, episodes)
    assert calls == [len(acts)]  # one batched call per iteration, every act of every episode
    assert not skipped and len(samples) == len(acts)

    direct = ProcessRewardModel(tiny_prm, device="cpu")  # a fresh copy, one act at a time
    nodes = {(ep.id, n.id): n for ep in episodes for n in ep.policy_nodes()}
    by_node = {(s.episode, s.node): s for s in samples}
    for key, node in nodes.items():
        (expected,) = direct.score([(node.messages, node.text)])
        assert node.score == pytest.approx(expected, abs=1e-4)
        assert by_node[key].reward == pytest.approx(expected, abs=1e-4)
    f1 = {ep.id: ep.leaves()[0].rewards["f1"] for ep in episodes}
    assert any(s.reward != f1[s.episode] for s in samples)  # not the broadcast outcome

    trained, ids = phases.trained_samples(run, samples, skipped)
    exp = run.learner.score(trained, ids)
    assert [s.reward for s in exp.samples] == [by_node[(s.episode, s.node)].reward for s in trained]
    meters = run.learner.update(exp, 0)
    assert "actor" in meters.means()[1]
