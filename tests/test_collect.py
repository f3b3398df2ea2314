"""`ragteam collect`: the pure selection functions on hand-built trees with known rewards, MMOA-RAG's labels
and targets through the workflow's own parsers, and the command end to end with the tiny model on HotpotQA."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from conftest import hotpot_head
from scripted import drive, hits_for, make_doc

from ragteam.cli.main import main
from ragteam.collect.accept import AcceptRule
from ragteam.collect.config import CollectConfig
from ragteam.collect.mmoa import mmoa_rows
from ragteam.collect.process import process_pairs, sibling_groups
from ragteam.collect.sft import kept_nodes, sft_rows
from ragteam.llm.base import Completion
from ragteam.rollout.traces import load_trace
from ragteam.rollout.tree import Episode, Node
from ragteam.train.data import read_pair_rows, read_sft_rows
from ragteam.types import Action, Hit, Question
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.mmoa.labels import (
    content_words,
    rewriter_target,
    selector_labels,
    selector_target,
    support_recall,
)
from ragteam.workflows.mmoa.options import MMOAOptions
from ragteam.workflows.mmoa.parsers import parse_generator, parse_rewriter, parse_selector
from ragteam.workflows.mmoa.workflow import GENERATOR, REWRITER, SELECTOR, MMOALabeling

# --------------------------------------------------------------------------------------------------- helpers

QUESTION = Question(
    id="q", question="Which city hosted the 1992 Summer Olympics?", golden_answers=["Barcelona"]
)


def _episode(nodes: list[Node], question: Question = QUESTION) -> Episode:
    ep = Episode(id=question.id, workflow="test", question=question)
    for n in nodes:
        ep.add(n)
    return ep


def act(parent, role="actor", text="reply", valid=True, prompt=None, **kw) -> Node:
    """A policy node whose prompt names its role (or `prompt`) and whose reply is `text`."""
    messages = [{"role": "user", "content": prompt or f"prompt of {role} under {parent}"}]
    return Node(
        id=-1,
        parent=parent,
        kind="policy",
        role=role,
        messages=messages,
        completion=Completion(text=text),
        action=Action("x", text, valid=valid),
        **kw,
    )


def leaf(parent, status="ok", **rewards) -> Node:
    return Node(id=-1, parent=parent, kind="answer", answer="a", status=status, rewards=dict(rewards))


def retrieve(parent) -> Node:
    return Node(id=-1, parent=parent, kind="retrieve", queries=["q"], k=1, hits=[[]])


COVER = AcceptRule.parse("cover_em")


def scripted_tree() -> Episode:
    """Correct and wrong leaves under shared ancestors (cover_em in brackets):

    0 router
    ├── 1 filter "keep 1" ── 2 answer ok [1]
    ├── 3 filter "keep 2" ── 4 answer ok [0]
    └── 5 retrieve
        ├── 6 decider "[LLM]" ── 7 answer ok [1]
        ├── 8 decider "x" ── 9 answer failed
        ├── 10 decider (invalid) ── 11 answer ok [1]
        └── 12 decider "y" ── 13 answer truncated [1]   (a cut path is never correct)
    14 router (a second root, no leaf below: dropped path)
    """
    return _episode(
        [
            act(None, "router", "[Retrieval]q"),  # 0
            act(0, "filter", "keep 1"),  # 1
            leaf(1, cover_em=1.0),  # 2
            act(0, "filter", "keep 2"),  # 3
            leaf(3, cover_em=0.0),  # 4
            retrieve(0),  # 5
            act(5, "decider", "[LLM]"),  # 6
            leaf(6, cover_em=1.0),  # 7
            act(5, "decider", "x"),  # 8
            leaf(8, status="failed"),  # 9
            act(5, "decider", "bad", valid=False),  # 10
            leaf(10, cover_em=1.0),  # 11
            act(5, "decider", "y"),  # 12
            leaf(12, status="truncated", cover_em=1.0),  # 13
            act(None, "router", "[Planning]"),  # 14
        ]
    )


# ------------------------------------------------------------------------------------------------ acceptance


def test_accept_rule_parsing():
    assert AcceptRule.parse("cover_em") == AcceptRule("cover_em", 1.0)
    assert AcceptRule.parse(" f1 >= 0.5 ") == AcceptRule("f1", 0.5)
    assert str(AcceptRule.parse("f1>=0.5")) == "f1>=0.5" and str(AcceptRule.parse("em")) == "em"
    assert AcceptRule.parse("judge").needs_judge
    for bad in ("bleu", "f1>0.5", "judge>=0.5", "", "em>=x"):
        with pytest.raises(ValueError, match="--accept"):
            AcceptRule.parse(bad)


def test_accept_rule_on_leaves():
    ep = scripted_tree()
    ok = COVER.predicate(ep)
    assert [n.id for n in ep.leaves() if ok(n)] == [2, 7, 11]  # not failed 9, not truncated 13
    everything = AcceptRule.parse("f1>=0").predicate(_episode([act(None), leaf(0, f1=0.0)]))
    assert everything(Node(id=1, parent=0, kind="answer", rewards={"f1": 0.0}))
    with pytest.raises(ValueError, match="no reward 'f1'"):
        AcceptRule.parse("f1>=0.5").predicate(ep)(ep.nodes[2])  # a misspelt / missing metric is loud


# ---------------------------------------------------------------------------------------- rejection sampling


def test_collect_keeps_only_correct_paths():
    ep = scripted_tree()
    ok = COVER.predicate(ep)
    # the router (above correct and wrong leaves) once; filter 1 and deciders 6, 10 lead to correct answers
    assert [n.id for n in kept_nodes(ep, ok)] == [0, 1, 6, 10]
    rows, counts = sft_rows(ep, ok, teacher="t")
    assert [r.provenance["node"] for r in rows] == [0, 1, 6]  # 10 did not parse: dropped
    assert counts == Counter(invalid_action=1)
    router = rows[0]
    assert router.role == "router" and router.target == "[Retrieval]q" and router.question_id == "q"
    assert router.messages == ep.nodes[0].messages
    # the router's reward is the mean cover_em of every leaf below it: (1 + 0 + 1 + 0 + 1 + 0) / 6
    assert router.provenance["reward"] == pytest.approx(0.5)
    assert router.provenance["correct_leaves"] == 3 and router.provenance["leaves"] == 6
    assert router.provenance["teacher"] == "t" and router.provenance["source"] == "rejection_sampling"
    # the path rule itself ignores failed and truncated leaves, whatever the predicate says
    raw = lambda leaf: leaf.rewards.get("cover_em", 0.0) >= 1  # noqa: E731
    assert [n.id for n in kept_nodes(ep, raw)] == [0, 1, 6, 10]
    rows, counts = sft_rows(ep, ok, keep_invalid=True)
    assert [r.provenance["node"] for r in rows] == [0, 1, 6, 10] and not counts


def test_an_invalid_act_on_a_correct_path_is_relabeled_by_the_action_taken():
    from ragteam.workflows.c3po.workflow import DECIDER

    ep = scripted_tree()
    rows, counts = sft_rows(ep, COVER.predicate(ep), relabel={"decider": DECIDER.write})
    assert [r.provenance["node"] for r in rows] == [0, 1, 6, 10] and counts == Counter(relabeled=1)
    node = ep.nodes[10]
    assert rows[-1].target == DECIDER.write(node.action)  # the fallback the workflow executed, well formed
    assert rows[-1].provenance["relabeled_from"] == node.text
    rows, counts = sft_rows(ep, COVER.predicate(ep), relabel={"router": lambda a: "x"})  # not this role
    assert counts == Counter(invalid_action=1)


def test_nothing_is_kept_when_no_leaf_is_correct():
    ep = _episode([act(None, "router"), leaf(0, em=0.0), act(None, "router"), leaf(2, status="failed")])
    em = AcceptRule.parse("em").predicate(ep)
    assert kept_nodes(ep, em) == [] and sft_rows(ep, em) == ([], Counter())


def test_identical_rows_within_a_question_are_written_once():
    same = {"prompt": "same prompt"}
    ep = _episode(
        [
            act(None, "router", "[No Retrieval]", **same),
            leaf(0, cover_em=1.0),
            act(None, "router", "[No Retrieval]", **same),  # the same reply sampled twice
            leaf(2, cover_em=1.0),
            act(None, "router", "[Planning]", **same),
            leaf(4, cover_em=1.0),
        ]
    )
    rows, counts = sft_rows(ep, COVER.predicate(ep))
    assert [r.target for r in rows] == ["[No Retrieval]", "[Planning]"]
    assert counts["duplicates"] == 1


# --------------------------------------------------------------------------------------------- process pairs


def _scored(parent, text, score, chosen, prompt="state") -> Node:
    return act(parent, "actor", text, prompt=prompt, score=score, chosen=chosen)


def best_of_tree(final_cover: float) -> Episode:
    """Two keep-one-of-N acts on one path; the first group has a tie, a copy of the chosen text and a lower
    one; the second an empty candidate and a lower one."""
    return _episode(
        [
            _scored(None, "search A", 3.0, True),  # 0
            _scored(None, "search B", 1.0, False),  # 1
            _scored(None, "search C", 3.0, False),  # 2  tie
            _scored(None, "search A ", 0.0, False),  # 3  same text
            retrieve(0),  # 4
            _scored(4, "answer X", 2.0, True, prompt="state 2"),  # 5
            _scored(4, "  ", 0.0, False, prompt="state 2"),  # 6  empty
            _scored(4, "answer Y", 1.0, False, prompt="state 2"),  # 7
            leaf(5, cover_em=final_cover),  # 8
        ]
    )


def test_process_pairs_chosen_over_lower_scored_siblings():
    ep = best_of_tree(1.0)
    assert [[n.id for n in g] for g in sibling_groups(ep)] == [[0, 1, 2, 3], [5, 6, 7]]
    pairs, counts = process_pairs(ep, COVER.predicate(ep))
    assert [(p.chosen, p.rejected, p.scores) for p in pairs] == [
        ("search A", "search B", {"chosen": 3.0, "rejected": 1.0}),
        ("answer X", "answer Y", {"chosen": 2.0, "rejected": 1.0}),
    ]
    assert pairs[1].messages == [{"role": "user", "content": "state 2"}] and pairs[0].role == "actor"
    assert counts == Counter(groups=2, groups_on_correct_paths=2, ties=1, identical=1, empty_rejected=1)


def test_a_chosen_reply_that_did_not_parse_makes_pairs_only_with_keep_invalid():
    """One rule for SFT rows and pairs: the second group's chosen act fell back (invalid), so by default it
    makes neither an SFT row nor a pair; an invalid *rejected* act still makes a pair."""
    ep = best_of_tree(1.0)
    ep.nodes[5].action = Action("x", "answer X", valid=False)
    ep.nodes[1].action = Action("x", "search B", valid=False)  # a rejected one that did not parse
    pairs, counts = process_pairs(ep, COVER.predicate(ep))
    assert [(p.chosen, p.rejected) for p in pairs] == [("search A", "search B")]
    assert counts["chosen_invalid"] == 1
    assert [r.target for r in sft_rows(ep, COVER.predicate(ep))[0]] == ["search A"]
    kept, _ = process_pairs(ep, COVER.predicate(ep), keep_invalid=True)
    assert [p.chosen for p in kept] == ["search A", "answer X"]
    assert [r.target for r in sft_rows(ep, COVER.predicate(ep), keep_invalid=True)[0]] == [
        "search A",
        "answer X",
    ]


def test_process_pairs_only_from_correct_trajectories():
    ep = best_of_tree(0.0)
    pairs, counts = process_pairs(ep, COVER.predicate(ep))
    assert pairs == [] and counts == Counter(groups=2)


# ------------------------------------------------------------------------------------------- MMOA-RAG labels


def test_mmoa_selector_heuristic_on_a_hand_made_question():
    q = QUESTION.question
    assert content_words(q) == {"city", "hosted", "1992", "summer", "olympics"}
    docs = [
        make_doc("Barcelona", "Barcelona is a city in Spain."),  # city, barcelona: 2
        make_doc("Pasta", "How to cook pasta at home."),  # nothing in common
        make_doc("1992 Summer Olympics", "The Games of the XXV Olympiad were held in 1992."),  # 3
        make_doc("Gaudí", "Gaudi's buildings stand in Barcelona."),  # barcelona: 1 (accents folded)
        make_doc("Tokyo", "Tokyo hosted the Olympics in 1964 and 2021."),  # hosted, olympics: 2
    ]
    ids, overlaps = selector_labels(q, ["Barcelona"], docs, min_overlap=1)  # the paper's rule: any word
    assert ids == [0, 2, 3, 4] and overlaps == [2, 0, 3, 1, 2]
    ids, _ = selector_labels(q, ["Barcelona"], docs, min_overlap=3)
    assert ids == [0, 2, 3]  # 0 and 3 contain the gold answer; 2 overlaps enough; 4 does not
    # a stop-word answer ("no") is not looked for in the documents
    ids, _ = selector_labels("Is it?", ["no"], [make_doc("x", "No, it is not.")], min_overlap=1)
    assert ids == []


def test_selector_and_rewriter_targets_round_trip_through_the_parsers():
    for ids, k in (([0], 10), ([0, 3, 7], 10), ([9, 2, 5], 10), (list(range(5)), 5)):
        action = parse_selector(selector_target(ids), k=k)
        assert action.valid and action.penalty == 0 and action.value == sorted(ids)
    assert selector_target([4, 0]) == "Document0,Document4"
    messy = "Sub-questions:\n1. Who founded Acme?\n- When was  the founder born?\nQ3: Who founded Acme?\n"
    subs = parse_rewriter(messy, question="q").value
    assert subs == ["Who founded Acme?", "When was  the founder born?"]
    again = parse_rewriter(rewriter_target(subs), question="q")
    assert again.valid and again.penalty == 0 and again.value == subs
    assert parse_generator("Barcelona").value == "Barcelona"


def test_labelling_rollout_builds_the_workflows_candidates():
    """MMOALabeling's candidate set after a rewrite is exactly what MMOA gives its Selector."""
    cfg = MMOAOptions(candidates=4)
    rewrite = "Olympics 1992 host\nSpain capital"
    labelled = drive(MMOALabeling(cfg), QUESTION, policy={"rewriter": rewrite})
    real = drive(MMOA(cfg), QUESTION, policy={"rewriter": rewrite, "selector": "Document0"})
    ((selector_act, _),) = real.acts("selector")
    assert labelled.answer.info["candidate_ids"] == [d.id for d in selector_act.fields["docs"]]
    assert labelled.answer.info["base_ids"] == [h.doc.id for h in hits_for(QUESTION.question, 4)]
    assert labelled.answer.info["subquestions"] == ["Olympics 1992 host", "Spain capital"]


