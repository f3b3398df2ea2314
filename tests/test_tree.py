"""Episode trees: paths and leaves, and the JSONL round trip (one episode a line, loads back equal)."""

from __future__ import annotations

import pytest

from ragteam.llm.base import Completion
from ragteam.rollout.traces import read_episodes, write_episodes
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Action, Doc, Hit, Question


def branched_episode() -> Episode:
    """retrieve -> two policy samples -> (llm -> ok leaf) and (failed leaf), plus a truncated empty answer."""
    q = Question(id="q1", question="Who?", golden_answers=["Ann", "Anne"], metadata={"type": "bridge"})
    ep = Episode(id="q1", workflow="test", question=q, meta={"seconds": 1.25})
    hits = [[Hit(Doc("p1", "Ann", "Ann was born."), 3.5), Hit(Doc("p2", "", "No title here."), 1.0)]]
    r = ep.add(Node(id=-1, parent=None, kind="retrieve", queries=["Who?"], k=2, hits=hits, seconds=0.012))
    comp = Completion("retrieve again", "stop", 7, 3, [1, 2, 3, 4, 5, 6, 7], [8, 9, 10], [-0.5, -1.25, -0.0])
    a = ep.add(
        Node(
            id=-1,
            parent=r.id,
            kind="policy",
            role="router",
            depth=1,
            messages=[{"role": "user", "content": "Who? é ✓"}],
            completion=comp,
            action=Action("retrieval", value=["q", 1], valid=False, error="bad", penalty=-0.5),
            seconds=0.5,
        )
    )
    b = ep.add(
        Node(
            id=-1, parent=r.id, kind="policy", role="router", depth=1, completion=Completion(""), seconds=0.5
        )
    )
    llm = ep.add(
        Node(
            id=-1,
            parent=a.id,
            kind="llm",
            role="answer",
            depth=1,
            messages=[{"role": "user", "content": "x"}],
            completion=Completion("Ann"),
        )
    )
    ep.add(
        Node(
            id=-1,
            parent=llm.id,
            kind="answer",
            depth=1,
            answer="Ann",
            info={"strategy": "retrieval"},
            rewards={"em": 1.0, "f1": 1.0},
        )
    )
    ep.add(Node(id=-1, parent=b.id, kind="answer", depth=1, answer="", status="truncated", error="max_depth"))
    ep.add(Node(id=-1, parent=b.id, kind="answer", depth=1, answer="", status="failed", error="boom"))
    ep.status, ep.error = "failed", "boom"
    return ep


def test_tree_navigation():
    ep = branched_episode()
    assert [n.id for n in ep.children(None)] == [0] and [n.id for n in ep.children(0)] == [1, 2]
    assert [n.kind for n in ep.path(4)] == ["retrieve", "policy", "llm", "answer"]
    assert [n.status for n in ep.leaves()] == ["ok", "truncated", "failed"]
    assert len(ep.policy_nodes()) == 2 and ep.answer == "Ann"


def test_jsonl_round_trip_is_exact(tmp_path):
    episodes = [branched_episode(), Episode(id="q2", workflow="test", question=Question("q2", "Why?", []))]
    path = tmp_path / "episodes.jsonl"
    write_episodes(path, episodes)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    loaded = list(read_episodes(path))
    assert loaded == episodes
    # empty answers stay "" (not None), so a truncated or failed leaf reads back as it was written
    assert [n.answer for n in loaded[0].leaves()] == ["Ann", "", ""]
    write_episodes(path, episodes[:1], append=True)
    assert [e.id for e in read_episodes(path)] == ["q1", "q2", "q1"]


def test_bad_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(branched_episode().to_json() + "\n\n" + '{"id": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: not an episode record"):
        list(read_episodes(path))
