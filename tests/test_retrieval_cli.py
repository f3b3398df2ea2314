"""`ragteam index`, `ragteam search` and `ragteam eval-retrieval` on small real data."""

from __future__ import annotations

import json

from ragteam.cli.main import main
from ragteam.data.questions import read_questions
from ragteam.retrieval.index import read_manifest


def test_index_then_search_readable_and_json(hotpot_small, tmp_path, capsys):
    out = tmp_path / "idx"
    assert main(["index", "--data", str(hotpot_small), "--out", str(out), "--kinds", "bm25"]) == 0
    printed = capsys.readouterr().out
    manifest = read_manifest(out)
    assert manifest["kinds"] == ["bm25"] and f"{manifest['num_docs']} passages" in printed
    assert main(["search", "Corliss Archer in Kiss and Tell", "--index", str(out), "--k", "3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 hits for 'Corliss Archer in Kiss and Tell' (bm25)")
    assert "  1. [" in text and "Corliss Archer" in text
    assert main(["search", "Shirley Temple", "--index", str(out), "--k", "2", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 2 and set(hits[0]) == {"id", "title", "text", "score"}
    assert hits[0]["title"] == "Shirley Temple" and hits[0]["score"] >= hits[1]["score"]


def test_index_from_corpus_file_and_clear_errors(shared_data, tmp_path, capsys):
    out = tmp_path / "wiki"
    corpus = str(shared_data / "wiki18-sample-1000.jsonl")
    assert main(["index", "--corpus", corpus, "--out", str(out), "--kinds", "bm25"]) == 0
    assert read_manifest(out)["num_docs"] == 1000
    capsys.readouterr()
    assert main(["index", "--corpus", corpus, "--data", corpus, "--out", str(out)]) == 1
    assert "exactly one of --corpus" in capsys.readouterr().err
    assert main(["search", "anything", "--index", str(out), "--kind", "dense"]) == 1
    assert "--kinds dense" in capsys.readouterr().err
    assert main(["search", "anything", "--index", str(tmp_path / "missing")]) == 1
    assert "not an index folder" in capsys.readouterr().err


def test_eval_retrieval_json_reports_three_recalls(hotpot_small, hotpot_small_index, capsys):
    assert main(["eval-retrieval", "--data", str(hotpot_small), "--k", "10", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert list(report) == ["bm25", "dense", "hybrid"]
    for scores in report.values():
        assert set(scores) == {"recall@10", "support_recall@10"}
        assert 0.0 <= scores["recall@10"] <= scores["support_recall@10"] <= 1.0
    assert "20 questions" in captured.err and str(hotpot_small_index.path) in captured.err
    # Recomputed by hand from BM25 hits: the CLI's number is exactly the all-supporting rate.
    from ragteam.retrieval.bm25 import BM25Retriever

    qs = read_questions(hotpot_small).questions
    hits = BM25Retriever(hotpot_small_index.path).search([q.question for q in qs], 10)
    full = sum(set(q.supporting_ids) <= {h.doc.id for h in row} for q, row in zip(qs, hits)) / len(qs)
    assert report["bm25"]["recall@10"] == round(full, 4)


def test_eval_retrieval_table_and_k(hotpot_small, hotpot_small_index, capsys):
    assert main(["eval-retrieval", "--data", str(hotpot_small), "--k", "2", "--kinds", "bm25", "hybrid"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["retriever", "recall@2", "support_recall@2"]
    assert [line.split()[0] for line in out[1:]] == ["bm25", "hybrid"]


def test_eval_retrieval_refuses_files_without_supporting_paragraphs(shared_data, capsys):
    assert main(["eval-retrieval", "--data", str(shared_data / "triviaqa-test-1000.jsonl")]) == 1
    assert "supporting paragraphs" in capsys.readouterr().err


def test_eval_retrieval_on_a_joined_corpus_finds_no_more_than_on_the_file(hotpot_small, shared_data, capsys):
    """`--corpus pooled+FILE`: the Wikipedia sample's 1,000 passages join the file's; the gold paragraphs are
    the same, among more distractors, so BM25's recall cannot rise. Other corpora are refused by name."""
    args = ["eval-retrieval", "--data", str(hotpot_small), "--k", "5", "--kinds", "bm25", "--json"]
    assert main(args) == 0
    alone = json.loads(capsys.readouterr().out)["bm25"]
    wiki = shared_data / "wiki18-sample-1000.jsonl"
    assert main([*args, "--corpus", f"pooled+{wiki}"]) == 0
    captured = capsys.readouterr()
    joined = json.loads(captured.out)["bm25"]
    assert "wiki18-sample-1000.jsonl" in captured.err and "passages" in captured.err
    assert joined["support_recall@5"] <= alone["support_recall@5"]
    assert main([*args, "--corpus", str(wiki)]) == 1
    assert "only pooled corpora keep" in capsys.readouterr().err
