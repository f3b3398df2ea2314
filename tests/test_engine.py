"""Rollout engine logic: batching, branching with replay, budgets, failures, ordering, pickling.

These use counting fakes for the models and the retriever (they test the engine's logic around them);
tests/test_engine_integration.py runs the engine against a real model, index and HTTP server.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence

import pytest

from ragteam.llm.base import ChatRequest, ChatResult, Completion, ModelError
from ragteam.protocol import Act, Answer, AskLLM, BudgetExceeded, EpisodeGenerator, Retrieve, Workflow
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine, RolloutReport
from ragteam.rollout.tree import Episode
from ragteam.types import Action, Doc, Hit, Question
from ragteam.workflows.answers import extract_answer
from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.config import WorkflowConfig

# ---------------------------------------------------------------------- fakes


class CountingModel:
    """A chat model that answers `<last message>/<sample index>` and records every request it was sent."""

    def __init__(self, name: str = "counting", fail_if: str | None = None, tokens: int = 3) -> None:
        self.name = name
        self.fail_if = fail_if
        self.tokens = tokens
        self.requests: list[ChatRequest] = []
        self.batches: list[int] = []
        self.threads: list[str] = []
        self.samples = 0

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.batches.append(len(requests))
        self.threads.append(threading.current_thread().name)
        out: list[ChatResult] = []
        for r in requests:
            self.requests.append(r)
            last = r.messages[-1]["content"]
            if self.fail_if is not None and self.fail_if in last:
                out.append(ModelError("server said 503", where=f"{self.name}-endpoint"))
                continue
            self.samples += r.sampling.n
            out.append(
                [
                    Completion(text=f"{last}/{i}", completion_tokens=self.tokens, prompt_tokens=5)
                    for i in range(r.sampling.n)
                ]
            )
        return out


class CountingRetriever:
    """Returns `k` synthetic hits per query (`<query>#<rank>`); raises for queries containing `raise_on`."""

    name = "counting-retriever"

    def __init__(self, raise_on: str | None = None, error: type[Exception] = ValueError) -> None:
        self.calls: list[tuple[list[str], int]] = []
        self.raise_on = raise_on
        self.error = error
        self.threads: list[str] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.calls.append((list(queries), k))
        self.threads.append(threading.current_thread().name)
        if self.raise_on is not None and any(self.raise_on in q for q in queries):
            raise self.error(f"cannot search {self.raise_on!r}")
        return [
            [Hit(Doc(f"{q}#{i}", "T", f"text {q} {i}"), 1.0 / (i + 1)) for i in range(k)] for q in queries
        ]


def parse_plain(text: str) -> Action:
    return Action("answer", value=text)


def user(text: str) -> list:
    return [{"role": "user", "content": text}]


class TwoActs(Workflow):
    """Two policy acts in a row; the answer is the second act's text."""

    name = "two-acts"

    def run(self, question: Question) -> EpisodeGenerator:
        first = yield Act("first", user(question.question), parse_plain)
        second = yield Act("second", user(first.text), parse_plain)
        return Answer(second.text, info={"first": first.node_id})


class Mixed(Workflow):
    """Retrieve, act (branchable), ask the LLM, act again: every request kind on one path."""

    name = "mixed"

    def run(self, question: Question) -> EpisodeGenerator:
        hits = yield Retrieve([question.question], k=2)
        plan = yield Act("plan", user(f"{question.question} | {hits[0][0].doc.id}"), parse_plain)
        reply = yield AskLLM("roadmap", user(plan.text))
        final = yield Act("final", user(reply), parse_plain)
        return Answer(final.text)


class Forever(Workflow):
    """Acts until stopped; catches BudgetExceeded if `catch`, then lets the LLM answer."""

    name = "forever"

    def __init__(self, catch: bool = False) -> None:
        self.catch = catch

    def run(self, question: Question) -> EpisodeGenerator:
        text = question.question
        try:
            while True:
                out = yield Act("step", user(text), parse_plain)
                text = out.text
        except BudgetExceeded:
            if not self.catch:
                raise
        final = yield AskLLM("answer", user(f"finish: {text}"))
        return Answer(final, info={"caught": True})


