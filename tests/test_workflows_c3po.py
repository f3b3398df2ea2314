"""C-3PO's control flow (Algorithm 1) driven with scripted role outputs: strategies, the planning loop, the
filter's ids, fallbacks and budgets."""

from __future__ import annotations

import pytest
from scripted import drive, hits_for, prompt_text, question

from ragteam.types import Action
from ragteam.workflows.c3po import C3PO, prompts
from ragteam.workflows.c3po.options import C3POOptions

Q = question()


def c3po(**kw) -> C3PO:
    return C3PO(C3POOptions(**kw))


# ---------------------------------------------------------------------- the three strategies, forced


def test_forced_no_retrieval_asks_only_the_llm():
    t = drive(c3po(strategy="no_retrieval"), Q, llm="Alberto De Martino")
    assert t.acts() == [] and t.searches() == []
    assert [a.purpose for a, _ in t.asks()] == ["answer"]
    assert "Document" not in prompt_text(t.asks()[0][0])
    assert t.answer.text == "Alberto De Martino"
    assert t.answer.info["strategy"] == "no_retrieval" and t.answer.info["forced"] is True


def test_forced_retrieval_lets_the_proxy_write_the_query_after_a_forced_prefix():
    """Table 3's fixed [Retrieval]: the router is asked with its reply forced to start with [Retrieval];
    the query is the proxy's continuation, and the router act is recorded (2 acts with the filter)."""
    t = drive(
        c3po(strategy="retrieval", topk=4),
        Q,
        policy={"router": " director of Holocaust 2000", "filter": "Thought: ok\nAction: [2]"},
    )
    assert t.roles() == ["router", "filter"]
    ((router, acted),) = t.acts("router")
    assert router.prefix == "[Retrieval]" and acted.text == "[Retrieval] director of Holocaust 2000"
    assert acted.action.valid and t.queries() == ["director of Holocaust 2000"]  # not the question
    assert t.searches()[0][0].k == 4
    info = t.answer.info
    assert info["strategy"] == "retrieval" and info["forced"] is True and info["rounds"] == 1
    assert info["acts"] == 2 and info["invalid"] == 0


def test_forced_retrieval_whatever_the_proxy_writes_still_retrieves():
    """A continuation that names another strategy or no query cannot leave the forced strategy: the
    router's parser reads the forced tag first, and a missing query falls back to the question."""
    for reply, query in (("", Q.question), ("[Planning]", "[Planning]"), ("\n\n", Q.question)):
        t = drive(c3po(strategy="retrieval"), Q, policy={"router": reply, "filter": "Action: [1]"})
        assert t.answer.info["strategy"] == "retrieval" and t.queries() == [query], reply
        assert t.roles() == ["router", "filter"]


def test_other_forced_strategies_do_not_ask_the_router():
    for strategy in ("no_retrieval", "planning"):
        t = drive(c3po(strategy=strategy), Q, policy={"decider": "Action: [LLM]"})
        assert "router" not in t.roles() and t.answer.info["strategy"] == strategy


def test_forced_retrieval_stopped_by_the_budget_searches_the_question():
    t = drive(c3po(strategy="retrieval"), Q, max_acts=0)
    assert t.stopped() == ["router", "filter"] and t.queries() == [Q.question]
    assert t.answer.info["strategy"] == "retrieval" and t.answer.info["acts"] == 0


