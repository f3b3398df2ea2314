"""A harder retrieval environment (issue 10, item 4): the corpus pooled from every bundled file, `--corpus FILE`,
and what the eval report states about either (size, gold presence, recall@k)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import hotpot_head

from ragteam.cli.main import main
from ragteam.data import read_corpus, read_questions, write_corpus
from ragteam.data.pooled import data_files, folder_key, pool_files, write_pool
from ragteam.retrieval.factory import pooled_index
from ragteam.types import Doc, doc_id

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--no-progress", "--retriever.kind", "bm25"]
TINY += ["--rollout.llm-max-tokens", "4", "--topk", "3"]


@pytest.fixture()
def folder(shared_data: Path, tmp_path: Path) -> Path:
    """A small data folder: 5 HotpotQA records, 20 PopQA records, 3 NQ questions (no paragraphs), a passage
    file that repeats one HotpotQA paragraph, a README and a JSON file that is neither kind."""
    root = tmp_path / "data"
    (root / "more").mkdir(parents=True)
    hotpot_head(shared_data, root, 5)
    popqa = json.loads((shared_data / "popqa-1000.json").read_text(encoding="utf-8"))[:20]
    (root / "more" / "popqa-20.json").write_text(json.dumps(popqa), encoding="utf-8")
    nq = (shared_data / "nq-open-dev.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    (root / "nq-3.jsonl").write_text("\n".join(nq) + "\n", encoding="utf-8")
    first = read_questions(root / "hotpotqa-dev-5.jsonl").questions[0].context[0]
    passages = [Doc("w1", first.title, first.text), Doc("w2", "Elsewhere", "A passage about nothing asked.")]
    write_corpus(root / "wiki.jsonl", passages, contents=True)
    (root / "README.md").write_text("# not data\n")
    (root / "settings.json").write_text('[{"alpha": 1}]\n')
    return root


def test_pool_reads_every_file_dedups_and_says_what_each_added(folder):
    files = data_files(folder)
    assert [p.relative_to(folder).as_posix() for p in files] == [
        "hotpotqa-dev-5.jsonl",
        "more/popqa-20.json",
        "nq-3.jsonl",
        "settings.json",
        "wiki.jsonl",
    ]  # sorted, subfolders included, README left out
    docs, sources = pool_files(files)
    by = {Path(s.path).name: s for s in sources}
    hotpot, popqa = by["hotpotqa-dev-5.jsonl"], by["popqa-20.json"]
    assert (hotpot.kind, hotpot.format) == ("questions", "hotpotqa") and hotpot.new == hotpot.passages > 40
    assert (popqa.kind, popqa.format) == ("questions", "popqa") and popqa.passages > 0
    assert by["nq-3.jsonl"].passages == 0 and "no paragraphs" in by["nq-3.jsonl"].note
    assert by["settings.json"].kind == "skipped" and "neither a benchmark file" in by["settings.json"].note
    wiki = by["wiki.jsonl"]
    assert (wiki.kind, wiki.passages, wiki.new) == ("passages", 2, 1)  # the repeated paragraph is not new
    assert len(docs) == sum(s.new for s in sources) == hotpot.passages + popqa.new + 1
    assert len({d.id for d in docs}) == len(docs)
    assert all(d.id == doc_id(d.title, d.text) for d in docs)  # the ids supporting_ids use
    gold = {i for q in read_questions(folder / "hotpotqa-dev-5.jsonl").questions for i in q.supporting_ids}
    assert gold <= {d.id for d in docs}


def test_pool_key_changes_with_any_file(folder):
    files = data_files(folder)
    key = folder_key(files, folder)
    assert folder_key(files, folder) == key
    with open(folder / "wiki.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "w3", "contents": '"New"\nOne more passage.'}) + "\n")
    assert folder_key(files, folder) != key


def test_write_pool_and_cached_index(folder, tmp_path):
    out, sources = write_pool(folder, tmp_path / "pool.jsonl")
    docs = read_corpus(out)
    assert len(docs) == sum(s.new for s in sources)
    listed = json.loads(Path(str(out) + ".sources.json").read_text())["sources"]
    assert {s["path"] for s in listed} >= {"more/popqa-20.json", "wiki.jsonl"}  # relative to the folder
    index = pooled_index(folder, kinds=("bm25",), progress=False)
    assert len(index) == len(docs)
    manifest = (index.path / "manifest.json").read_bytes()
    again = pooled_index(folder, kinds=("bm25",), progress=False)
    assert again.path == index.path and (again.path / "manifest.json").read_bytes() == manifest  # not rebuilt


def test_bundled_pool_holds_every_file_with_passages(shared_data):
    """The real bundled folder: HotpotQA's, PopQA's, the format samples' paragraphs and the Wikipedia sample."""
    docs, sources = pool_files(data_files(shared_data))
    by = {Path(s.path).name: s for s in sources}
    assert by["hotpotqa-dev-500.jsonl"].new == 4858
    assert by["wiki18-sample-1000.jsonl"].kind == "passages" and by["wiki18-sample-1000.jsonl"].new == 1000
    assert by["popqa-1000.json"].new > 1000 and by["musique-sample.jsonl"].new > 0
    assert by["nq-open-dev.jsonl"].passages == 0
    assert not [s for s in sources if s.kind == "skipped"]
    assert len(docs) > 7000