def _mmoa_episode() -> tuple[Episode, list, list]:
    """A labelling tree: the question's 2 candidates hold one of its two supporting paragraphs; rewrite 1
    finds both (kept), rewrite 2 finds one (not better), rewrite 3 has too many sub-questions (penalty)."""
    gold_a = make_doc("Barcelona", "Barcelona hosted the 1992 Summer Olympics.")
    gold_b = make_doc("Olympic city", "The 1992 Summer Olympics city was in Spain.")
    other = make_doc("Pasta", "Cooking pasta.")
    q = Question(
        id="q",
        question=QUESTION.question,
        golden_answers=["Barcelona"],
        supporting_ids=[gold_a.id, gold_b.id],
    )
    base, better = [gold_a, other], [gold_a, gold_b]

    def hits(docs):
        return [[Hit(d, 1.0) for d in docs]]

    def rewrite(text, cands):
        node = act(0, "rewriter", text, prompt="as sent")
        node.action = parse_rewriter(text, question=q.question)
        info = {"variant": "qr-s-g", "base_ids": [d.id for d in base]}
        info.update(subquestions=node.action.value, candidate_ids=[d.id for d in cands])
        return node, info

    nodes = [Node(id=-1, parent=None, kind="retrieve", queries=[q.question], k=2, hits=hits(base))]  # 0
    for text, cands in (
        ("1. Who hosted 1992?\n2. Which city in Spain?", better),
        ("Olympics 1992", base),
        ("a\nb\nc\nd\ne", better),
    ):
        node, info = rewrite(text, cands)
        nodes.append(node)
        parent = len(nodes) - 1
        nodes.append(Node(id=-1, parent=parent, kind="retrieve", queries=["s"], k=2, hits=hits(cands)))
        nodes.append(
            Node(
                id=-1, parent=len(nodes) - 1, kind="answer", answer="", info={**info, "rewriter_node": parent}
            )
        )
    return _episode(nodes, q), base, better


