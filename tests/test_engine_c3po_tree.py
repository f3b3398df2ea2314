"""C-3PO's tree-structured rollout on real parts: the tiny model as proxy and LLM, BM25 over HotpotQA.

The paper's schedule (section 5.1, Table 7): the router expands its three strategies (forced prefixes) at t = 0,
then K(t)=2 for t <= 4 and 1 deeper, depth limit 13, with t C-3PO's depth (`workflows/c3po/tree.py`: each act, LLM
call and the answer is a step). Checks the tree's shape, that the recorded depths, the fork schedule and the
depth statistic read the same t, that no shared prefix was generated twice, and that every recorded log-prob
equals a fresh forward pass. tests/test_c3po_depth.py pins the definition on a scripted proxy.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import TEST_DEVICE
from test_engine_integration import hotpot_questions, retriever_for

from ragteam.llm.local import LocalChatModel
from ragteam.metrics.answer import score_answer
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.stats import episodes as stats
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.c3po.settings import TREE as C3PO_TREE
from ragteam.workflows.c3po.tree import DEPTH as C3PO_DEPTH
from ragteam.workflows.config import WorkflowConfig

PREFIXES = ["[No Retrieval]", "[Retrieval]", "[Planning]"]


@pytest.fixture(scope="module")
def tree_run(shared_data, tmp_path_factory):
    policy = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, name="proxy")
    llm = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, name="llm")
    qs = hotpot_questions(shared_data, 2)
    retriever = retriever_for(qs, shared_data, tmp_path_factory.mktemp("c3po-tree"))
    cfg = RolloutConfig(**C3PO_TREE, temperature=1.0, seed=11, max_tokens=8, llm_max_tokens=4)
    engine = Engine(policy, llm, retriever, cfg)
    report = engine.run(C3PO(WorkflowConfig(topk=3)), qs, reward=lambda q, a: score_answer(a, q))
    return policy, engine, report


def test_router_expands_the_three_strategies_with_forced_prefixes(tree_run):
    policy, _, report = tree_run
    for ep in report.episodes:
        roots = [n for n in ep.policy_nodes() if n.parent is None]
        assert [n.role for n in roots] == ["router"] * 3
        assert [n.sampling["prefix"] for n in roots] == PREFIXES
        for node, prefix in zip(roots, PREFIXES, strict=True):
            c = node.completion
            assert c.text.startswith(prefix) and c.forced_tokens == len(policy.prefix_ids(prefix))
            assert c.completion_ids[: c.forced_tokens] == policy.prefix_ids(prefix)
        # the closed strategies are exactly the prefix and end-of-turn; [Retrieval] sampled its query
        assert roots[0].completion.completion_ids == policy.prefix_ids(PREFIXES[0]) + [policy.eot_id]
        assert roots[2].completion.completion_ids == policy.prefix_ids(PREFIXES[2]) + [policy.eot_id]
        assert [n.action.kind for n in roots] == ["no_retrieval", "retrieval", "planning"]
        strategies = {leaf.info.get("strategy") for leaf in ep.leaves() if leaf.status == "ok"}
        assert strategies == {"no_retrieval", "retrieval", "planning"}
        assert ep.status == "ok"


def test_two_way_forks_to_depth_four_and_single_paths_deeper(tree_run):
    _, _, report = tree_run
    deepest = 0
    for ep in report.episodes:
        for node in ep.nodes:  # the recorded depth is C-3PO's t
            assert node.depth == C3PO_DEPTH.of(ep, node.id)
        groups: dict[int | None, list] = defaultdict(list)  # one act's samples share their parent node
        for node in ep.policy_nodes():
            groups[node.parent].append(node)
        for parent, nodes in groups.items():
            t = 0 if parent is None else ep.nodes[parent].depth  # the depth of the state the act is taken in
            assert {n.depth for n in nodes} == {t + 1}
            expected = 3 if t == 0 else (2 if 1 <= t <= 4 else 1)
            assert len(nodes) == expected, (ep.id, t, [n.role for n in nodes])
            deepest = max(deepest, t)
        assert max(n.depth for n in ep.nodes) <= 13
        # single pass forks its filter (t = 1), planning its decider (t = 2) and filter (t = 3)
        assert len(ep.leaves()) >= 1 + 2 + 2
        # the depth statistic is the primary leaf's t
        assert stats.tree_depth(ep) == ep.leaves()[0].depth
        for leaf in ep.leaves():
            strategy = leaf.info.get("strategy")
            if strategy == "no_retrieval":
                assert leaf.depth == 3
            elif strategy == "retrieval":
                assert leaf.depth == 4
            elif strategy == "planning" and leaf.info.get("stop") == "llm":
                assert leaf.depth == 2 * leaf.info["rounds"] + 5
    assert deepest >= 4


def test_each_sample_is_generated_once_and_recorded_logprobs_match_a_forward_pass(tree_run):
    policy, engine, report = tree_run
    nodes = [n for ep in report.episodes for n in ep.policy_nodes()]
    # one sample per policy node: forks replay the shared prefix instead of generating it again
    assert engine.calls["policy_samples"] == len(nodes)
    acts = sum(
        len({n.parent for n in ep.policy_nodes() if n.parent is not None}) + 3 for ep in report.episodes
    )
    # each act's prompt is prefilled once for its k samples (identical prompts of one batch share theirs)
    assert policy.stats["prefill_rows"] <= acts < len(nodes)
    for node in nodes:
        c = node.completion
        assert len(c.logprobs) == len(c.completion_ids) == c.completion_tokens
        assert node.sampling["temperature"] == 1.0 and node.sampling["seed"] is not None
    again = policy.logprobs(
        [n.completion.prompt_ids for n in nodes], [n.completion.completion_ids for n in nodes]
    )
    for node, lp in zip(nodes, again, strict=True):
        assert lp == pytest.approx(node.completion.logprobs, abs=1e-4)


def test_the_depth_limit_stops_at_the_same_t(tree_run, shared_data):
    """At max_depth 6 an act runs only if its node (t + 1), the answer call and the answer fit: no act below
    t = 4; a planning path stopped by the limit answers at exactly t = 6."""
    _, engine, _ = tree_run
    cfg = engine.config.model_copy(update={"max_depth": 6})
    qs = hotpot_questions(shared_data, 2)
    report = engine.run(C3PO(WorkflowConfig(topk=3)), qs, reward=lambda q, a: score_answer(a, q), config=cfg)
    stopped = 0
    for ep in report.episodes:
        assert max(n.depth for n in ep.nodes) <= 6
        assert max(n.depth for n in ep.policy_nodes()) == 4
        assert stats.tree_depth(ep) == ep.leaves()[0].depth <= 6
        for leaf in ep.leaves():
            if leaf.info.get("stop") == "budget":
                assert leaf.depth == 6
                stopped += 1
    assert stopped > 0
