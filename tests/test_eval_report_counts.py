"""What the eval report counts (issue 10, item 3): the strategy ratio over valid router acts only, with
malformed and forced ones counted apart; depth counted as C-3PO's t (Fig. 6); skipped records counted and listed
by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import hotpot_head

from ragteam.cli.main import main
from ragteam.eval import report
from ragteam.llm.base import Completion
from ragteam.rollout.tree import Episode, Node
from ragteam.stats import episodes as stats
from ragteam.types import Action, Doc, Hit, Question


def _q(i: int) -> Question:
    return Question(id=f"q{i}", question=f"question {i}?", golden_answers=["x"])


class _Build:
    """Appends nodes to an unbranched episode, each the child of the previous one."""

    def __init__(self, i: int, strategy: str | None, forced: bool = False) -> None:
        self.ep = Episode(id=f"e{i}", workflow="c3po", question=_q(i))
        self.strategy, self.forced = strategy, forced

    def _add(self, **kw) -> _Build:
        parent = len(self.ep.nodes) - 1 if self.ep.nodes else None
        self.ep.add(Node(id=0, parent=parent, **kw))
        return self

    def act(self, role: str, kind: str, valid: bool = True, forced_tokens: int = 0) -> _Build:
        done = Completion(text=kind, prompt_tokens=5, completion_tokens=2, forced_tokens=forced_tokens)
        return self._add(kind="policy", role=role, completion=done, action=Action(kind, valid=valid))

    def llm(self, purpose: str) -> _Build:
        return self._add(kind="llm", role=purpose, completion=Completion(text="t"))

    def search(self) -> _Build:
        return self._add(kind="retrieve", queries=["q"], k=1, hits=[[Hit(Doc("d", "T", "text"), 1.0)]])

    def done(self) -> Episode:
        info = (
            {"forced": self.forced}
            if self.strategy is None
            else {"strategy": self.strategy, "forced": self.forced}
        )
        return self._add(kind="answer", answer="x", info=info).ep


def direct(i: int) -> Episode:
    return _Build(i, "no_retrieval").act("router", "no_retrieval").llm("answer").done()


def single_pass(i: int, valid: bool = True) -> Episode:
    b = _Build(i, "retrieval").act("router", "retrieval", valid=valid)
    return b.search().act("filter", "select").llm("answer").done()


def planning(i: int, rounds: int) -> Episode:
    b = _Build(i, "planning").act("router", "planning").llm("roadmap")
    for _ in range(rounds):
        b.act("decider", "retrieval").search().act("filter", "select")
    return b.act("decider", "llm").llm("answer").done()


def test_tree_depth_counts_like_c3po_fig6():
    # C-3PO's t: router + answer call + answer; + filter (the search is no step); planning: 5 + 2 per round
    assert stats.tree_depth(direct(0)) == 3
    assert stats.tree_depth(single_pass(1)) == 4
    assert [stats.tree_depth(planning(2, r)) for r in (0, 1, 2, 3, 4)] == [5, 7, 9, 11, 13]
    # the policy-act count is still there, beside it
    assert stats.policy_depth(direct(0)) == 1 and stats.policy_depth(planning(2, 2)) == 6
    s = stats.workflow_stats([direct(0), single_pass(1), planning(2, 1)])
    assert s["tree_depth"]["histogram"] == {"3": 1, "4": 1, "7": 1}
    assert s["depth"]["histogram"] == {"1": 1, "2": 1, "4": 1}


def test_strategy_ratio_counts_valid_router_acts_only():
    forced_prefix = _Build(5, "planning").act("router", "planning", forced_tokens=3).llm("answer").done()
    forced_flag = _Build(6, "retrieval", forced=True).search().act("filter", "select").llm("answer").done()
    stopped = _Build(7, "no_retrieval").llm("answer").done()  # the budget stopped the router: no act
    episodes = [
        direct(0),
        planning(1, 1),
        planning(2, 2),
        single_pass(3, valid=False),  # malformed router act: the fallback's single pass
        single_pass(4, valid=False),
        forced_prefix,
        forced_flag,
        stopped,
    ]
    s = stats.workflow_stats(episodes)
    # three valid choices: 1 direct, 2 planning; the 2 fallbacks would have made "retrieval" the top strategy
    assert s["strategy"] == {
        "counts": {"planning": 2, "no_retrieval": 1},
        "ratio": {"planning": pytest.approx(2 / 3), "no_retrieval": pytest.approx(1 / 3)},
        "n": 3,
    }
    ex = s["strategy_excluded"]
    assert ex["valid"] == 3
    assert ex["invalid"] == {"n": 2, "took": {"retrieval": 2}}
    assert ex["forced"] == {"n": 2, "took": {"planning": 1, "retrieval": 1}}
    assert ex["no_act"] == {"n": 1, "took": {"no_retrieval": 1}}
    # the router's invalid rate per role is reported apart, over every router act
    assert s["invalid_actions"]["by_role"]["router"]["invalid"] == 2
    md = "\n".join(report.strategy_section(s["strategy"], ex))
    assert "| planning | 2 | 66.7 % |" in md and "| retrieval |" not in md
    assert "malformed router act (the fallback strategy was taken): 2 (retrieval 2)" in md
    assert "strategy forced (--strategy or a forced prefix): 2" in md
    assert "Shares are over the 3 questions whose router act was valid" in md


def test_every_router_act_malformed_gives_no_ratio():
    s = stats.workflow_stats([single_pass(0, valid=False), single_pass(1, valid=False)])
    assert s["strategy"]["n"] == 0 and s["strategy"]["counts"] == {}
    md = "\n".join(report.strategy_section(s["strategy"], s["strategy_excluded"]))
    assert "No router act was valid" in md and "Shares are over" not in md
    assert "(retrieval 2)" in md


def test_workflows_without_strategy_have_no_strategy_section():
    ep = _Build(0, None).act("actor", "answer").done()
    s = stats.workflow_stats([ep])
    assert "strategy" not in s and "strategy_excluded" not in s
    assert s["tree_depth"]["histogram"] == {"2": 1}  # question + the actor's answer


TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--no-progress", "--rollout.llm-max-tokens", "4"]


@pytest.fixture()
def with_bad_lines(shared_data: Path, tmp_path: Path) -> Path:
    """Four good HotpotQA records with a broken line (3) and a record missing its question (6) among them."""
    good = (shared_data / "hotpotqa-dev-500.jsonl").read_text(encoding="utf-8").splitlines()[:4]
    broken = json.loads(good[0])
    del broken["question_text"]
    lines = [good[0], good[1], "{not json", good[2], good[3], json.dumps(broken)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_skipped_records_counted_and_listed_by_line(with_bad_lines, tmp_path):
    out = tmp_path / "run"
    args = ["eval", "--workflow", "direct", "--data", str(with_bad_lines), "--out", str(out), *TINY]
    assert main([*args, "--skip-bad"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["n"] == 4
    assert m["skipped"] == {"records": 2, "file": "skipped.jsonl"}
    rows = [json.loads(line) for line in (out / "skipped.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == [3, 6]
    assert "not valid JSON" in rows[0]["error"] and "question" in rows[1]["error"]
    assert rows[0]["file"] == str(with_bad_lines)
    md = (out / "report.md").read_text()
    assert "- skipped records of the data file: 2 (--skip-bad; their line numbers" in md
    # a clean file on the same folder: 0 stated, and the stale list removed
    clean = tmp_path / "clean.jsonl"
    clean.write_text("\n".join(with_bad_lines.read_text().splitlines()[:2]) + "\n")
    args = ["eval", "--workflow", "direct", "--data", str(clean), "--out", str(out), *TINY, "--overwrite"]
    assert main(args) == 0
    assert json.loads((out / "metrics.json").read_text())["skipped"] == {"records": 0, "file": None}
    assert not (out / "skipped.jsonl").exists()
    assert "- skipped records of the data file: 0" in (out / "report.md").read_text()


def test_distractor_corpus_is_named_and_measured(shared_data, tmp_path):
    data = hotpot_head(shared_data, tmp_path, 5)
    out = tmp_path / "srag"
    args = ["eval", "--workflow", "standard-rag", "--data", str(data), "--out", str(out), *TINY]
    assert main([*args, "--retriever.kind", "bm25", "--topk", "3", "--limit", "3"]) == 0
    c = json.loads((out / "metrics.json").read_text())["corpus"]
    assert c["kind"] == "distractor"
    assert c["name"] == "distractor: the own paragraphs of the run's 3 questions, gold included"
    assert 25 <= c["passages"] <= 30  # ~10 paragraphs for each of the 3 questions run, not the file's 5
    assert c["gold"] == {"questions": 3, "all_present": 3}
    r = c["recall_at_k"]
    assert r["k"] == 3 and r["questions"] == 3 and 0.0 <= r["recall"] <= r["support_recall"] <= 1.0
    # standard RAG searches with the question at the same k: it found exactly what recall@k measures
    assert c["workflow_recall"]["support_recall"] == pytest.approx(r["support_recall"])
    md = (out / "report.md").read_text()
    assert "- corpus: distractor: the own paragraphs of the run's 3 questions, gold included; " in md
    assert "gold paragraphs present for 3 of 3 (100.0 %) questions" in md
    assert "recall@3 (every gold paragraph in the top 3)" in md


def test_a_workflow_that_does_not_retrieve_says_so(shared_data, tmp_path):
    data = hotpot_head(shared_data, tmp_path, 2)
    out = tmp_path / "direct"
    assert main(["eval", "--workflow", "direct", "--data", str(data), "--out", str(out), *TINY]) == 0
    c = json.loads((out / "metrics.json").read_text())["corpus"]
    assert c == {"kind": "none", "name": "none: the workflow does not retrieve"}