def test_mmoa_rows_from_a_labelling_tree():
    ep, base, better = _mmoa_episode()
    assert support_recall(base, ep.question.supporting_ids) == 0.5
    rows, counts = mmoa_rows(ep, variant="qr-s-g", teacher="t")
    assert [
        (r.role, r.provenance["candidates_from"] if "candidates_from" in r.provenance else "") for r in rows
    ] == [
        ("rewriter", ""),
        ("selector", "question"),
        ("generator", "question"),
        ("selector", "rewrite node 1"),
        ("generator", "rewrite node 1"),
    ]
    rw = rows[0]
    q = ep.question.question
    assert rw.messages == REWRITER.render(question=q)  # the workflow's own prompt, byte for byte
    assert rw.target == "Who hosted 1992?\nWhich city in Spain?"
    assert parse_rewriter(rw.target, question=q).value == ["Who hosted 1992?", "Which city in Spain?"]
    assert rw.provenance["recall"] == 1.0 and rw.provenance["baseline_recall"] == 0.5
    assert counts["rewrites"] == 3 and counts["rewrites_kept"] == 1
    assert counts["rewrites_not_better"] == 1 and counts["rewrites_invalid"] == 1
    sel, gen = rows[1], rows[2]
    assert sel.messages == SELECTOR.render(question=q, docs=base)
    assert sel.target == "Document0" and parse_selector(sel.target, k=2).value == [0]  # pasta shares nothing
    assert gen.messages == GENERATOR.render(question=q, docs=[base[0]], options="", choices=None)
    assert gen.target == "Barcelona"
    assert (
        rows[3].messages == SELECTOR.render(question=q, docs=better)
        and rows[3].target == "Document0,Document1"
    )
    # s-g: no rewriter rows, only the question's candidates
    rows, _ = mmoa_rows(ep, variant="s-g")
    assert [r.role for r in rows] == ["selector", "generator"]
    # qr-g: no selector; the generator sees all K candidates
    rows, _ = mmoa_rows(ep, variant="qr-g")
    assert [r.role for r in rows] == ["rewriter", "generator", "generator"]
    assert rows[1].messages == GENERATOR.render(question=q, docs=base, options="", choices=None)