class Unsteady(Workflow):
    """Not deterministic: its second act's prompt depends on how often it was started."""

    name = "unsteady"

    def __init__(self) -> None:
        self.starts = 0

    def run(self, question: Question) -> EpisodeGenerator:
        self.starts += 1
        n = self.starts
        yield Act("first", user(question.question), parse_plain)
        out = yield Act("second", user(f"start {n}"), parse_plain)
        return Answer(out.text)


class Raises(Workflow):
    """Raises KeyError for questions containing "boom", after one act."""

    name = "raises"

    def run(self, question: Question) -> EpisodeGenerator:
        out = yield Act("first", user(question.question), parse_plain)
        if "boom" in question.question:
            raise KeyError("missing field")
        return Answer(out.text)


def questions(*texts: str) -> list[Question]:
    return [Question(id=f"q{i}", question=t, golden_answers=[t]) for i, t in enumerate(texts)]


def strip_seconds(ep: Episode) -> dict:
    d = ep.to_dict()
    d["meta"].pop("seconds", None)
    for n in d["nodes"]:
        n.pop("seconds", None)
    return d


# ---------------------------------------------------------------------- branching


def test_branching_two_depths_gives_four_leaves_and_the_prefix_is_generated_once():
    policy = CountingModel()
    engine = Engine(policy, None, None, RolloutConfig(forks=[2, 2]))
    report = engine.run(TwoActs(), questions("root"))
    (ep,) = report.episodes
    leaves = ep.leaves()
    assert len(leaves) == 4 and all(leaf.status == "ok" for leaf in leaves)
    assert sorted(leaf.answer for leaf in leaves) == ["root/0/0", "root/0/1", "root/1/0", "root/1/1"]
    # the model saw the shared prefix once: 1 request with n=2, then 2 requests with n=2 (one per child)
    assert engine.calls["policy_samples"] == 2 + 4 == policy.samples
    assert engine.calls["policy_requests"] == 3 and engine.calls["policy_batches"] == 2
    prompts = [r.messages[-1]["content"] for r in policy.requests]
    assert prompts.count("root") == 1 and sorted(prompts) == ["root", "root/0", "root/1"]
    assert [r.sampling.n for r in policy.requests] == [2, 2, 2]
    # tree shape: 2 first-level policy nodes under the root, each with 2 policy children, each with a leaf
    firsts = ep.children(None)
    assert [n.role for n in firsts] == ["first", "first"] and all(n.depth == 1 for n in firsts)
    for node in firsts:
        kids = ep.children(node.id)
        assert [k.role for k in kids] == ["second", "second"] and all(k.depth == 2 for k in kids)
        assert all(len(ep.children(k.id)) == 1 and ep.children(k.id)[0].kind == "answer" for k in kids)
    # each leaf's info names the first-level node on its own path
    for leaf in leaves:
        assert leaf.info["first"] == ep.path(leaf.id)[0].id


def test_replayed_forks_call_neither_retriever_nor_llm_again():
    policy, llm, retriever = CountingModel("policy"), CountingModel("llm"), CountingRetriever()
    engine = Engine(policy, llm, retriever, RolloutConfig(forks=[3, 1]))
    report = engine.run(Mixed(), questions("alpha"))
    (ep,) = report.episodes
    assert len(ep.leaves()) == 3 and ep.status == "ok"
    assert len(retriever.calls) == 1  # the retrieval before the fork happened once
    assert engine.calls["llm_requests"] == 3 and len(llm.requests) == 3  # one per child, after the fork
    assert engine.calls["policy_samples"] == 3 + 3
    kinds = [n.kind for n in ep.nodes]
    assert kinds.count("retrieve") == 1 and kinds.count("policy") == 6 and kinds.count("llm") == 3
    # each leaf's path: retrieve -> plan -> llm -> final -> answer
    for leaf in ep.leaves():
        assert [n.kind for n in ep.path(leaf.id)] == ["retrieve", "policy", "llm", "policy", "answer"]


