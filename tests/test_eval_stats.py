"""Statistics, scores, report and trace-file logic of `ragteam eval`, on hand-built episode trees."""

from __future__ import annotations

import json

import pytest

from ragteam.eval import plots, report
from ragteam.llm.base import Completion
from ragteam.rollout import traces
from ragteam.rollout.tree import Episode, Node
from ragteam.stats import episodes as stats
from ragteam.stats import scores
from ragteam.types import Action, Doc, Hit, Question


def _q(qid: str, answers=("Paris",), choices=None) -> Question:
    return Question(id=qid, question=f"question {qid}?", golden_answers=list(answers), choices=choices)


def _policy(parent, role, kind, valid=True, p=0, c=0, s=0.0, depth=1) -> Node:
    return Node(
        id=0,
        parent=parent,
        kind="policy",
        role=role,
        depth=depth,
        completion=Completion(text=f"<{kind}>", prompt_tokens=p, completion_tokens=c),
        action=Action(kind, valid=valid, error=None if valid else "fallback"),
        seconds=s,
    )


def _llm(parent, purpose, p, c, s=0.0, depth=0) -> Node:
    return Node(
        id=0,
        parent=parent,
        kind="llm",
        role=purpose,
        depth=depth,
        completion=Completion(text="text", prompt_tokens=p, completion_tokens=c),
        seconds=s,
    )


def _retrieve(parent, queries, s=0.0, depth=0) -> Node:
    hits = [[Hit(Doc("d1", "Title", "some words here"), 1.0)] for _ in queries]
    return Node(
        id=0, parent=parent, kind="retrieve", queries=list(queries), k=1, hits=hits, seconds=s, depth=depth
    )


def _leaf(parent, answer, strategy, rewards, depth) -> Node:
    return Node(
        id=0,
        parent=parent,
        kind="answer",
        answer=answer,
        info={"strategy": strategy},
        rewards=rewards,
        depth=depth,
    )


def planning_episode() -> Episode:
    """router(planning) -> roadmap -> retrieve -> filter(invalid) -> decider(llm) -> answer LLM -> leaf."""
    ep = Episode(id="e1", workflow="c3po", question=_q("q1"), meta={"seconds": 4.0})
    ep.add(_policy(None, "router", "planning", p=10, c=3, s=0.5, depth=1))
    ep.add(_llm(0, "roadmap", 20, 8, s=1.0, depth=1))
    ep.add(_retrieve(1, ["a"], s=0.1, depth=1))
    ep.add(_policy(2, "filter", "select", valid=False, p=30, c=5, s=0.5, depth=2))
    ep.add(_policy(3, "decider", "llm", p=40, c=4, s=0.5, depth=3))
    ep.add(_llm(4, "answer", 50, 6, s=1.0, depth=3))
    ep.add(_leaf(5, "Paris", "planning", {"em": 1.0, "f1": 1.0, "cover_em": 1.0}, depth=3))
    return ep


def retrieval_episode() -> Episode:
    """router(retrieval) -> retrieve(2 queries) -> filter -> answer LLM -> leaf; no recorded wall time."""
    ep = Episode(id="e2", workflow="c3po", question=_q("q2", ("Rome",)))
    ep.add(_policy(None, "router", "retrieval", p=10, c=5, s=0.25, depth=1))
    ep.add(_retrieve(0, ["x", "y"], s=0.5, depth=1))
    ep.add(_policy(1, "filter", "select", p=30, c=2, s=0.25, depth=2))
    ep.add(_llm(2, "answer", 40, 3, s=1.0, depth=2))
    ep.add(_leaf(3, "Rome city", "retrieval", {"em": 0.0, "f1": 0.5, "cover_em": 1.0}, depth=2))
    return ep


def failed_episode() -> Episode:
    ep = Episode(
        id="e3",
        workflow="c3po",
        question=_q("q3"),
        status="failed",
        error="llm: timeout",
        meta={"seconds": 2.0},
    )
    ep.add(_policy(None, "router", "no_retrieval", p=10, c=2, s=1.5, depth=1))
    ep.add(Node(id=0, parent=0, kind="answer", answer="", status="failed", error="llm: timeout", depth=1))
    return ep


EPISODES = [planning_episode(), retrieval_episode(), failed_episode()]