# ---------------------------------------------------------------------------------------------------- config


def test_config_sets_the_fork_schedule():
    base = {"what": "sft", "workflow": "c3po", "data": "d", "out": "o"}
    c3po = CollectConfig(**base).resolved_rollout()
    assert c3po.temperature == 1.0 and c3po.forks[0].role == "router" and len(c3po.forks[0].forced) == 3
    samples = CollectConfig(**{**base, "tree": "samples", "samples": 3}).resolved_rollout()
    assert samples.fork_at("router", 0).k == 3 and samples.fork_at("filter", 1).k == 1
    # other --rollout.* flags keep the sampling default
    assert CollectConfig(**base, rollout={"max_tokens": 8}).rollout.temperature == 1.0
    proc = CollectConfig(**{**base, "what": "process", "workflow": "gym:react", "candidates": 3})
    assert proc.resolved_rollout().best_of.n == 3 and proc.resolved_rollout().best_of.scorer == "llm"
    assert "candidates" not in type(proc.workflow_config()).model_fields  # N here: RAG-Gym has no K
    mmoa_proc = CollectConfig(**{**base, "what": "process", "workflow": "mmoa", "candidates": 3})
    assert mmoa_proc.n_candidates == 3 and mmoa_proc.workflow_config().candidates == 10  # N, not MMOA's K
    mmoa = CollectConfig(**{**base, "workflow": "mmoa", "candidates": 5})
    assert mmoa.workflow_config().candidates == 5 and mmoa.resolved_rollout().fork_at("rewriter", 0).k == 4
    with pytest.raises(ValueError, match="temperature 0"):
        CollectConfig(**base, rollout={"temperature": 0.0}).resolved_rollout()
    with pytest.raises(ValueError, match="--tree samples"):
        CollectConfig(**{**base, "workflow": "gym:react", "tree": "c3po"}).resolved_rollout()


