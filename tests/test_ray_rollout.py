"""Rollouts over Ray actors (`--rollout.workers N`, rollout/distributed.py) on a small local Ray (2 CPUs).

The claim under test: with the same seeds, N actors record the same episode trees as one process (the
same tokens, answers and rewards; log-probs to float round-off), in question order, for sampled tree
rollouts, through `ragteam eval`, and inside PPO, whose actors must get the trained weights before
every rollout.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest
import ray
import torch
from conftest import hotpot_head

from ragteam.assemble.build import build_team
from ragteam.assemble.config import TeamConfig
from ragteam.metrics.answer import score_answer
from ragteam.rollout.distributed import RayEngine, RayParts, shares, spread
from ragteam.rollout.tree import Episode
from ragteam.workflows.c3po.settings import TREE as C3PO_TREE

pytestmark = pytest.mark.slow  # rollouts on a local Ray: actors in processes of their own


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray for this module: 2 CPUs (one per actor), a small object store, no dashboard. The actors
    cannot import this test file, so its functions (builders, reward) travel by value."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024**2, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def hotpot6(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("ray-data"), 6)


def tree(ep: Episode) -> list[tuple]:
    """Everything an episode recorded except timings and log-prob round-off."""
    return [
        (
            n.id,
            n.parent,
            n.kind,
            n.role,
            n.completion.prompt_ids if n.completion else None,
            n.completion.completion_ids if n.completion else None,
            n.completion.text if n.completion else None,
            [[h.doc.id for h in ranked] for ranked in n.hits] if n.hits else None,
            n.answer,
            n.status,
            n.rewards,
        )
        for n in ep.nodes
    ]


def assert_same_episodes(one: list[Episode], many: list[Episode]) -> None:
    assert [e.id for e in one] == [e.id for e in many]
    for a, b in zip(one, many, strict=True):
        assert tree(a) == tree(b)
        for x, y in zip(a.nodes, b.nodes, strict=True):
            if x.completion is not None and x.completion.logprobs is not None:
                assert torch.allclose(
                    torch.tensor(x.completion.logprobs), torch.tensor(y.completion.logprobs), atol=1e-5
                )


def test_shares_are_contiguous_and_cover_every_question() -> None:
    assert [list(r) for r in shares(7, 3)] == [[0, 1], [2, 3], [4, 5, 6]]
    assert [list(r) for r in shares(1, 2)] == [[], [0]]
    with pytest.raises(ValueError, match="parts"):
        shares(3, 0)


def test_two_actors_record_the_trees_of_one_process(local_ray, hotpot6: Path) -> None:
    """C-3PO's sampled tree rollout (forced strategies, 2-way forks, temperature 1) on 6 questions."""
    from ragteam.data.questions import read_questions

    questions = read_questions(str(hotpot6)).questions
    rollout = dict(C3PO_TREE, temperature=1.0, seed=5, max_tokens=8, llm_max_tokens=4)
    cfg = TeamConfig.model_validate(
        dict(
            workflow="c3po",
            policy={"model": "tiny", "device": "cpu"},
            llm={"model": "tiny", "device": "cpu"},
            retriever={"kind": "bm25"},
            topk=2,
            rollout=rollout,
        )
    )
    reward = _reward
    one = build_team(cfg, data=str(hotpot6))
    expected = one.engine.run(one.workflow, questions, reward=reward)

    two = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"workers": 2})})
    parts = spread(partial(build_team, two, data=str(hotpot6)), two.rollout)
    assert isinstance(parts, RayParts) and isinstance(parts.engine, RayEngine)
    try:
        assert len({info["pid"] for info in parts.engine.info}) == 2  # two processes
        streamed: list[str] = []
        report = parts.engine.run(
            parts.workflow, questions, reward=reward, on_episode=lambda e: streamed.append(e.id)
        )
    finally:
        parts.engine.close()
    assert sorted(streamed) == sorted(q.id for q in questions)  # each episode streamed once
    assert_same_episodes(expected.episodes, report.episodes)
    assert any(len(ep.leaves()) > 3 for ep in report.episodes)  # really trees: forks below the router
    assert report.failed == expected.failed
    for key in ("policy_samples", "policy_requests", "llm_requests", "retrieve_queries"):
        assert parts.engine.calls[key] == one.engine.calls[key]  # summed over the actors


