"""C-3PO's depth t, one definition (issue 20, item 6): the fork schedule K(t), the depth limit and the depth
statistic all count it, and the tree sizes per strategy are those docs/workflows.md (*Depth t*) tabulates.

t (`workflows/c3po/tree.py`): the question is 0; each proxy act, LLM call and the answer leaf is one step; a search
is not. The proxy here is scripted (the router takes its forced prefix, the filter keeps document 1, the
decider searches `rounds` times with a new subquery, then hands over with [LLM]), so every tree's shape is
known in advance. tests/test_engine_c3po_tree.py rolls the same schedule with the tiny model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from ragteam.depth import ACTS, depth_rule
from ragteam.llm.base import ChatRequest, ChatResult, Completion
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.tree import Episode, Node
from ragteam.stats import episodes as stats
from ragteam.types import Doc, Hit, Question
from ragteam.workflows.c3po import C3PO as C3POWorkflow
from ragteam.workflows.c3po.options import C3POOptions
from ragteam.workflows.c3po.settings import TREE as C3PO_TREE
from ragteam.workflows.c3po.tree import DEPTH as C3PO

MARK = "FACT"


class Scripted:
    """Plays the proxy and the LLM server by the prompt's first words; `rounds` searches per planning path."""

    name = "scripted"

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def reply(self, request: ChatRequest) -> str:
        prompt = request.messages[-1]["content"]
        if request.prefix:  # the router's forced strategy; [Retrieval] goes on with a query
            return request.prefix + (" scripted query" if request.sample_after_prefix else "")
        if prompt.startswith("Your job is to read search results"):
            return "Thought: the first document helps.\nAction: [1]"
        if prompt.startswith("Your job is to decide the next step"):
            done = prompt.count(MARK)  # one kept document per finished round
            if done < self.rounds:
                return f"Thought: fact {done} is missing.\nAction: [Retrieval]subquery {done}"
            return "Thought: enough.\nAction: [LLM]"
        return "Step 1: look it up." if prompt.startswith("Make a plan") else "yes"

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [
            [
                Completion(text=self.reply(r), prompt_tokens=5, completion_tokens=3)
                for _ in range(r.sampling.n)
            ]
            for r in requests
        ]


class Searcher:
    """`k` hits per query, new documents for every new query."""

    name = "searcher"

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return [[Hit(Doc(f"{q}#{i}", "T", f"{MARK} {q} {i}"), 1.0) for i in range(k)] for q in queries]


QUESTION = Question(id="q0", question="Which river is longer?", golden_answers=["yes"])


def roll(rounds: int, max_depth: int = 13, max_rounds: int = 13) -> Episode:
    """One C-3PO tree (the paper's schedule) under the scripted proxy."""
    model = Scripted(rounds)
    cfg = RolloutConfig(**{**C3PO_TREE, "max_depth": max_depth}, temperature=1.0, seed=3)
    engine = Engine(model, model, Searcher(), cfg)
    workflow = C3POWorkflow(C3POOptions(topk=3, max_rounds=max_rounds))
    (ep,) = engine.run(workflow, [QUESTION], reward=lambda q, a: {"f1": float(a == "yes")}).episodes
    assert ep.status == "ok"
    return ep


def strategy(ep: Episode, node: Node) -> str:
    """The strategy of the router act at the root of `node`'s path."""
    root = ep.path(node.id)[0]
    assert root.kind == "policy" and root.role == "router" and root.action is not None
    return root.action.kind


def sizes(ep: Episode) -> dict[str, tuple[int, int, int]]:
    """(leaves, policy nodes, LLM calls) under each forced root strategy."""
    count: Counter = Counter()
    for node in ep.nodes:
        count[strategy(ep, node), node.kind] += 1
    return {
        s: (count[s, "answer"], count[s, "policy"], count[s, "llm"])
        for s in ("no_retrieval", "retrieval", "planning")
    }


def test_the_workflow_declares_c3po_depth_and_others_count_acts():
    assert depth_rule(C3POWorkflow()) is C3PO and depth_rule(object()) is ACTS
    assert (C3PO.step("policy"), C3PO.step("llm"), C3PO.step("answer"), C3PO.step("retrieve")) == (1, 1, 1, 0)
    assert (ACTS.step("policy"), ACTS.step("llm"), ACTS.step("answer")) == (1, 0, 0)
    # an act at t runs when its node (t + 1) and the LLM's answer call and the answer leaf fit
    assert C3PO.act_fits(10, 13) and not C3PO.act_fits(11, 13)
    assert ACTS.act_fits(12, 13) and not ACTS.act_fits(13, 13)
    # the schedule reads t of the act's state: the router at 0 (forced), K(t) = 2 for 1 <= t <= 4, then 1
    cfg = RolloutConfig(**C3PO_TREE)
    assert cfg.fork_at("router", 0).width == 3 and cfg.max_depth == 13
    assert [cfg.fork_at("filter", t).width for t in range(1, 8)] == [2, 2, 2, 2, 1, 1, 1]


