"""`ragteam demo` end to end on the bundled data, with the tiny model standing in for SmolLM2."""

from __future__ import annotations

import json

from ragteam.cli.main import main


def test_demo_indexes_searches_and_evaluates(tmp_path, capsys):
    out = tmp_path / "demo"
    argv = ["demo", "--out", str(out), "--questions", "2", "--workflows", "standard-rag", "c3po"]
    assert main([*argv, "--model.model", "tiny", "--model.threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "passages, indexes bm25, dense" in printed
    assert "hits for" in printed and "1. [" in printed  # the search printed a ranking
    summary = (out / "summary.md").read_text()
    for wf in ("standard-rag", "c3po"):
        metrics = json.loads((out / wf / "metrics.json").read_text())
        assert metrics["n"] == 2 and metrics["failed"] == 0
        assert f"| {wf} | 2 |" in summary
    episodes = (out / "c3po" / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 2

    # a second run resumes: nothing is rolled out again, the table is the same
    assert main([*argv, "--model.model", "tiny", "--model.threads", "1"]) == 0
    assert (out / "c3po" / "episodes.jsonl").read_text().splitlines() == episodes