def test_collect_asks_the_workflow_what_it_collects(monkeypatch):
    """No workflow name is matched: MMOA declares its labelling rollout, C-3PO's package registers its tree,
    and a tree registered for another name is found the same way."""
    from ragteam.depth import TREES, Tree
    from ragteam.rollout.config import RolloutConfig

    base = {"what": "sft", "data": "d", "out": "o"}
    assert isinstance(CollectConfig(**base, workflow="mmoa").labelling(), MMOALabeling)
    assert CollectConfig(**{**base, "what": "process"}, workflow="mmoa").labelling() is None
    assert CollectConfig(**base, workflow="c3po").labelling() is None
    assert CollectConfig(**base, workflow="c3po").tree_kind == "c3po"
    assert CollectConfig(**base, workflow="gym:react").tree_kind == "samples"
    with pytest.raises(ValueError, match="no tree rollout is registered for workflow 'nope'"):
        CollectConfig(**base, workflow="c3po", tree="nope")
    mine = {"forks": [{"role": "reasoner", "k": 3}], "max_depth": 5}
    monkeypatch.setitem(TREES, "gym:react", Tree("gym:react", mine, "the reasoner"))
    own = CollectConfig(**base, workflow="gym:react").resolved_rollout()
    assert own.fork_at("reasoner", 0).k == 3 and own.max_depth == 5
    assert RolloutConfig(forks="gym:react").forks == own.forks
    with pytest.raises(ValueError, match="forks the reasoner; workflow 'c3po' has none"):
        CollectConfig(**base, workflow="c3po", tree="gym:react").resolved_rollout()