# (rounds R) -> sizes: {strategy: (leaves, policy nodes, LLM calls)}, the table of docs/workflows.md
TABLE = {
    0: {"no_retrieval": (1, 1, 1), "retrieval": (2, 3, 2), "planning": (2, 3, 3)},
    1: {"no_retrieval": (1, 1, 1), "retrieval": (2, 3, 2), "planning": (8, 15, 9)},
    2: {"no_retrieval": (1, 1, 1), "retrieval": (2, 3, 2), "planning": (8, 31, 9)},
    3: {"no_retrieval": (1, 1, 1), "retrieval": (2, 3, 2), "planning": (8, 47, 9)},
    4: {"no_retrieval": (1, 1, 1), "retrieval": (2, 3, 2), "planning": (8, 63, 9)},
}


@pytest.mark.parametrize("rounds", sorted(TABLE))
def test_tree_sizes_per_strategy_and_depths_match_the_table(rounds):
    ep = roll(rounds)
    assert sizes(ep) == TABLE[rounds]
    # every planning path has R rounds: 16 R - 1 policy nodes under [Planning] (R >= 1), 2 R + 5 at its leaf
    expected = {"no_retrieval": 3, "retrieval": 4, "planning": 2 * rounds + 5}
    for leaf in ep.leaves():
        assert leaf.status == "ok" and leaf.depth == expected[strategy(ep, leaf)]
        if strategy(ep, leaf) == "planning":
            assert leaf.info["rounds"] == rounds and leaf.info["stop"] == "llm"


@pytest.mark.parametrize("rounds", [1, 4])
def test_forks_the_limit_and_the_histogram_read_the_same_t(rounds):
    ep = roll(rounds)
    for node in ep.nodes:  # the engine's recorded depth is the definition's
        assert node.depth == C3PO.of(ep, node.id)
    # forks: the acts taken at one state (same parent) number K(t), t = that state's depth
    siblings: dict[int | None, list[Node]] = {}
    for node in ep.policy_nodes():
        siblings.setdefault(node.parent, []).append(node)
    t_of = {None: 0, **{n.id: n.depth for n in ep.nodes}}
    for parent, nodes in siblings.items():
        t = t_of[parent]
        assert len(nodes) == (3 if t == 0 else 2 if 1 <= t <= 4 else 1), (t, [n.role for n in nodes])
        assert all(n.depth == t + 1 for n in nodes)
    # the statistic: the primary leaf's depth, the same t
    assert stats.tree_depth(ep) == ep.leaves()[0].depth == C3PO.of(ep, ep.leaves()[0].id)
    hist = stats.workflow_stats([ep])["tree_depth"]["histogram"]
    assert hist == {str(ep.leaves()[0].depth): 1}


def test_the_limit_of_13_gives_four_filtered_rounds_and_a_leaf_at_13():
    ep = roll(rounds=99)  # the decider never hands over: only the depth limit ends planning
    assert sizes(ep)["planning"] == (8, 63, 9)
    for leaf in ep.leaves():
        if strategy(ep, leaf) != "planning":
            continue
        path = ep.path(leaf.id)
        # deciders at t = 3, 5, 7, 9, 11 search; filters at 4 .. 10; the filter after the fifth search would
        # be at 12 and leave no room for the answer call (12) and the answer (13): refused, documents kept
        assert [n.depth for n in path if n.role == "decider"] == [3, 5, 7, 9, 11]
        assert [n.depth for n in path if n.role == "filter"] == [4, 6, 8, 10]
        assert sum(n.kind == "retrieve" for n in path) == 5
        assert leaf.depth == 13 and leaf.info["stop"] == "budget" and max(n.depth for n in path) == 13


@pytest.mark.parametrize("max_depth", range(4, 14))
def test_no_node_passes_the_limit_and_a_stopped_path_ends_exactly_at_it(max_depth):
    ep = roll(rounds=99, max_depth=max_depth)
    assert max(n.depth for n in ep.nodes) <= max_depth
    assert max(n.depth for n in ep.policy_nodes()) <= max_depth - 2  # room for the answer call and the leaf
    stopped = [leaf for leaf in ep.leaves() if leaf.info.get("stop") == "budget"]
    assert stopped and all(leaf.depth == max_depth for leaf in stopped)
    assert stats.workflow_stats([ep])["tree_depth"]["max"] <= max_depth


def test_rounds_stopped_by_max_rounds_end_at_2r_plus_4():
    ep = roll(rounds=99, max_rounds=2)
    leaves = [leaf for leaf in ep.leaves() if strategy(ep, leaf) == "planning"]
    assert {leaf.depth for leaf in leaves} == {8} and {leaf.info["stop"] for leaf in leaves} == {"max_rounds"}