def test_path_facts():
    ep1, ep2, ep3 = EPISODES
    assert stats.policy_depth(ep1) == 3 and stats.policy_depth(ep2) == 2 and stats.policy_depth(ep3) is None
    assert stats.retrieval_rounds(ep1) == 1 and stats.retrieval_rounds(ep2) == 1
    assert stats.strategy_of(ep1) == "planning" and stats.strategy_of(ep3) is None
    assert stats.episode_seconds(ep1) == 4.0  # recorded wall time wins
    assert stats.episode_seconds(ep2) == pytest.approx(2.0)  # sum of node seconds


def test_quantile_and_histogram():
    assert stats.quantile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.5
    assert stats.quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.9) == pytest.approx(4.6)
    assert stats.quantile([], 0.5) == 0.0
    assert stats.histogram([2, 0, 2, 5]) == {"0": 1, "2": 2, "5": 1}


def test_workflow_stats_exact_numbers():
    s = stats.workflow_stats(EPISODES)
    assert s["episodes"] == 3
    assert s["episode_status"] == {"failed": 1, "ok": 2}
    assert s["leaf_status"] == {"failed": 1, "ok": 2}
    assert s["strategy"] == {
        "counts": {"planning": 1, "retrieval": 1},
        "ratio": {"planning": 0.5, "retrieval": 0.5},
        "n": 2,
    }
    assert s["depth"] == {"histogram": {"2": 1, "3": 1}, "mean": 2.5, "max": 3, "n": 2}
    assert s["retrieval_rounds"]["histogram"] == {"1": 2}
    inv = s["invalid_actions"]
    assert (inv["acts"], inv["invalid"]) == (6, 1)
    assert inv["rate"] == pytest.approx(1 / 6)
    assert inv["by_role"]["filter"] == {"acts": 2, "invalid": 1, "rate": 0.5}
    assert inv["by_role"]["router"] == {"acts": 3, "invalid": 0, "rate": 0.0}
    assert s["actions"]["router"] == {"no_retrieval": 1, "planning": 1, "retrieval": 1}
    per = s["per_question"]
    assert per["totals"]["calls"] == {"policy": 6, "llm": 3, "retrieve": 2, "retrieve_queries": 3}
    assert per["calls"]["policy"] == pytest.approx(2.0)
    assert per["calls"]["llm"] == pytest.approx(1.0)
    assert per["tokens"]["policy"] == {"prompt": pytest.approx(130 / 3), "completion": pytest.approx(21 / 3)}
    assert per["tokens"]["llm"] == {"prompt": pytest.approx(110 / 3), "completion": pytest.approx(17 / 3)}
    lat = s["latency_seconds"]
    assert lat["total"] == pytest.approx(8.0)
    assert lat["mean"] == pytest.approx(8.0 / 3)
    assert lat["p50"] == pytest.approx(2.0) and lat["max"] == 4.0
    json.dumps(s)  # JSON-able


def test_no_strategy_key_without_strategies():
    ep = retrieval_episode()
    ep.nodes[-1].info = {}
    assert "strategy" not in stats.workflow_stats([ep])


def test_scores_failed_count_zero_and_mc():
    questions = [_q("q1"), _q("q2", ("Rome",)), _q("q3"), _q("q4", ("B",), choices={"A": "x", "B": "y"})]
    by_id = {ep.question.id: ep for ep in EPISODES}
    rows = scores.question_rows(questions, by_id, judge={"q1": 1.0, "q2": 1.0, "q3": 1.0})
    assert [r["failed"] for r in rows] == [False, False, True, True]  # q3 failed, q4 missing
    assert rows[2]["judge"] == 0.0 and rows[2]["prediction"] == ""
    agg = scores.aggregate(rows)
    assert agg["n"] == 4 and agg["failed"] == 2
    assert agg["metrics"]["em"] == pytest.approx(1 / 4)
    assert agg["metrics"]["f1"] == pytest.approx(1.5 / 4)
    assert agg["metrics"]["cover_em"] == pytest.approx(2 / 4)
    assert agg["metrics"]["mc_acc"] == 0.0 and agg["n_multiple_choice"] == 1
    assert agg["metrics"]["judge"] == pytest.approx(2 / 4)
    assert set(agg["ci95"]) == set(agg["metrics"])
    for key, (lo, hi) in agg["ci95"].items():
        assert 0.0 <= lo <= agg["metrics"][key] <= hi <= 1.0


