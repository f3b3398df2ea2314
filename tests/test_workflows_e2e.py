"""C-3PO, MMOA-RAG and the RAG-Gym agents end to end on the real engine: the tiny local model plays the policy
and the LLM server, BM25 searches the pooled paragraphs of real HotpotQA records. The tiny model writes noise,
so every role's output is malformed: these runs exercise the documented fallbacks on real parts, the recorded
trees, and replay into branches."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TEST_DEVICE, hotpot_head

from ragteam.data.questions import read_questions
from ragteam.llm.local import LocalChatModel
from ragteam.retrieval.config import RetrieverConfig
from ragteam.retrieval.factory import open_retriever
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.tree import Episode
from ragteam.workflows.registry import WORKFLOWS, build_workflow, workflow_options

N_QUESTIONS = 2


@pytest.fixture(scope="module")
def parts(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """(questions, tiny model, BM25 retriever over the pooled paragraphs of the first records)."""
    subset = hotpot_head(shared_data, tmp_path_factory.mktemp("data"), 6)
    questions = read_questions(subset).questions[:N_QUESTIONS]
    retriever = open_retriever(RetrieverConfig(kind="bm25"), data=str(subset))
    tiny = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)
    return questions, tiny, retriever


def run(
    parts, name: str, rollout: RolloutConfig | None = None, n: int = N_QUESTIONS, **wf
) -> tuple[list[Episode], Engine]:
    questions, tiny, retriever = parts
    engine = Engine(tiny, tiny, retriever, rollout or RolloutConfig(max_tokens=6, llm_max_tokens=4))
    report = engine.run(build_workflow(name, workflow_options(name)(topk=2, **wf)), questions[:n])
    assert report.failed == 0, report.failures
    return report.episodes, engine


def leaf_of(ep: Episode):
    (leaf,) = ep.leaves()
    assert leaf.status == "ok"
    return leaf


def test_c3po_end_to_end(parts):
    questions = parts[0]
    episodes, _ = run(parts, "c3po")
    for q, ep in zip(questions, episodes):
        leaf = leaf_of(ep)
        router = ep.policy_nodes()[0]
        assert router.role == "router" and not router.action.valid  # noise -> single pass with the question
        assert leaf.info["strategy"] == "retrieval"
        (search,) = [n for n in ep.nodes if n.kind == "retrieve"]
        assert search.queries == [q.question]
        assert search.hits[0][0].doc.id in {d.id for d in q.context}  # BM25 finds the question's paragraphs
        assert [n.role for n in ep.policy_nodes()] == ["router", "filter"]
        assert leaf.info["invalid"] == sum(not n.action.valid for n in ep.policy_nodes())
        assert all(n.completion.logprobs for n in ep.policy_nodes())
        assert [n.role for n in ep.nodes if n.kind == "llm"] == ["answer"]
    # the planning strategy, forced, with a real loop
    episodes, _ = run(parts, "c3po", n=1, strategy="planning", max_rounds=2)
    for ep in episodes:
        leaf = leaf_of(ep)
        assert [n.role for n in ep.nodes if n.kind == "llm"] == ["roadmap", "answer"]
        assert leaf.info["strategy"] == "planning" and 1 <= leaf.info["rounds"] <= 2


def test_mmoa_end_to_end(parts):
    episodes, engine = run(parts, "mmoa", candidates=2)
    assert engine.calls["llm_requests"] == 0  # the generator is the policy
    for ep in episodes:
        leaf = leaf_of(ep)
        assert [n.role for n in ep.policy_nodes()] == ["rewriter", "selector", "generator"]
        # filled from the question's hits if the rewrite finds few
        assert len(leaf.info["candidate_ids"]) == 2
        selector = ep.policy_nodes()[1]
        assert selector.action.penalty == -1.0  # noise is not `Document0,Document4,...`
        assert leaf.info["penalties"]["selector"] == -1.0


def test_gym_agents_end_to_end(parts):
    for name in (w for w in WORKFLOWS if w.startswith("gym:")):
        episodes, _ = run(parts, name, n=1, max_steps=3)
        for ep in episodes:
            leaf = leaf_of(ep)
            acts = ep.policy_nodes()
            assert 1 <= len(acts) <= 3 and all(n.role == "actor" for n in acts)
            assert leaf.info["steps"] == len(acts) and leaf.info["agent"] == name[len("gym:") :]


def test_branching_replays_every_system(parts):
    """Forks re-run the workflow on the recorded prefix: it must ask for exactly the same things."""
    rollout = RolloutConfig(max_tokens=6, llm_max_tokens=4, temperature=1.0, forks=[2, 1], seed=3)
    for name, wf in (("c3po", {}), ("mmoa", {"candidates": 2}), ("gym:re2search", {"max_steps": 2})):
        episodes, _ = run(parts, name, rollout=rollout, n=1, **wf)
        for ep in episodes:
            assert ep.status == "ok" and len(ep.leaves()) == 2
            assert all(leaf.status == "ok" for leaf in ep.leaves())
