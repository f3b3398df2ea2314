"""`ragteam ask` end to end: the tiny model as policy and LLM, real BM25 over HotpotQA paragraphs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import hotpot_head

from ragteam.cli.main import main
from ragteam.rollout.tree import Episode

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "12", "--rollout.llm-max-tokens", "8"]


@pytest.fixture(scope="module")
def hotpot3(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("data"), 3)


def test_ask_prints_readable_trace(hotpot3, capsys):
    rc = main(
        [
            "ask",
            "Who portrayed Corliss Archer in Kiss and Tell?",
            "--workflow",
            "standard-rag",
            "--data",
            str(hotpot3),
            "--topk",
            "2",
            *TINY,
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("Question: Who portrayed Corliss Archer in Kiss and Tell?")
    assert "retrieve top-2" in out and "query: 'Who portrayed Corliss Archer in Kiss and Tell?'" in out
    assert "      1. " in out and "      2. " in out  # two documents: title and first words
    assert "LLM answer" in out and "\nAnswer: " in out


def test_ask_c3po_by_id_json_parses_as_episode(hotpot3, capsys, tmp_path):
    qid = json.loads(hotpot3.read_text().splitlines()[1])["question_id"]
    saved = tmp_path / "ep.json"
    rc = main(
        [
            "ask",
            "--id",
            qid,
            "--data",
            str(hotpot3),
            "--workflow",
            "c3po",
            "--json",
            "--out",
            str(saved),
            *TINY,
        ]
    )
    assert rc == 0
    ep = Episode.from_dict(json.loads(capsys.readouterr().out))
    assert ep.question.id == qid and ep.workflow == "c3po" and ep.status == "ok"
    assert ep.policy_nodes()[0].role == "router"
    leaf = ep.leaves()[0]
    assert "strategy" in leaf.info and set(leaf.rewards) >= {"em", "f1", "cover_em"}
    assert Episode.from_dict(json.loads(saved.read_text())).to_dict() == ep.to_dict()
    # the readable form names the roles
    assert main(["ask", "--id", qid, "--data", str(hotpot3), "--workflow", "c3po", *TINY]) == 0
    text = capsys.readouterr().out
    assert "router  (policy, depth 1)" in text and "scores: em" in text


def test_ask_defaults_to_bundled_demo_corpus(capsys):
    rc = main(["ask", "Which city is the capital of France?", "--workflow", "standard-rag", *TINY])
    assert rc == 0
    captured = capsys.readouterr()
    assert "bundled demo" in captured.err and "retrieve top-2" in captured.out


def test_ask_errors_are_clear(hotpot3, capsys):
    assert main(["ask", "--workflow", "direct", *TINY]) == 1
    assert "give a question" in capsys.readouterr().err
    assert main(["ask", "--id", "nope", "--data", str(hotpot3), *TINY]) == 1
    assert "no question with id 'nope'" in capsys.readouterr().err
    assert main(["ask", "--id", "x", *TINY]) == 1
    assert "--id needs --data" in capsys.readouterr().err