def test_forced_planning_asks_roadmap_then_loops():
    t = drive(
        c3po(strategy="planning"),
        Q,
        policy={
            "decider": [
                "Thought: need the director\nAction: [Retrieval] director of Holocaust 2000",
                "Action: [LLM]",
            ],
            "filter": "Thought: doc 1 names him\nAction: [1]",
        },
        llm=lambda a: "Step 1: find the director" if a.purpose == "roadmap" else "Alberto De Martino",
    )
    assert [a.purpose for a, _ in t.asks()] == ["roadmap", "answer"]
    assert t.roles() == ["decider", "filter", "decider"]
    assert t.queries() == ["director of Holocaust 2000"]
    # the roadmap reaches the decider; the decider's thought reaches the filter as the step's objective
    assert "Step 1: find the director" in prompt_text(t.acts("decider")[0][0])
    assert "need the director" in prompt_text(t.acts("filter")[0][0])
    info = t.answer.info
    assert info["strategy"] == "planning" and info["stop"] == "llm" and info["rounds"] == 1
    assert info["acts"] == 3 and info["invalid"] == 0


# ---------------------------------------------------------------------- the router


@pytest.mark.parametrize(
    "router, strategy, roles",
    [
        ("[No Retrieval]", "no_retrieval", ["router"]),
        ("[Retrieval] Holocaust 2000 film director", "retrieval", ["router", "filter"]),
        ("[Planning]", "planning", ["router", "decider"]),
    ],
)
def test_router_reaches_each_strategy(router, strategy, roles):
    t = drive(c3po(), Q, policy={"router": router, "filter": "Action: [1]", "decider": "Action: [LLM]"})
    assert t.answer.info["strategy"] == strategy and t.answer.info["forced"] is False
    assert t.roles() == roles
    if strategy == "retrieval":
        assert t.queries() == ["Holocaust 2000 film director"]
    if strategy == "no_retrieval":
        assert t.searches() == []


def test_malformed_router_falls_back_to_single_pass_with_the_question():
    t = drive(c3po(), Q, policy={"router": "I think we should look it up", "filter": "Action: [1]"})
    router = t.acts("router")[0][1].action
    assert not router.valid and "single-pass" in router.error
    assert t.answer.info["strategy"] == "retrieval"
    assert t.queries() == [Q.question]
    assert t.answer.info["invalid"] == 1


# ---------------------------------------------------------------------- the filter's ids


def test_filter_ids_map_to_the_numbered_documents():
    t = drive(
        c3po(strategy="retrieval", topk=5), Q, policy={"filter": "Thought: 2 and 4 help\nAction: [2, 4]"}
    )
    shown = t.searches()[0][1][0]
    filter_prompt = prompt_text(t.acts("filter")[0][0])
    assert f"Document 2 (Title: {shown[1].doc.title})" in filter_prompt
    answer_prompt = prompt_text(t.asks("answer")[0][0])
    assert shown[1].doc.title in answer_prompt and shown[3].doc.title in answer_prompt
    assert shown[0].doc.title not in answer_prompt and shown[4].doc.title not in answer_prompt
    assert t.answer.info["doc_ids"] == [shown[1].doc.id, shown[3].doc.id]


def test_malformed_filter_keeps_every_document():
    policy = {"router": " Holocaust 2000 director", "filter": "these all look fine"}
    t = drive(c3po(strategy="retrieval", topk=3), Q, policy=policy)
    shown = [h.doc.id for h in t.searches()[0][1][0]]
    assert t.answer.info["doc_ids"] == shown and t.answer.info["invalid"] == 1  # the filter's only


# ---------------------------------------------------------------------- the planning loop


def test_planning_loop_stops_at_max_rounds():
    n = iter(range(100))
    t = drive(
        c3po(strategy="planning", max_rounds=3, topk=2),
        Q,
        policy={
            "decider": lambda act: f"Thought: more\nAction: [Retrieval] query {next(n)}",
            "filter": "Action: [1, 2]",
        },
    )
    assert t.roles() == ["decider", "filter"] * 3
    assert t.queries() == ["query 0", "query 1", "query 2"]
    info = t.answer.info
    assert info["rounds"] == 3 and info["stop"] == "max_rounds" and info["acts"] == 6
    assert len(info["doc_ids"]) == 6  # two kept per round, accumulated