# ------------------------------------------------------------------------------------------------ end to end

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "12", "--rollout.llm-max-tokens", "8", "--no-progress"]


@pytest.fixture(scope="module")
def hotpot2(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("collect-data"), 2)


def _collect(what: str, data: Path, out: Path, *extra: str) -> int:
    return main(["collect", what, "--data", str(data), "--out", str(out), *TINY, *extra])


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _check_sft_file(out: Path, rule: str) -> tuple[dict, list[dict]]:
    """The sft.jsonl of `out` is exactly the rows of the pure functions on its trace; return the summary."""
    summary = json.loads((out / "summary.json").read_text())
    episodes = load_trace(out / "episodes.jsonl")
    rows = _jsonl(out / "sft.jsonl")
    accept = AcceptRule.parse(rule)
    expected = [r for ep in episodes.values() for r in sft_rows(ep, accept.predicate(ep), teacher="tiny")[0]]
    assert [(r["role"], r["target"], r["question_id"]) for r in rows] == [
        (r.role, r.target, r.question_id) for r in expected
    ]
    if rows:
        assert len(read_sft_rows(out / "sft.jsonl")) == len(rows)  # the trainer's own validator
    for r in rows:
        node = episodes[r["question_id"]].nodes[r["provenance"]["node"]]
        assert node.kind == "policy" and node.messages == r["messages"] and node.text == r["target"]
    leaves = [lf for ep in episodes.values() for lf in ep.leaves()]
    assert summary["leaves"] == len(leaves) and summary["rows"] == len(rows)
    assert summary["correct_leaves"] == sum(
        accept.predicate(ep)(lf) for ep in episodes.values() for lf in ep.leaves()
    )
    assert sum(summary["rows_per_role"].values()) == len(rows)
    sampled = Counter(n.role for ep in episodes.values() for n in ep.policy_nodes())
    assert summary["sampled_per_role"] == dict(sampled)
    assert summary["acceptance_rate"] == summary["accepted_questions"] / summary["questions"]
    return summary, rows