def test_no_branching_when_act_pins_one_sample_or_tree_is_full():
    class Pinned(Workflow):
        name = "pinned"

        def run(self, question: Question) -> EpisodeGenerator:
            a = yield Act("first", user(question.question), parse_plain, branch=False)
            b = yield Act("second", user(a.text), parse_plain)
            return Answer(b.text)

    engine = Engine(CountingModel(), None, None, RolloutConfig(forks=[4]))
    (ep,) = engine.run(Pinned(), questions("x")).episodes
    assert len(ep.leaves()) == 4 and engine.calls["policy_samples"] == 1 + 4

    engine = Engine(CountingModel(), None, None, RolloutConfig(forks=[3], max_nodes=3))
    (ep,) = engine.run(TwoActs(), questions("x")).episodes
    # the first act branches (3 nodes), then the tree is full: every later act takes one sample
    assert len(ep.leaves()) == 3 and engine.calls["policy_samples"] == 3 + 3


def test_non_deterministic_workflow_is_a_clear_error_on_the_forked_path_only():
    engine = Engine(CountingModel(), None, None, RolloutConfig(forks=[1, 2]))
    report = engine.run(Unsteady(), questions("a"))
    (ep,) = report.episodes
    # depth-1 forking at the second act: the fork re-runs the workflow, whose first act still matches,
    # but the second act's prompt ("start 2") differs from the recorded one ("start 1"). The first child
    # kept the live generator and answers; the replayed child fails with the reason.
    statuses = sorted(leaf.status for leaf in ep.leaves())
    assert ep.status == "partial" and statuses == ["failed", "ok"]
    (failed,) = [leaf for leaf in ep.leaves() if leaf.status == "failed"]
    assert "not deterministic" in failed.error and "start 1" in failed.error
    assert report.failed == 0 and report.failed_paths == 1


# ---------------------------------------------------------------------- batching and scheduling


def test_requests_of_all_episodes_are_batched_per_tick_and_episodes_stay_in_order():
    policy = CountingModel()
    engine = Engine(policy, None, None, RolloutConfig(max_concurrent=3))
    qs = questions(*[f"q{i}" for i in range(7)])
    seen: list[str] = []
    report = engine.run(TwoActs(), qs, on_episode=lambda ep: seen.append(ep.id))
    assert [ep.id for ep in report.episodes] == [q.id for q in qs]
    assert sorted(seen) == sorted(q.id for q in qs) and len(seen) == 7
    assert max(policy.batches) == 3  # never more than max_concurrent episodes in flight
    # 7 questions x 2 acts = 14 requests in batches of at most 3; refilling keeps batches full
    assert sum(policy.batches) == 14 and len(policy.batches) <= 6
    assert [ep.answer for ep in report.episodes] == [f"q{i}/0/0" for i in range(7)]


def test_kinds_run_concurrently_and_retrievals_share_one_search():
    class ByQuestion(Workflow):
        name = "by-question"

        def run(self, question: Question) -> EpisodeGenerator:
            if question.question.startswith("r"):
                hits = yield Retrieve(
                    [question.question, question.question + "-2"], k=int(question.question[1])
                )
                return Answer(str(sum(len(h) for h in hits)))
            if question.question.startswith("l"):
                return Answer((yield AskLLM("answer", user(question.question))))
            return Answer((yield Act("solo", user(question.question), parse_plain)).text)

    policy, llm, retriever = CountingModel("policy"), CountingModel("llm"), CountingRetriever()
    engine = Engine(policy, llm, retriever, RolloutConfig())
    report = engine.run(ByQuestion(), questions("r2", "r4", "l1", "a1", "r1"))
    assert [ep.answer for ep in report.episodes] == ["4", "8", "l1/0", "a1/0", "2"]
    assert retriever.calls == [(["r2", "r2-2", "r4", "r4-2", "r1", "r1-2"], 4)]  # one search at the largest k
    assert engine.calls["retrieve_batches"] == 1 and engine.calls["retrieve_queries"] == 6
    ep = report.episodes[0]
    assert [len(r) for r in ep.nodes[0].hits] == [2, 2] and ep.nodes[0].k == 2  # each request cut to its k
    # three kinds pending in the same tick: each ran in a worker thread
    assert all(t.startswith("ragteam-rollout") for t in policy.threads + llm.threads + retriever.threads)