def _reward(question, answer: str) -> dict[str, float]:
    return score_answer(answer, question)


def test_eval_with_two_workers_writes_what_one_process_writes(
    local_ray, hotpot6: Path, tmp_path: Path
) -> None:
    from ragteam.cli.main import main

    common = [
        "eval", "--data", str(hotpot6), "--workflow", "c3po", "--limit", "4", "--policy.model", "tiny",
        "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2", "--rollout.max-tokens", "8",
        "--rollout.llm-max-tokens", "4", "--rollout.temperature", "1", "--rollout.seed", "9", "--no-progress",
    ]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--out", str(tmp_path / "two"), "--rollout.workers", "2"]) == 0
    one = (tmp_path / "one" / "predictions.jsonl").read_text().splitlines()
    two = (tmp_path / "two" / "predictions.jsonl").read_text().splitlines()
    assert len(one) == 4 and one == two
    from ragteam.rollout.traces import load_trace

    a, b = load_trace(tmp_path / "one" / "episodes.jsonl"), load_trace(tmp_path / "two" / "episodes.jsonl")
    assert_same_episodes([a[k] for k in sorted(a)], [b[k] for k in sorted(b)])
    metrics = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert metrics["retriever"] is not None and metrics["engine_calls"]["policy_samples"] > 0
    # the worker count does not change answers, so a run may resume with another one
    assert main([*common, "--out", str(tmp_path / "two"), "--limit", "5", "--rollout.workers", "1"]) == 0


def test_collect_with_two_workers_keeps_the_rows_of_one_process(
    local_ray, hotpot6: Path, tmp_path: Path
) -> None:
    """`collect sft` samples C-3PO's tree at temperature 1: the same trees, hence the same SFT rows."""
    from ragteam.cli.main import main

    common = [
        "collect", "sft", "--data", str(hotpot6), "--workflow", "c3po", "--accept", "f1>=0", "--limit", "3",
        "--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2",
        "--rollout.max-tokens", "8", "--rollout.llm-max-tokens", "4", "--no-progress",
    ]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--out", str(tmp_path / "two"), "--rollout.workers", "2"]) == 0
    one = (tmp_path / "one" / "sft.jsonl").read_text().splitlines()
    assert one and one == (tmp_path / "two" / "sft.jsonl").read_text().splitlines()


def test_ppo_workers_get_the_trained_weights(local_ray, hotpot_small: Path, tmp_path: Path) -> None:
    """Two PPO iterations with rollouts on 2 actors = in one process: the same losses and final weights, and
    in iteration 2 the actors' log-probs are the trainer's (they hold the weights of update 1)."""
    from safetensors.torch import load_file
    from test_ppo import tiny_cfg

    from ragteam.train import ppo

    def cfg(out: Path, workers: int):
        c = tiny_cfg(hotpot_small, out, iterations=2)
        c = c.model_copy(update={"rollout": c.rollout.model_copy(update={"workers": workers})})
        c.ppo.lr = c.ppo.value_lr = 1e-3  # set explicitly: the recipe keeps its other values
        return c

    one = ppo.train_ppo(cfg(tmp_path / "one", 1))
    two = ppo.train_ppo(cfg(tmp_path / "two", 2))
    rows1 = [json.loads(x) for x in (one / "log.jsonl").read_text().splitlines()]
    rows2 = [json.loads(x) for x in (two / "log.jsonl").read_text().splitlines()]
    assert [r["train"]["policy_loss"] for r in rows2] == pytest.approx(
        [r["train"]["policy_loss"] for r in rows1], abs=1e-6
    )
    assert rows2[1]["kl_mean"] > 1e-3  # the update moved the policy away from the reference...
    assert rows2[1]["logprob_drift"] < 1e-4  # ...and the workers sampled with the moved weights
    a, b = load_file(str(one / "model.safetensors")), load_file(str(two / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_worker_that_cannot_build_fails_before_any_run(local_ray) -> None:
    from ragteam.rollout.config import RolloutConfig

    with pytest.raises(RuntimeError, match="failed to build its engine: FileNotFoundError: no corpus here"):
        RayEngine(partial(_broken_build, "no corpus here"), RolloutConfig(), workers=2)


def _broken_build(message: str):
    raise FileNotFoundError(message)
