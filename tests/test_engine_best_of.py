"""Keep-one-of-N on real parts: a RAG-Gym agent with the tiny model, BM25 over HotpotQA, and each scorer that
needs no trained weights (Monte Carlo rollouts, the LLM ranking candidates)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import TEST_DEVICE
from test_engine_integration import hotpot_questions, retriever_for

from ragteam.llm.local import LocalChatModel
from ragteam.metrics.answer import score_answer
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.select import LLMRankScorer, RolloutScorer, build_scorer
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import GymAgent


@pytest.fixture(scope="module")
def parts(shared_data, tmp_path_factory):
    tiny = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)
    qs = hotpot_questions(shared_data, 2)
    return tiny, qs, retriever_for(qs, shared_data, tmp_path_factory.mktemp("best-of"))


def reward(q, a):
    return score_answer(a, q)


def check_kept_one_of_n(ep, n: int) -> int:
    """Every actor act recorded n scored siblings, the best one chosen and the only one continued."""
    groups = defaultdict(list)
    for node in ep.policy_nodes():
        groups[node.parent].append(node)
    for nodes in groups.values():
        assert len(nodes) == n and all(x.score is not None for x in nodes)
        chosen = [x for x in nodes if x.chosen]
        assert len(chosen) == 1 and chosen[0].score == max(x.score for x in nodes)
        assert all(ep.children(x.id) == [] for x in nodes if not x.chosen)
        assert ep.children(chosen[0].id)
    return len(groups)


def test_rollout_scorer_scores_candidates_by_their_rollouts_mean_reward(parts):
    tiny, qs, retriever = parts
    cfg = RolloutConfig(
        temperature=1.0, seed=3, max_tokens=12, best_of={"n": 3, "scorer": "rollout", "rollouts": 2}
    )
    scorer = build_scorer(cfg, tiny, tiny, retriever)
    assert isinstance(scorer, RolloutScorer)
    engine = Engine(tiny, tiny, retriever, cfg, scorer=scorer)
    report = engine.run(GymAgent(WorkflowConfig(topk=2, max_steps=2), agent="react"), qs, reward=reward)
    acts = sum(check_kept_one_of_n(ep, 3) for ep in report.episodes)
    assert acts >= 2 and engine.calls["select_sets"] == acts
    # the probe engine ran 3 candidates x 2 rollouts per act, none of them recorded in the tree
    assert scorer.probes == acts * 3 * 2
    assert all(ep.status == "ok" for ep in report.episodes)
    for ep in report.episodes:
        for node in ep.policy_nodes():
            assert 0.0 <= node.score <= 1.0  # a mean of F1 rewards


def test_llm_rank_scorer_with_the_llm_server(parts):
    tiny, qs, retriever = parts
    cfg = RolloutConfig(temperature=1.0, seed=4, max_tokens=12, best_of={"n": 2, "scorer": "llm"})
    scorer = build_scorer(cfg, tiny, tiny, retriever)
    assert isinstance(scorer, LLMRankScorer)
    engine = Engine(tiny, tiny, retriever, cfg, scorer=scorer)
    report = engine.run(GymAgent(WorkflowConfig(topk=2, max_steps=2), agent="react"), qs[:1], reward=reward)
    assert check_kept_one_of_n(report.episodes[0], 2) >= 1


def test_critic_scorer_needs_a_critic():
    with pytest.raises(ValueError, match="critic"):
        build_scorer(RolloutConfig(best_of={"n": 2}), None, None, None)