def test_seeds_are_derived_per_request_and_temperature_passes_through():
    policy = CountingModel()
    cfg = RolloutConfig(temperature=0.7, top_p=0.9, seed=11, max_tokens=20)
    Engine(policy, None, None, cfg).run(TwoActs(), questions("a", "b"))
    seeds = [r.sampling.seed for r in policy.requests]
    assert len(set(seeds)) == 4 and all(isinstance(s, int) for s in seeds)
    assert {(r.sampling.temperature, r.sampling.top_p, r.sampling.max_tokens) for r in policy.requests} == {
        (0.7, 0.9, 20)
    }
    again = CountingModel()
    Engine(again, None, None, cfg).run(TwoActs(), questions("a", "b"))
    assert [r.sampling.seed for r in again.requests] == seeds
    unseeded = CountingModel()
    Engine(unseeded, None, None, cfg.model_copy(update={"seed": None})).run(TwoActs(), questions("a"))
    assert [r.sampling.seed for r in unseeded.requests] == [None, None]


def test_identical_inputs_give_identical_trees():
    cfg = RolloutConfig(forks=[2, 1])
    runs = [
        Engine(CountingModel("p"), CountingModel("l"), CountingRetriever(), cfg).run(
            Mixed(), questions("a", "b")
        )
        for _ in range(2)
    ]
    assert [strip_seconds(e) for e in runs[0].episodes] == [strip_seconds(e) for e in runs[1].episodes]


# ---------------------------------------------------------------------- budgets


def test_depth_budget_truncates_a_workflow_that_does_not_catch_it():
    engine = Engine(CountingModel(), CountingModel("llm"), None, RolloutConfig(max_depth=3))
    (ep,) = engine.run(Forever(catch=False), questions("go")).episodes
    (leaf,) = ep.leaves()
    assert leaf.status == "truncated" and leaf.answer == "" and "max_depth 3" in leaf.error
    assert len(ep.policy_nodes()) == 3 and ep.status == "ok"
    assert engine.calls["llm_requests"] == 0


def test_depth_budget_lets_a_catching_workflow_finish():
    engine = Engine(CountingModel(), CountingModel("llm"), None, RolloutConfig(max_depth=2))
    (ep,) = engine.run(Forever(catch=True), questions("go")).episodes
    (leaf,) = ep.leaves()
    assert leaf.status == "ok" and leaf.answer == "finish: go/0/0/0" and leaf.info == {"caught": True}
    assert len(ep.policy_nodes()) == 2


def test_token_budget_caps_max_tokens_then_truncates():
    policy = CountingModel(tokens=4)
    cfg = RolloutConfig(max_tokens_per_episode=10, max_tokens=6)
    (ep,) = Engine(policy, None, None, cfg).run(Forever(catch=False), questions("go")).episodes
    # acts at 0, 4 and 8 tokens used: max_tokens 6, 6, then capped to 2; at 12 >= 10 the budget is exceeded
    assert [r.sampling.max_tokens for r in policy.requests] == [6, 6, 2]
    (leaf,) = ep.leaves()
    assert leaf.status == "truncated" and "max_tokens_per_episode 10" in leaf.error


def test_budget_with_branching_truncates_every_path():
    engine = Engine(CountingModel(), None, None, RolloutConfig(forks=[2], max_depth=2))
    (ep,) = engine.run(Forever(catch=False), questions("go")).episodes
    assert len(ep.leaves()) == 4 and {leaf.status for leaf in ep.leaves()} == {"truncated"}


# ---------------------------------------------------------------------- failures