def test_percent_means_of_episodes_agree_with_the_question_rows():
    """PPO's held-out numbers (`percent_means`): `aggregate`'s means and intervals, in percent; a failed
    episode scores 0 as in `question_rows`."""
    rows = scores.question_rows([ep.question for ep in EPISODES], {ep.question.id: ep for ep in EPISODES})
    agg, means = scores.aggregate(rows), scores.percent_means(EPISODES)
    assert list(means) == ["em", "f1", "cover_em"]
    for key, summary in means.items():
        assert summary["mean"] == pytest.approx(100 * agg["metrics"][key])
        assert summary["ci95"] == pytest.approx([100 * x for x in agg["ci95"][key]])
    assert scores.percent_means([]) == {
        m: {"mean": 0.0, "ci95": [0.0, 0.0]} for m in ("em", "f1", "cover_em")
    }


def test_bootstrap_interval_is_seeded_and_narrows_with_more_questions():
    assert scores.bootstrap_ci([]) == (0.0, 0.0)
    assert scores.bootstrap_ci([0.5] * 10) == (0.5, 0.5)  # no spread, no uncertainty
    few = scores.bootstrap_ci([1.0, 0.0] * 10)
    many = scores.bootstrap_ci([1.0, 0.0] * 500)
    assert few == scores.bootstrap_ci([1.0, 0.0] * 10)  # seeded: the same report twice
    assert few[0] < 0.5 < few[1] and many[0] < 0.5 < many[1]
    assert many[1] - many[0] < (few[1] - few[0]) / 4  # the width falls like 1/sqrt(n): 50x the data
    # a 95 % interval of a fair coin over 1000 questions is about +-3.1 points
    assert many[0] == pytest.approx(0.469, abs=0.01) and many[1] == pytest.approx(0.531, abs=0.01)


def test_scores_recomputed_when_leaf_has_no_rewards():
    ep = retrieval_episode()
    ep.nodes[-1].rewards = {}
    calls = []

    def score(pred, q):
        calls.append((pred, q.id))
        return {"em": 1.0, "f1": 1.0, "cover_em": 1.0}

    assert scores.episode_scores(ep, score) == {"em": 1.0, "f1": 1.0, "cover_em": 1.0}
    assert calls == [("Rome city", "q2")]
    assert scores.episode_scores(ep) is None


def _summary() -> dict:
    rows = scores.question_rows([ep.question for ep in EPISODES], {ep.question.id: ep for ep in EPISODES})
    return {
        "workflow": "c3po",
        **scores.aggregate(rows),
        "stats": stats.workflow_stats(EPISODES),
        "normalization": "lowercase",
        "config": {},
        "failures": {"llm: timeout | 503": 1},
    }


def test_report_markdown_tables():
    md = report.render_report(_summary(), plots=["strategy.png"])
    assert "| c3po | 3 | 33.3 | 50.0 | 66.7 | 1 |" in md
    assert "| planning | 1 | 50.0 % |" in md
    assert "| filter | 2 | 1 | 50.0 % |" in md
    assert "| **all** | 6 | 1 | 16.7 % |" in md
    assert "| policy | 2.00 | 43.3 | 7.0 |" in md
    assert "![strategy.png](strategy.png)" in md
    assert "lowercase" in md
    assert "| llm: timeout \\| 503 | 1 |" in md


def test_metrics_table_several_workflows():
    a = {"workflow": "direct", "n": 2, "metrics": {"em": 0.5, "f1": 0.25, "cover_em": 0.5}, "failed": 0}
    b = {
        "workflow": "mc",
        "n": 2,
        "metrics": {"em": 1.0, "f1": 1.0, "cover_em": 1.0, "mc_acc": 0.5},
        "failed": 1,
    }
    md = report.metrics_table([a, b])
    assert md.splitlines()[0] == "| workflow | n | EM | F1 | cover-EM | MC acc | failed |"
    assert "| direct | 2 | 50.0 | 25.0 | 50.0 | – | 0 |" in md
    assert "| mc | 2 | 100.0 | 100.0 | 100.0 | 50.0 | 1 |" in md