def test_collect_sft_c3po_end_to_end_and_resume(hotpot2, tmp_path, capsys):
    out = tmp_path / "c3po"
    assert _collect("sft", hotpot2, out, "--workflow", "c3po", "--accept", "f1>=0", "--limit", "1") == 0
    first = (out / "episodes.jsonl").read_text().splitlines()
    assert len(first) == 1
    assert _collect("sft", hotpot2, out, "--workflow", "c3po", "--accept", "f1>=0", "--limit", "2") == 0
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert lines[:1] == first and len(lines) == 2  # the finished question was not run again
    summary, rows = _check_sft_file(out, "f1>=0")
    assert summary["questions"] == summary["episodes"] == 2 and summary["tree"] == "c3po"
    assert summary["engine_calls"]["policy_requests"] >= 1
    assert summary["accepted_questions"] == 2  # f1>=0 accepts every answered path
    routers = [r for r in rows if r["role"] == "router"]
    assert {r["target"] for r in routers} >= {"[No Retrieval]", "[Planning]"}  # the forced strategies
    ep = next(iter(load_trace(out / "episodes.jsonl").values()))
    assert len([n for n in ep.policy_nodes() if n.role == "router"]) == 3  # C-3PO's tree: three strategies
    assert "collect sft" in capsys.readouterr().out
    assert "command: collect sft" in (out / "config.yaml").read_text()
    # a rerun with a stricter rule runs nothing and rebuilds the rows from the trace
    assert _collect("sft", hotpot2, out, "--workflow", "c3po", "--accept", "cover_em", "--limit", "2") == 0
    summary, _ = _check_sft_file(out, "cover_em")
    assert summary["engine_calls"] == {} and summary["accept"] == "cover_em"
    assert _collect("sft", hotpot2, out, "--workflow", "c3po", "--limit", "2", "--relabel-invalid") == 0
    summary, rows = _check_sft_file(out, "cover_em")
    assert summary["engine_calls"] == {} and "invalid_action" not in summary["dropped"]
    # settings that change rollouts may not be mixed into one trace
    assert _collect("sft", hotpot2, out, "--workflow", "c3po", "--limit", "2", "--topk", "1") == 1
    assert "topk" in capsys.readouterr().err


def test_collect_sft_samples_with_a_judge(hotpot2, tmp_path):
    from ragteam.llm.config import ModelConfig
    from ragteam.llm.factory import build_chat_model
    from ragteam.serve.llm import make_app
    from ragteam.serve.testing import BackgroundServer

    out = tmp_path / "cot"
    with BackgroundServer(make_app(build_chat_model(ModelConfig(model="tiny")), "judge")) as srv:
        args = ["--workflow", "gym:cot", "--samples", "2", "--accept", "judge", "--judge.base-url", srv.url]
        assert _collect("sft", hotpot2, out, *args, "--judge.model", "judge") == 0
    summary = json.loads((out / "summary.json").read_text())
    episodes = load_trace(out / "episodes.jsonl")
    for ep in episodes.values():  # --tree samples: two independent solutions, each its own leaf
        assert [n.parent for n in ep.policy_nodes()] == [None, None] and len(ep.leaves()) == 2
    distinct = {
        (ep.question.id, lf.answer) for ep in episodes.values() for lf in ep.leaves() if lf.status == "ok"
    }
    assert summary["judge"]["counts"]["judged"] == len(distinct)
    assert summary["tree"] == "samples" and summary["leaves"] == 4
    assert summary["rows"] == len(_jsonl(out / "sft.jsonl")) <= summary["correct_leaves"]


def test_collect_process_gym_react_end_to_end(hotpot2, tmp_path, monkeypatch):
    import ragteam.rollout.scorers as scorers

    # The tiny LLM's ranking is noise (mostly ties): make it rank the candidates in order, so pairs exist.
    in_order = lambda text, n: scorers.Ranking([float(n - i) for i in range(n)], list(range(n)))  # noqa: E731
    monkeypatch.setattr(scorers, "parse_ranking", in_order)
    out = tmp_path / "react"
    args = ["--workflow", "gym:react", "--ranker", "llm", "--candidates", "3", "--accept", "f1>=0"]
    args += ["--keep-invalid"]  # the tiny model's replies never parse
    assert _collect("process", hotpot2, out, *args, "--rollout.max-depth", "2") == 0
    summary = json.loads((out / "summary.json").read_text())
    episodes = load_trace(out / "episodes.jsonl")
    pairs = _jsonl(out / "pairs.jsonl")
    accept = AcceptRule.parse("f1>=0")
    expected = [p for ep in episodes.values() for p in process_pairs(ep, accept.predicate(ep), True)[0]]
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [(p.chosen, p.rejected) for p in expected]
    assert summary["pairs"] == len(pairs) >= 1 and summary["ranker"] == "llm" and summary["candidates"] == 3
    ranking = summary["ranking"]  # every set ranked (the patched parser), and counted
    assert ranking["sets"] == ranking["ranked"] == summary["engine_calls"]["select_sets"] >= 1
    assert len(read_pair_rows(out / "pairs.jsonl")) == len(pairs)
    for p in pairs:
        assert set(p) == {"role", "messages", "chosen", "rejected", "scores", "question_id"}
        assert p["scores"]["chosen"] > p["scores"]["rejected"] and p["role"] == "actor"
        ep = episodes[p["question_id"]]
        chosen = [n for n in ep.policy_nodes() if n.chosen and n.text == p["chosen"]]
        assert chosen and chosen[0].messages == p["messages"]
    for ep in episodes.values():
        groups = sibling_groups(ep)
        assert groups and all(len(g) == 3 and sum(bool(n.chosen) for n in g) == 1 for g in groups)
    assert summary["groups"] == sum(len(sibling_groups(ep)) for ep in episodes.values())