def test_failing_model_fails_exactly_those_episodes_and_the_rest_complete():
    policy = CountingModel(fail_if="bad")
    engine = Engine(policy, None, None, RolloutConfig(max_concurrent=4))
    qs = questions("good0", "bad1", "good2", "bad3", "good4", "good5")
    report = engine.run(TwoActs(), qs)
    status = {ep.question.question: ep.status for ep in report.episodes}
    assert status == {
        "good0": "ok",
        "bad1": "failed",
        "good2": "ok",
        "bad3": "failed",
        "good4": "ok",
        "good5": "ok",
    }
    assert report.failed == 2 and report.failures == {"policy error (counting-endpoint)": 2}
    for ep in report.episodes:
        (leaf,) = ep.leaves()
        if ep.status == "failed":
            assert (
                leaf.status == "failed" and "server said 503" in leaf.error and "server said 503" in ep.error
            )
        else:
            assert leaf.status == "ok" and leaf.answer == f"{ep.question.question}/0/0"


def test_failure_in_one_branch_fails_that_path_only_and_its_sibling_keeps_its_leaf():
    policy = CountingModel(fail_if="x/1")  # the second child's second act fails
    engine = Engine(policy, None, None, RolloutConfig(forks=[2, 1], max_depth=4))
    report = engine.run(Forever(catch=False), questions("x", "y"))
    x, y = report.episodes
    by_status = {leaf.status: leaf for leaf in x.leaves()}
    assert x.status == "partial" and sorted(by_status) == ["failed", "truncated"]
    assert "server said 503" in by_status["failed"].error
    # the sibling path x/0 went on acting to the depth limit, untouched by x/1's failure
    prompts = [r.messages[-1]["content"] for r in policy.requests]
    assert "x/0/0/0" in prompts
    assert x.path(by_status["truncated"].id)[-2].text == "x/0/0/0/0"
    assert y.status == "ok" and len(y.leaves()) == 2
    assert report.failed == 0 and report.failed_paths == 1


def test_an_episode_fails_only_when_no_path_answers():
    policy = CountingModel(fail_if="z/")  # every child of the fork fails at its second act
    report = Engine(policy, None, None, RolloutConfig(forks=[2, 1], max_depth=4)).run(
        Forever(catch=False), questions("z")
    )
    (z,) = report.episodes
    assert z.status == "failed" and [leaf.status for leaf in z.leaves()] == ["failed", "failed"]
    assert "server said 503" in z.error and report.failed == 1


def test_workflow_exception_fails_only_that_episode_with_a_traceback():
    report = Engine(CountingModel(), None, None, RolloutConfig()).run(
        Raises(), questions("fine", "boom", "ok")
    )
    assert [ep.status for ep in report.episodes] == ["ok", "failed", "ok"]
    err = report.episodes[1].error
    assert "KeyError" in err and "missing field" in err and "Traceback" in err and "test_engine.py" in err
    assert report.failures == {"workflow KeyError": 1}


def test_retriever_input_error_is_isolated_and_connection_error_fails_the_batch():
    class OneSearch(Workflow):
        name = "one-search"

        def run(self, question: Question) -> EpisodeGenerator:
            hits = yield Retrieve([question.question], k=1)
            return Answer(hits[0][0].doc.id)

    retriever = CountingRetriever(raise_on="bad", error=ValueError)
    report = Engine(None, None, retriever, RolloutConfig()).run(OneSearch(), questions("a", "bad", "c"))
    assert [ep.status for ep in report.episodes] == ["ok", "failed", "ok"]
    assert report.episodes[0].answer == "a#0" and report.failures == {"retriever ValueError": 1}

    retriever = CountingRetriever(raise_on="bad", error=ConnectionError)
    report = Engine(None, None, retriever, RolloutConfig()).run(OneSearch(), questions("a", "bad", "c"))
    assert [ep.status for ep in report.episodes] == ["failed"] * 3
    assert len(retriever.calls) == 1 and report.failures == {"retriever ConnectionError": 3}