def test_eval_on_the_pooled_corpus_reports_size_gold_and_recall(folder, tmp_path):
    data = folder / "hotpotqa-dev-5.jsonl"
    runs = {}
    for corpus in (None, f"pooled:{folder}"):
        out = tmp_path / ("run-pooled" if corpus else "run-None")
        extra = ["--corpus", corpus] if corpus else []
        args = ["eval", "--workflow", "standard-rag", "--data", str(data), "--out", str(out), *TINY, *extra]
        assert main([*args, "--limit", "3"]) == 0
        runs[corpus and "pooled"] = json.loads((out / "metrics.json").read_text())["corpus"]
    distractor, pooled = runs[None], runs["pooled"]
    assert pooled["kind"] == "folder" and str(folder) in pooled["name"]
    assert pooled["passages"] > distractor["passages"]  # the other files' passages are distractors too
    assert pooled["gold"] == {"questions": 3, "all_present": 3}
    assert pooled["recall_at_k"]["k"] == 3 and pooled["recall_at_k"]["questions"] == 3
    assert {s["path"] for s in pooled["pool_sources"]} >= {"wiki.jsonl", "nq-3.jsonl"}
    md = (tmp_path / "run-pooled" / "report.md").read_text()
    assert f"{pooled['passages']:,} passages; gold paragraphs present for 3 of 3" in md
    assert "| `nq-3.jsonl` | questions | nq-open | 0 | 0 | its records carry no paragraphs |" in md


def test_eval_on_a_corpus_file_matches_gold_by_content(shared_data, tmp_path):
    data = hotpot_head(shared_data, tmp_path, 3)
    questions = read_questions(data).questions
    # the file names passages its own way; the gold paragraphs of question 0 only, and a distractor
    gold = [d for d in questions[0].context if d.id in questions[0].supporting_ids]
    docs = [Doc(f"mine-{i}", d.title, d.text) for i, d in enumerate(gold)]
    docs.append(Doc("mine-x", "Unrelated", "Nothing relevant to any question here."))
    corpus = tmp_path / "mine.jsonl"
    write_corpus(corpus, docs)
    out = tmp_path / "run"
    args = ["eval", "--workflow", "standard-rag", "--data", str(data), "--out", str(out), *TINY]
    assert main([*args, "--corpus", str(corpus)]) == 0
    c = json.loads((out / "metrics.json").read_text())["corpus"]
    assert c["kind"] == "file" and c["passages"] == 3
    assert c["gold"] == {"questions": 3, "all_present": 1}
    assert c["recall_at_k"]["recall"] == pytest.approx(1 / 3)  # only question 0 can find its gold, and does
    md = (out / "report.md").read_text()
    assert "gold paragraphs present for 1 of 3 (33.3 %) questions" in md


def test_corpus_errors_name_the_problem(shared_data, tmp_path, capsys):
    data = hotpot_head(shared_data, tmp_path, 2)
    base = ["eval", "--workflow", "standard-rag", "--data", str(data), "--out", str(tmp_path / "x"), *TINY]
    assert main([*base, "--corpus", str(tmp_path / "absent.jsonl")]) == 1
    assert "absent.jsonl: no such corpus file" in capsys.readouterr().err
    assert main([*base, "--corpus", "pooled", "--retriever.index", str(tmp_path)]) == 1
    assert "--corpus pooled and --retriever.index both name a corpus" in capsys.readouterr().err
    twice = tmp_path / "twice.jsonl"  # streamed into the index: a repeated id is named by its line
    write_corpus(twice, [Doc("a", "One", "first text"), Doc("b", "Two", "other"), Doc("a", "Three", "x")])
    assert main([*base, "--corpus", str(twice)]) == 1
    err = capsys.readouterr().err
    assert "twice.jsonl:3" in err and "'a'" in err