def test_plots_written(tmp_path):
    names = plots.write_plots(stats.workflow_stats(EPISODES), tmp_path)
    assert names == ["strategy.png", "depth.png", "policy-acts.png"]  # depth: C-3PO Fig. 6 count
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_resume_roundtrip_and_truncated_tail(tmp_path):
    path = tmp_path / "episodes.jsonl"
    with traces.TraceWriter(path) as w:
        for ep in EPISODES:
            w.write(ep)
    full = path.read_bytes()
    loaded = traces.load_trace(path)
    assert set(loaded) == {"q1", "q2", "q3"}
    assert loaded["q1"].to_dict() == EPISODES[0].to_dict()
    assert traces.finished_ids(loaded) == {"q1", "q2"}  # the failed one is retried
    # an interrupted write: half of a fourth line
    extra = retrieval_episode()
    extra.question = _q("q4")
    path.write_bytes(full + extra.to_json().encode()[:50])
    assert set(traces.load_trace(path)) == {"q1", "q2", "q3"}
    assert path.read_bytes() == full  # cut off, so appending continues cleanly
    # a complete final record without its newline is kept and the newline added
    path.write_bytes(full + extra.to_json().encode())
    assert set(traces.load_trace(path)) == {"q1", "q2", "q3", "q4"}
    assert path.read_bytes().endswith(b"}\n")
    # a later record of the same question wins
    again = failed_episode()
    again.status = "ok"
    with traces.TraceWriter(path) as w:
        w.write(again)
    assert traces.load_trace(path)["q3"].status == "ok"


def test_trace_bad_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(EPISODES[0].to_json() + "\n{not json\n" + EPISODES[1].to_json() + "\n")
    with pytest.raises(ValueError, match=r"episodes.jsonl:2"):
        traces.load_trace(path)
    assert traces.load_trace(tmp_path / "missing.jsonl") == {}


def test_penalties_and_answer_info():
    ep = Episode(id="m", workflow="mmoa", question=_q("m1"))
    sel = ep.add(_policy(None, "selector", "select", p=5, c=5))
    ep.nodes[sel.id].action = Action("select", value=[0, 0], valid=False, error="duplicate ids", penalty=-1.0)
    ep.add(_policy(0, "generator", "answer", p=5, c=5, depth=2))
    info = {
        "variant": "qr-s-g",
        "forced": False,
        "invalid": 1,
        "subquestions": ["a", "b"],
        "penalties": {"selector": -1.0, "generator": 0.0},
    }
    ep.add(Node(id=0, parent=1, kind="answer", answer="x", info=info, depth=2))
    s = stats.workflow_stats([ep, planning_episode()])
    assert s["penalties"] == {"selector": {"penalized": 1, "mean": -1.0}}
    ai = s["answer_info"]
    assert ai["counts"] == {"forced": {"false": 1}, "strategy": {"planning": 1}, "variant": {"qr-s-g": 1}}
    assert ai["numeric"]["invalid"] == {"mean": 1.0, "max": 1.0, "n": 1}
    assert ai["numeric"]["penalties.selector"]["mean"] == -1.0
    assert "subquestions" not in ai["counts"] and "subquestions" not in ai["numeric"]
    md = report.render_report(
        {"workflow": "mmoa", "n": 2, "metrics": {"em": 0, "f1": 0, "cover_em": 0}, "failed": 0, "stats": s}
    )
    assert "| selector | 1 | -1.000 |" in md
    assert "| variant | qr-s-g | 1 |" in md and "| penalties.selector | -1.00 | -1.00 | 1 |" in md


def test_free_text_info_is_not_tabulated():
    eps = []
    for i in range(stats.MAX_CATEGORIES + 1):
        ep = retrieval_episode()
        ep.nodes[-1].info = {"roadmap": f"plan {i}"}
        eps.append(ep)
    assert stats.answer_info_stats(eps)["counts"] == {}


def test_report_names_only_the_models_the_team_calls():
    """A team that calls no LLM server (`needs` without `llm`: MMOA-RAG, a Self-Ask policy) has no `llm:` line
    in report.md, though its config holds the default LLM; a metrics.json without `needs` keeps both lines."""
    models = {
        "policy": {"backend": "local", "model": "tiny"},
        "llm": {"backend": "local", "model": "smollm2"},
    }
    summary = {**_summary(), "config": models}
    assert "- llm: local `smollm2`" in report.render_report(summary)
    md = report.render_report({**summary, "needs": ["policy", "retriever"]})
    assert "- policy: local `tiny`" in md and "- llm:" not in md