def test_malformed_workflows_fail_with_clear_errors():
    class NotGenerator(Workflow):
        name = "not-generator"

        def run(self, question: Question) -> EpisodeGenerator:
            return Answer("x")  # type: ignore[return-value]

    class YieldsText(Workflow):
        name = "yields-text"

        def run(self, question: Question) -> EpisodeGenerator:
            yield "search for it"  # type: ignore[misc]
            return Answer("x")

    engine = Engine(CountingModel(), None, None, RolloutConfig())
    report = engine.run(NotGenerator(), questions("a"))
    assert report.failures == {"workflow TypeError": 1} and "must `yield`" in report.episodes[0].error
    report = engine.run(YieldsText(), questions("a", "b"))
    assert report.failures == {"workflow TypeError": 2}
    assert (
        "yielded str" in report.episodes[0].error
        and "expected Act, AskLLM or Retrieve" in report.episodes[0].error
    )


def test_missing_component_fails_with_a_clear_error():
    report = Engine(None, None, None, RolloutConfig()).run(TwoActs(), questions("a"))
    assert report.failures == {"no policy": 1} and "engine has none" in report.episodes[0].error


def test_reward_is_recorded_on_leaves():
    def reward(q: Question, answer: str) -> dict[str, float]:
        return {"em": float(answer == q.golden_answers[0]), "len": len(answer)}

    report = Engine(CountingModel(), None, None, RolloutConfig(forks=[2, 1])).run(
        TwoActs(), questions("z"), reward=reward, progress=True
    )
    assert [leaf.rewards for leaf in report.episodes[0].leaves()] == [
        {"em": 0.0, "len": 5.0},
        {"em": 0.0, "len": 5.0},
    ]
    assert isinstance(report, RolloutReport) and report.seconds > 0


# ---------------------------------------------------------------------- baselines and pickling


def test_baselines_prompt_and_extract_with_fakes():
    llm, retriever = CountingModel("llm"), CountingRetriever()
    engine = Engine(None, llm, retriever, RolloutConfig())
    report = engine.run(StandardRAG(WorkflowConfig(topk=3)), questions("who?"))
    (ep,) = report.episodes
    assert retriever.calls == [(["who?"], 3)]
    prompt = llm.requests[0].messages[-1]["content"]
    assert "Document [3] (Title: T) text who? 2" in prompt and "Question: who?" in prompt
    assert ep.leaves()[0].info["doc_ids"] == ["who?#0", "who?#1", "who?#2"]
    report = Engine(None, llm, None, RolloutConfig()).run(Direct(WorkflowConfig()), questions("when?"))
    assert report.episodes[0].status == "ok" and "Document" not in llm.requests[-1].messages[-1]["content"]


@pytest.mark.parametrize(
    ("text", "choices", "expected"),
    [
        ("Answer: Paris.", None, "Paris"),
        ("The answer is Chief of Protocol\nbecause she was...", None, "Chief of Protocol"),
        ('Reasoning first. Final answer: "U.S."', None, "U.S."),
        ("", None, ""),
        ("### Step-by-step Reasoning\n1. She was Chief of Protocol.", None, "1. She was Chief of Protocol"),
        ("### Output", None, "### Output"),
        ("(B) aspirin", {"A": "ibuprofen", "B": "aspirin"}, "B"),
        ("aspirin", {"A": "ibuprofen", "B": "aspirin"}, "B"),
    ],
)
def test_extract_answer(text, choices, expected):
    assert extract_answer(text, choices) == expected


def test_workflows_config_and_episodes_pickle():
    cfg = RolloutConfig(forks=[2, 1], seed=3)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    for wf in (Direct(WorkflowConfig(topk=2)), StandardRAG(WorkflowConfig(topk=2)), TwoActs()):
        clone = pickle.loads(pickle.dumps(wf))
        assert type(clone) is type(wf) and vars(clone) == vars(wf)
    # a pickled workflow and config run exactly like the originals
    wf = pickle.loads(pickle.dumps(StandardRAG(WorkflowConfig(topk=2))))
    a = Engine(None, CountingModel("l"), CountingRetriever(), pickle.loads(pickle.dumps(cfg))).run(
        wf, questions("q")
    )
    b = Engine(None, CountingModel("l"), CountingRetriever(), cfg).run(
        StandardRAG(WorkflowConfig(topk=2)), questions("q")
    )
    assert strip_seconds(a.episodes[0]) == strip_seconds(b.episodes[0])
    assert pickle.loads(pickle.dumps(a.episodes[0])) == a.episodes[0]