def test_collect_process_with_the_random_prm(hotpot2, tmp_path):
    """`--ranker random` (RAG-Gym's Table 4 "PRM (Random)"): seeded uniform scores rank the candidates."""
    out = tmp_path / "random"
    args = ["--workflow", "gym:react", "--ranker", "random", "--candidates", "3", "--accept", "f1>=0"]
    assert _collect("process", hotpot2, out, *args, "--keep-invalid", "--rollout.max-depth", "2") == 0
    summary = json.loads((out / "summary.json").read_text())
    pairs = _jsonl(out / "pairs.jsonl")
    assert summary["ranker"] == "random" and summary["pairs"] == len(pairs) >= 1
    for p in pairs:
        assert 1.0 > p["scores"]["chosen"] > p["scores"]["rejected"] >= 0.0


def test_collect_sft_mmoa_end_to_end(hotpot2, tmp_path):
    out = tmp_path / "mmoa"
    assert _collect("sft", hotpot2, out, "--workflow", "mmoa", "--samples", "2", "--candidates", "4") == 0
    summary = json.loads((out / "summary.json").read_text())
    episodes = load_trace(out / "episodes.jsonl")
    rows = _jsonl(out / "sft.jsonl")
    assert summary["rewrites"] == 4 and summary["k"] == 4 and summary["rows"] == len(rows)
    for ep in episodes.values():
        assert len([n for n in ep.policy_nodes() if n.role == "rewriter"]) == 2
    assert {r["role"] for r in rows} >= {"selector", "generator"}
    for r in rows:
        ep = episodes[r["question_id"]]
        if r["role"] == "selector":
            assert parse_selector(r["target"], k=4).valid and parse_selector(r["target"], k=4).penalty == 0
            if r["provenance"]["candidates_from"] == "question":  # the question's own top 4, rendered by MMOA
                docs = [h.doc for h in ep.nodes[0].hits[0]]
                assert r["messages"] == SELECTOR.render(question=ep.question.question, docs=docs)
        if r["role"] == "generator":
            assert r["target"] == ep.question.golden_answers[0]
    assert len(read_sft_rows(out / "sft.jsonl")) == len(rows)


def test_collect_errors_name_the_setting(hotpot2, tmp_path, capsys):
    assert _collect("sft", hotpot2, tmp_path / "a", "--workflow", "gym:react", "--tree", "c3po") == 1
    assert "--tree samples" in capsys.readouterr().err
    assert _collect("sft", hotpot2, tmp_path / "b", "--workflow", "standard-rag") == 1
    assert "no policy role" in capsys.readouterr().err
    assert _collect("sft", hotpot2, tmp_path / "c", "--workflow", "c3po", "--accept", "bleu") == 2
    assert "--accept" in capsys.readouterr().err
    assert _collect("sft", hotpot2, tmp_path / "d", "--workflow", "c3po", "--accept", "judge") == 1
    assert "--judge.base-url" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    lines = hotpot2.read_text(encoding="utf-8").splitlines()
    bad.write_text(lines[0] + "\n" + '{"question_id": "x", "question_text": 3}\n', encoding="utf-8")
    assert _collect("sft", bad, tmp_path / "e", "--workflow", "c3po") == 1
    assert f"{bad}:2" in capsys.readouterr().err  # the eval's readers name the file and line