def test_planning_accumulates_without_repeats_and_notes_empty_searches():
    t = drive(
        c3po(strategy="planning", max_rounds=4, topk=2),
        Q,
        policy={
            "decider": [
                "Action: [Retrieval] same",
                "Action: [Retrieval] same",
                "Action: [Retrieval] other",
                "Action: [LLM]",
            ],
            "filter": ["Action: [1, 2]", "Action: [2]", "Action: []"],
        },
    )
    same = [h.doc.id for h in hits_for("same", 2)]
    assert t.answer.info["doc_ids"] == same  # the second round kept a document already gathered
    last_decider = prompt_text(t.acts("decider")[-1][0])
    assert "Title: other" in last_decider and prompts.NO_RELEVANT in last_decider
    assert "other #1" not in prompt_text(t.asks("answer")[0][0])
    assert t.answer.info["stop"] == "llm" and t.answer.info["rounds"] == 3


def test_malformed_decider_retrieves_the_question_first_then_hands_over():
    t = drive(c3po(strategy="planning", max_rounds=5), Q, policy={"decider": "hmm", "filter": "Action: [1]"})
    assert t.queries() == [Q.question]
    assert t.roles() == ["decider", "filter", "decider"]
    assert t.answer.info["invalid"] == 2 and t.answer.info["stop"] == "llm"


def test_budget_stop_still_answers_with_what_was_gathered():
    t = drive(
        c3po(strategy="planning", max_rounds=5, topk=2),
        Q,
        policy={"decider": "Action: [Retrieval] more", "filter": "Action: [1]"},
        max_acts=3,  # decider, filter, decider -> the filter of round 2 is stopped
    )
    assert t.answer is not None and t.answer.info["stop"] == "budget"
    assert t.asks()[-1][0].purpose == "answer"
    # round 1 kept one; the stopped filter keeps all of round 2 (one new)
    assert len(t.answer.info["doc_ids"]) == 2


def test_multiple_choice_options_reach_the_llm_and_the_answer_is_a_letter():
    mc = question("Which is a film?", golden_answers=["B"], choices={"A": "a river", "B": "Holocaust 2000"})
    t = drive(c3po(strategy="no_retrieval"), mc, llm="B. Holocaust 2000")
    assert "B. Holocaust 2000" in prompt_text(t.asks("answer")[0][0])
    assert t.answer.text == "B"


@pytest.mark.parametrize(
    ("role", "action", "fields"),
    [
        ("router", Action("no_retrieval"), {"question": "q"}),
        ("router", Action("planning"), {"question": "q"}),
        ("router", Action("retrieval", "who wrote hamlet"), {"question": "q"}),
        ("filter", Action("select", [1, 3]), {"n_docs": 3}),
        ("filter", Action("select", []), {"n_docs": 3}),
        ("decider", Action("llm"), {"question": "q", "have_docs": True}),
        ("decider", Action("retrieval", "birth year of the author"), {"question": "q", "have_docs": True}),
    ],
)
def test_each_roles_canonical_reply_parses_back_to_its_action(role, action, fields) -> None:
    """`write` is the parser's inverse: relabeled SFT targets are valid acts that do exactly that."""
    from ragteam.workflows.c3po.parsers import parse_decider, parse_filter, parse_router
    from ragteam.workflows.c3po.workflow import DECIDER, FILTER, ROUTER

    spec = {"router": ROUTER, "filter": FILTER, "decider": DECIDER}[role]
    parse = {"router": parse_router, "filter": parse_filter, "decider": parse_decider}[role]
    parsed = parse(spec.write(action), **fields)
    assert parsed.valid and (parsed.kind, parsed.value) == (action.kind, action.value)


# ---------------------------------------------------------------------- Table 3's fixed [Retrieval], in the engine


