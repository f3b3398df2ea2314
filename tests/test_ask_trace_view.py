"""The readable trace of `ragteam ask`, on hand-built episode trees (chain and branched)."""

from __future__ import annotations

from ragteam.eval.trace_view import clip, first_words, format_episode
from ragteam.llm.base import Completion
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Action, Doc, Hit, Question


def _episode() -> Episode:
    q = Question(id="q", question="Who wrote Hamlet?", golden_answers=["William Shakespeare"])
    ep = Episode(id="q", workflow="c3po", question=q, meta={"seconds": 1.5})
    ep.add(
        Node(
            id=0,
            parent=None,
            kind="policy",
            role="router",
            depth=1,
            completion=Completion("[Planning]", prompt_tokens=40, completion_tokens=3),
            action=Action("planning"),
            messages=[{"role": "user", "content": "ROUTER PROMPT"}],
        )
    )
    ep.add(
        Node(
            id=0,
            parent=0,
            kind="llm",
            role="roadmap",
            depth=1,
            completion=Completion("1. find the play\n2. find its author"),
        )
    )
    doc = Doc(
        "d1",
        "Hamlet",
        "Hamlet is a tragedy written by William Shakespeare sometime between 1599 "
        "and 1601 and it is his longest play",
    )
    ep.add(
        Node(
            id=0, parent=1, kind="retrieve", depth=1, queries=["Hamlet author"], k=1, hits=[[Hit(doc, 7.25)]]
        )
    )
    ep.add(
        Node(
            id=0,
            parent=2,
            kind="policy",
            role="filter",
            depth=2,
            completion=Completion("garbage"),
            action=Action("select", value=["d1"], valid=False, error="no Action: line; kept all documents"),
        )
    )
    ep.add(
        Node(id=0, parent=3, kind="llm", role="answer", depth=2, completion=Completion("William Shakespeare"))
    )
    ep.add(
        Node(
            id=0,
            parent=4,
            kind="answer",
            depth=2,
            answer="William Shakespeare",
            info={"strategy": "planning"},
            rewards={"em": 1.0, "f1": 1.0},
        )
    )
    return ep


def test_format_chain_shows_roles_docs_roadmap_answer():
    text = format_episode(_episode())
    lines = text.splitlines()
    assert lines[0] == "Question: Who wrote Hamlet?"
    assert "Gold: William Shakespeare" in lines
    assert "[0] router  (policy, depth 1) · 0.00 s · 40+3 tokens" in text
    assert "    says: [Planning]" in lines and "    action: planning" in lines
    assert "[1] LLM roadmap" in text and "      2. find its author" in lines
    assert "    query: 'Hamlet author'" in lines
    assert (
        "      1. Hamlet: Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601 "
        "and …  (7.25)" in lines
    )
    assert "    INVALID: no Action: line; kept all documents" in lines
    assert '    info: {"strategy": "planning"}' in lines
    assert "    scores: em 1.00 · f1 1.00" in lines
    assert lines[-1] == "Answer: William Shakespeare"
    assert "ROUTER PROMPT" not in text
    assert "ROUTER PROMPT" in format_episode(_episode(), prompts=True)


def test_format_branched_tree_marks_branches():
    ep = _episode()
    # a second sample of the router that answers directly
    ep.add(
        Node(
            id=0,
            parent=None,
            kind="policy",
            role="router",
            depth=1,
            completion=Completion("[No Retrieval]"),
            action=Action("no_retrieval"),
        )
    )
    ep.nodes[-1].parent = None
    # make both routers children of one root LLM node to get a branch point
    root = Node(id=0, parent=None, kind="retrieve", queries=[], k=1, hits=[])
    ep.add(root)
    ep.nodes[0].parent = root.id
    ep.nodes[6].parent = root.id
    ep.add(Node(id=0, parent=6, kind="answer", depth=1, answer="Marlowe"))
    text = format_episode(ep)
    assert "── branch 1/2 ──" in text and "── branch 2/2 ──" in text
    assert "Answers (2 leaves): 'William Shakespeare' | 'Marlowe'" in text


def test_failed_episode_shows_error_once():
    q = Question(id="q", question="x?", golden_answers=[])
    ep = Episode(
        id="q", workflow="direct", question=q, status="failed", error="LLM call (answer) failed: 503"
    )
    ep.add(Node(id=0, parent=None, kind="answer", answer="", status="failed", error=ep.error))
    text = format_episode(ep)
    assert text.count("failed: 503") == 1
    assert "ANSWER: (empty)  [failed]" in text


def test_helpers():
    assert first_words("a b c d", 2) == "a b …"
    assert first_words("a b", 2) == "a b"
    assert clip("x" * 10, 4) == "xxxx … [6 more characters]"