class Proxy:
    """A fake policy that honours forced prefixes as the backends do (text = prefix + continuation) and
    writes a query after `[Retrieval]`, `Action: [1]` as a filter; records every request."""

    name = "proxy"

    def __init__(self) -> None:
        self.requests: list = []

    def chat(self, requests):
        from ragteam.llm.base import Completion

        self.requests += requests
        out = []
        for r in requests:
            reply = "" if not r.sample_after_prefix else " the proxy's own query"
            if "Action: [" in r.messages[-1]["content"] and not r.prefix:
                reply = "Thought: ok\nAction: [1]"
            out.append(
                [Completion(r.prefix + reply, forced_tokens=len(r.prefix)) for _ in range(r.sampling.n)]
            )
        return out


def _run_forced(forks: str | list = ()):
    from test_engine import CountingModel, CountingRetriever

    from ragteam.rollout.config import RolloutConfig
    from ragteam.rollout.engine import Engine

    proxy, retriever = Proxy(), CountingRetriever()
    cfg = RolloutConfig(forks=forks, temperature=1.0 if forks else 0.0)
    engine = Engine(proxy, CountingModel("llm"), retriever, cfg)
    (ep,) = engine.run(C3PO(C3POOptions(strategy="retrieval", topk=2)), [Q]).episodes
    return proxy, retriever, ep


def test_forced_retrieval_in_the_engine_records_a_router_node_with_the_proxys_query():
    proxy, retriever, ep = _run_forced()
    router = ep.policy_nodes()[0]
    assert router.role == "router" and router.parent is None
    assert router.sampling["prefix"] == "[Retrieval]" and router.sampling["sample_after_prefix"] is True
    assert router.completion.text == "[Retrieval] the proxy's own query" and router.action.valid
    assert retriever.calls[0][0] == ["the proxy's own query"]  # not the question
    assert proxy.requests[0].prefix == "[Retrieval]"
    (leaf,) = ep.leaves()
    assert leaf.info["strategy"] == "retrieval" and leaf.info["forced"] is True and leaf.info["acts"] == 2
    assert leaf.depth == 4  # C-3PO's t: router, filter, answer call, answer


def test_a_forced_strategy_stays_forced_in_the_c3po_tree():
    """The act's own prefix replaces the tree rule's three forced strategies: one router child."""
    _, _, ep = _run_forced(forks="c3po")
    roots = [n for n in ep.policy_nodes() if n.parent is None]
    assert [n.sampling["prefix"] for n in roots] == ["[Retrieval]"]
    assert {leaf.info["strategy"] for leaf in ep.leaves()} == {"retrieval"}
    assert len(ep.leaves()) == 2  # the filter (taken at t = 1) forks in two, as the tree schedule says


def test_forced_retrieval_with_the_tiny_model_forces_the_prefix_tokens_and_samples_the_rest():
    from conftest import TEST_DEVICE
    from test_engine import CountingRetriever

    from ragteam.llm.local import LocalChatModel
    from ragteam.rollout.config import RolloutConfig
    from ragteam.rollout.engine import Engine

    tiny = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=4)
    retriever = CountingRetriever()
    cfg = RolloutConfig(max_tokens=8, llm_max_tokens=4, temperature=1.0, seed=3)
    (ep,) = (
        Engine(tiny, tiny, retriever, cfg).run(C3PO(C3POOptions(strategy="retrieval", topk=2)), [Q]).episodes
    )
    router = ep.policy_nodes()[0]
    c = router.completion
    prefix_ids = tiny.prefix_ids("[Retrieval]")
    assert router.role == "router" and c.text.startswith("[Retrieval]")
    assert c.forced_tokens == len(prefix_ids) > 0 and c.completion_ids[: c.forced_tokens] == prefix_ids
    assert len(c.completion_ids) > c.forced_tokens and len(c.logprobs) == len(c.completion_ids)  # sampled on
    searched = retriever.calls[0][0][0]
    # the model's continuation is the query, or (unreadable) the parser's fallback to the question
    assert searched == (router.action.value if router.action.valid else Q.question)
    assert router.action.kind == "retrieval" and ep.leaves()[0].info["strategy"] == "retrieval"
