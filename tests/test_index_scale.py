"""An index that scales: streamed builds, embedding shards, IVF/HNSW, parts and resumption, old folders,
and bench/index_scale.py run at 20,000 passages (the 1,000,000-passage figures are in docs/scaling.md)."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from ragteam.cli.main import main
from ragteam.data.corpus import pool_corpus
from ragteam.data.questions import read_questions
from ragteam.retrieval import dense as dense_mod
from ragteam.retrieval import docstore as docstore_mod
from ragteam.retrieval.bm25 import BM25Retriever
from ragteam.retrieval.build_config import BM25Build, DenseBuild
from ragteam.retrieval.dense import DenseRetriever, open_embeddings
from ragteam.retrieval.docstore import write_docstore
from ragteam.retrieval.hybrid import HybridRetriever
from ragteam.retrieval.index import build_index, open_index, read_manifest
from ragteam.retrieval.shards import ShardedMatrix
from ragteam.types import Doc

ROOT = Path(__file__).resolve().parents[1]


class TinyEncoder:
    """A deterministic 16-d stand-in encoder (unit vectors seeded by the text) that counts its calls."""

    name = "test-tiny-16"
    dim = 16

    def __init__(self, fail_after: int | None = None):
        self.calls = 0
        self.fail_after = fail_after

    def encode(self, texts, progress=False):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("encoder died")
        self.calls += 1
        out = np.stack(
            [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(16) for t in texts]
        ).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def synthetic_docs(n: int, words: int = 100):
    """`n` passages of `words` made-up words, generated one at a time (never a list)."""
    rng = np.random.default_rng(0)
    vocab = [f"w{i}x{i * 7 % 13}" for i in range(5000)]
    for i in range(n):
        picks = rng.integers(0, len(vocab), words)
        yield Doc(f"d{i}", f"title {i}", " ".join(vocab[j] for j in picks))


def load_bench():
    spec = importlib.util.spec_from_file_location("index_scale", ROOT / "bench" / "index_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the streamed build equals the in-memory one -------------------------------------------------------------


def test_streamed_index_equals_in_memory_index_on_hotpot(
    hotpot_small, hotpot_small_index, tmp_path, monkeypatch
):
    """Passages streamed from a generator in chunks of 7, embedded 16 at a time into shards of 32 rows,
    BM25 in a small heap: same passages, same BM25 ranking and scores, same embeddings and the same
    exact-search results as brute force over one in-memory matrix, same hybrid ranking."""
    questions = read_questions(hotpot_small).questions
    docs = pool_corpus(questions)
    monkeypatch.setattr(docstore_mod, "CHUNK", 7)
    monkeypatch.setattr(dense_mod, "EMBED_CHUNK", 16)
    monkeypatch.setattr(dense_mod, "SEARCH_CHUNK", 50)
    pulled = []

    def stream():
        for d in docs:
            pulled.append(d.id)
            yield d

    folder = build_index(
        stream(),
        tmp_path / "streamed",
        progress=False,
        dense=DenseBuild(shard_rows=32),
        bm25=BM25Build(heap_mb=16, threads=1),
    )
    assert len(pulled) == len(docs) == len(folder) and list(folder.docs) == docs
    emb, meta = open_embeddings(folder.path)
    assert isinstance(emb, ShardedMatrix) and len(meta["shards"]) == math.ceil(len(docs) / 32)
    assert [s["rows"] for s in meta["shards"]][:-1] == [32] * (len(meta["shards"]) - 1)

    # the reference: the index of the same paragraphs built from a list, its embeddings as one array
    reference = np.asarray(open_embeddings(hotpot_small_index.path)[0], dtype=np.float32)
    streamed = np.concatenate([np.asarray(s) for s in emb.shards])
    assert streamed.shape == reference.shape
    assert np.allclose(streamed, reference, atol=1e-5)

    queries = [q.question for q in questions]
    bm25_s = BM25Retriever(folder.path, folder.docs).search_rows(queries, 10)
    bm25_r = BM25Retriever(hotpot_small_index.path, hotpot_small_index.docs).search_rows(queries, 10)
    for (rs, ss), (rr, sr) in zip(bm25_s, bm25_r):
        assert rs.tolist() == rr.tolist() and np.allclose(ss, sr, rtol=1e-6)

    dense = DenseRetriever(folder.path, folder.docs)
    qvec = dense.encoder.encode(queries)
    full = qvec @ reference.T  # brute force, in memory
    for j, (rows, scores) in enumerate(dense.search_vectors(qvec, 10)):
        want = np.argsort(-full[j], kind="stable")[:10]
        assert np.allclose(scores, full[j, want], atol=1e-5)
        assert rows.tolist() == want.tolist() or np.allclose(full[j, rows], full[j, want], atol=1e-5)

    hyb_s = HybridRetriever(BM25Retriever(folder.path, folder.docs), dense).search_rows(queries, 10)
    ref_dense = DenseRetriever(hotpot_small_index.path, hotpot_small_index.docs)
    hyb_r = HybridRetriever(BM25Retriever(hotpot_small_index.path), ref_dense).search_rows(queries, 10)
    same = np.mean([a[0].tolist() == b[0].tolist() for a, b in zip(hyb_s, hyb_r)])
    assert same >= 0.95  # float ties of fused scores aside, the same ranking


@pytest.mark.slow  # indexes of growing corpora in processes of their own
def test_streaming_build_memory_does_not_grow_with_the_corpus(tmp_path, monkeypatch):
    """5,000 then 25,000 passages streamed through docs + BM25 + dense (chunks of 1,024 passages): Python's
    allocation peak stays that of a chunk, not of the corpus (a build that gathered the passages in a list
    would need 5x more for 5x the passages)."""
    monkeypatch.setattr(docstore_mod, "CHUNK", 1024)
    monkeypatch.setattr(dense_mod, "EMBED_CHUNK", 512)
    peaks, sizes = [], []
    for n in (5_000, 25_000):
        sizes.append(sum(len(d.contents) for d in synthetic_docs(n)) / 2**20)
        tracemalloc.start()
        try:
            folder = build_index(
                synthetic_docs(n),
                tmp_path / f"n{n}",
                progress=False,
                encoder=TinyEncoder(),
                dense=DenseBuild(shard_rows=4096),
                bm25=BM25Build(heap_mb=32, threads=1),
            )
            peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        finally:
            tracemalloc.stop()
        assert len(folder) == n and folder.kinds == ["bm25", "dense"]
        assert folder.manifest["dense"]["shards"] == math.ceil(n / 4096)
    assert sizes[1] > 15 and peaks[1] < sizes[1] / 2, (peaks, sizes)
    assert peaks[1] < 1.25 * peaks[0] + 0.5, (peaks, sizes)


# --- shards: parts, resumption, dtype ------------------------------------------------------------------------


def test_parts_then_finish_equal_one_build_and_resume_keeps_finished_shards(tmp_path):
    docs = list(synthetic_docs(45, words=5))
    one = build_index(
        docs,
        tmp_path / "one",
        kinds=["dense"],
        progress=False,
        encoder=TinyEncoder(),
        dense=DenseBuild(shard_rows=10),
    )
    want = np.asarray(open_embeddings(one.path)[0][:45])

    out = tmp_path / "parts"
    build_index(docs, out, kinds=["bm25"], progress=False)
    for part in ("0/2", "1/2"):
        enc = TinyEncoder()
        folder = build_index(
            None,
            out,
            kinds=["dense"],
            progress=False,
            encoder=enc,
            dense=DenseBuild(shard_rows=10, part=part),
        )
        assert ("dense" in folder.kinds) == (part == "1/2")  # the part that completes the set finishes
        assert enc.calls == (3 if part == "0/2" else 2)  # shards 0, 2, 4 / 1, 3
    enc = TinyEncoder()
    folder = build_index(
        None, out, kinds=["dense"], progress=False, encoder=enc, dense=DenseBuild(shard_rows=10)
    )
    assert enc.calls == 0 and folder.kinds == ["bm25", "dense"]
    assert np.array_equal(np.asarray(open_embeddings(out)[0][:45]), want)

    # an encoder dying in shard 2: shards 0 and 1 stay, nothing half-written remains, a rerun embeds 3 shards
    crash = tmp_path / "crash"
    with pytest.raises(RuntimeError, match="encoder died"):
        build_index(
            docs,
            crash,
            kinds=["dense"],
            progress=False,
            encoder=TinyEncoder(fail_after=2),
            dense=DenseBuild(shard_rows=10),
        )
    assert sorted(p.name for p in (crash / "dense" / "shards").iterdir()) == ["00000.npy", "00001.npy"]
    enc = TinyEncoder()
    build_index(docs, crash, kinds=["dense"], progress=False, encoder=enc, dense=DenseBuild(shard_rows=10))
    assert enc.calls == 3 and np.array_equal(np.asarray(open_embeddings(crash)[0][:45]), want)

    half = build_index(
        docs,
        tmp_path / "half",
        kinds=["dense"],
        progress=False,
        encoder=TinyEncoder(),
        dense=DenseBuild(shard_rows=10, dtype="float16"),
    )
    emb = open_embeddings(half.path)[0]
    assert emb.dtype == np.float16 and np.allclose(emb[:45], want, atol=1e-3)
    rows, _ = DenseRetriever(half.path, encoder=TinyEncoder()).search_rows([docs[7].contents], 1)[0]
    assert rows.tolist() == [7]


def test_concurrent_builds_of_one_folder_keep_each_others_kinds(tmp_path):
    """BM25 in one process, embedding in others: a manifest written from a stale copy keeps what the
    other process recorded meanwhile (same corpus), and a manifest of another corpus replaces it."""
    from ragteam.retrieval.index import _write_manifest

    out = tmp_path / "x"
    build_index(list(synthetic_docs(30, words=5)), out, kinds=["bm25"], progress=False)
    stale = {**read_manifest(out), "kinds": ["dense"], "dense": {"shards": 1}}
    del stale["bm25"]
    _write_manifest(out, stale)
    merged = read_manifest(out)
    assert merged["kinds"] == ["bm25", "dense"] and "bm25" in merged and merged["dense"] == {"shards": 1}
    _write_manifest(out, {**merged, "corpus_sha1": "other", "kinds": []})
    assert read_manifest(out)["kinds"] == []


def test_part_setting_is_checked():
    assert DenseBuild(part="3/8").part_of() == (3, 8)
    for bad in ("8/8", "x", "1/0"):
        with pytest.raises(ValueError, match="part"):
            DenseBuild(part=bad)


# --- approximate indexes -------------------------------------------------------------------------------------


def test_ivf_and_hnsw_agree_with_exact_and_the_ivf_folder_can_move(tmp_path):
    docs = list(synthetic_docs(3000, words=8))
    folder = build_index(
        docs,
        tmp_path / "a",
        kinds=["dense"],
        progress=False,
        encoder=TinyEncoder(),
        dense=DenseBuild(shard_rows=700, index="ivf", nlist=16, nprobe=16),
    )
    meta = json.loads((folder.path / "dense" / "meta.json").read_text())
    assert meta["ann"]["ivf"]["nlist"] == 16 and meta["ann_default"] == "ivf"
    assert not (folder.path / "dense" / "ivf-blocks").exists()
    rng = np.random.default_rng(1)
    q = rng.standard_normal((50, 16)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    exact = DenseRetriever(folder.path, encoder=TinyEncoder()).search_vectors(q, 10)
    ivf = DenseRetriever(folder.path, encoder=TinyEncoder(), backend="faiss")
    assert ivf.ann_kind == "ivf" and ivf.nprobe == 16
    got = ivf.search_vectors(q, 10)  # every list probed: exactly exact search
    assert [r.tolist() for r, _ in got] == [r.tolist() for r, _ in exact]
    ivf.nprobe = 1
    fewer = np.mean([len(set(a[0]) & set(b[0])) / 10 for a, b in zip(exact, ivf.search_vectors(q, 10))])
    assert fewer < 1.0  # one list of 16: approximate indeed

    moved = tmp_path / "moved"
    shutil.move(folder.path, moved)
    again = DenseRetriever(moved, encoder=TinyEncoder(), backend="ivf").search_vectors(q, 10)
    assert [r.tolist() for r, _ in again] == [r.tolist() for r, _ in exact]

    # HNSW (8-bit codes, rescored from the shards) added to the same folder: near-exact with a wide search
    build_index(
        None,
        moved,
        kinds=["dense"],
        progress=False,
        encoder=TinyEncoder(),
        dense=DenseBuild(index="hnsw", codec="sq8", ef_search=256),
    )
    hnsw = DenseRetriever(moved, encoder=TinyEncoder(), backend="hnsw")
    assert hnsw.rescore and hnsw.ef_search == 256
    approx = hnsw.search_vectors(q, 10)
    recall = np.mean([len(set(a[0]) & set(b[0])) / 10 for a, b in zip(exact, approx)])
    assert recall >= 0.95
    vectors = open_embeddings(moved)[0][:3000]
    for j, (rows, scores) in enumerate(approx):  # exact scores of the rows found, best first
        assert np.allclose(scores, vectors[rows] @ q[j], atol=1e-5) and np.all(np.diff(scores) <= 1e-6)


def test_version_1_folder_with_one_embeddings_file_still_opens_and_gains_ivf(tmp_path):
    docs = list(synthetic_docs(300, words=6))
    folder = tmp_path / "v1"
    n, sha = write_docstore(folder, docs)
    emb = TinyEncoder().encode([d.contents for d in docs])
    (folder / "dense").mkdir()
    np.save(folder / "dense" / "embeddings.npy", emb)
    (folder / "dense" / "meta.json").write_text(json.dumps({"model": "x", "dim": 16, "normalized": True}))
    manifest = {
        "format": "ragteam-index",
        "version": 1,
        "kinds": ["dense"],
        "corpus_sha1": sha,
        "num_docs": n,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    r = DenseRetriever(open_index(folder).path, encoder=TinyEncoder())
    assert isinstance(r.embeddings, np.memmap)
    assert r.search([docs[5].contents], 1)[0][0].doc == docs[5]
    assert (
        DenseRetriever(folder, encoder=TinyEncoder(), backend="faiss").search([docs[9].contents], 1)[0][0].doc
        == docs[9]
    )
    build_index(
        None, folder, kinds=["dense"], progress=False, dense=DenseBuild(index="ivf", nlist=4, nprobe=4)
    )
    assert read_manifest(folder)["version"] == 2
    assert (
        DenseRetriever(folder, encoder=TinyEncoder(), backend="ivf").search([docs[3].contents], 1)[0][0].doc
        == docs[3]
    )


def test_query_encoder_must_match_the_one_that_embedded(tmp_path):
    folder = build_index(
        list(synthetic_docs(20, words=5)),
        tmp_path / "x",
        kinds=["dense"],
        progress=False,
        encoder=TinyEncoder(),
    )
    with pytest.raises(ValueError, match="embedded with 'test-tiny-16'"):
        DenseRetriever(folder.path)  # MiniLM would encode the queries


# --- docstore ------------------------------------------------------------------------------------------------


def test_repeated_ids_found_after_the_stream_and_named_by_line(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    rows = [
        {"id": "a", "title": "T", "text": "one"},
        {"id": "b", "text": "two"},
        {"id": "a", "text": "three"},
    ]
    corpus.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "idx"
    assert main(["index", "--corpus", str(corpus), "--out", str(out), "--kinds", "bm25"]) == 1
    assert f"{corpus}:3: field 'id' repeats 'a' (first at line 1)" in capsys.readouterr().err
    assert not (out / "manifest.json").exists() and not (out / ".staging").exists()
    assert main(["index", "--corpus", str(corpus), "--out", str(out), "--kinds", "bm25", "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 malformed records" in captured.err and "2 passages" in captured.out
    assert [d.text for d in open_index(out).docs] == ["one", "two"]
    # ids whose 64-bit hashes are equal are told apart on the ids themselves
    monkey = docstore_mod._id_hash
    try:
        docstore_mod._id_hash = lambda _id: 7
        n, _ = write_docstore(tmp_path / "h", [Doc("x", "", "1"), Doc("y", "", "2"), Doc("z", "", "3")])
        assert n == 3
        with pytest.raises(ValueError, match="passage 3 repeats the id 'x' \\(first at passage 1\\)"):
            write_docstore(tmp_path / "h2", [Doc("x", "", "1"), Doc("y", "", "2"), Doc("x", "", "3")])
    finally:
        docstore_mod._id_hash = monkey


# --- the command ---------------------------------------------------------------------------------------------


def test_cli_streams_a_corpus_into_shards_with_ivf_then_adds_hnsw(shared_data, tmp_path, capsys):
    corpus = tmp_path / "wiki40.jsonl"
    lines = (shared_data / "wiki18-sample-1000.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "idx"
    argv = ["index", "--corpus", str(corpus), "--out", str(out), "--no-progress", "--dense.shard-rows", "16"]
    assert main([*argv, "--dense.index", "ivf", "--dense.nlist", "4", "--dense.nprobe", "4"]) == 0
    manifest = read_manifest(out)
    assert manifest["kinds"] == ["bm25", "dense"] and manifest["dense"]["shards"] == 3
    assert manifest["dense"]["ann"]["ivf"]["nlist"] == 4 and "dense.ivf" in manifest["build_seconds"]
    assert "40 passages" in capsys.readouterr().out
    assert (
        main(["index", "--out", str(out), "--kinds", "dense", "--dense.index", "hnsw", "--no-progress"]) == 0
    )
    meta = json.loads((out / "dense" / "meta.json").read_text())
    assert set(meta["ann"]) == {"ivf", "hnsw"} and meta["ann_default"] == "hnsw"
    ivf_file = (out / "dense" / "ivf.faiss").stat().st_mtime_ns
    again = ["index", "--out", str(out), "--kinds", "dense", "--no-progress", "--dense.index", "ivf"]
    assert main([*again, "--dense.nlist", "4", "--dense.nprobe", "2"]) == 0
    meta = json.loads((out / "dense" / "meta.json").read_text())  # same lists: only the default changes
    assert meta["ann"]["ivf"]["nprobe"] == 2 and meta["ann_default"] == "ivf"
    assert (out / "dense" / "ivf.faiss").stat().st_mtime_ns == ivf_file
    assert DenseRetriever(out, backend="faiss").nprobe == 2
    capsys.readouterr()
    assert (
        main(["search", "Evan Morris lobbyist", "--index", str(out), "--kind", "dense", "--k", "1", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)[0]["title"] == "Evan Morris"
    exact = DenseRetriever(out).search(["Genentech lobbyist"], 3)[0]
    ivf = DenseRetriever(out, backend="ivf", nprobe=4).search(["Genentech lobbyist"], 3)[0]
    assert [h.doc.id for h in ivf] == [h.doc.id for h in exact]
    assert main(["index", "--out", str(tmp_path / "nothing"), "--kinds", "bm25"]) == 1
    assert "or an existing index folder" in capsys.readouterr().err
    assert main(["index", "--out", str(out), "--dense.part", "2/2"]) == 2


# --- the benchmark at 20,000 passages ------------------------------------------------------------------------


@pytest.mark.slow  # a 20,000-passage index
def test_index_scale_bench_at_20k_passages(tmp_path):
    """bench/index_scale.py's own code at 20,000 passages: shards as planned, BM25 finds the targets, IVF and
    HNSW reach their recall against exact search, and exact search equals brute force in memory."""
    bench = load_bench()
    work = tmp_path / "work"
    r = bench.run(
        [
            "--passages",
            "20000",
            "--queries",
            "300",
            "--latency-queries",
            "30",
            "--shard-rows",
            "4096",
            "--minilm-sample",
            "0",
            "--nprobe-sweep",
            "128",
            "--ef-sweep",
            "256",
            "--ef-construction",
            "40",
            "--in-process",
            "--keep",
            str(work),
        ]
    )
    b = r["build"]
    assert (
        b["passages"] == 20000 and b["shards"] == 5 and b["disk_mb"]["dense_shards"] > 20000 * 384 * 4 / 2**20
    )
    assert r["q-bm25"]["hit@10"] >= 0.95
    assert r["q-exact"]["hit@10"] >= 0.8
    assert r["ivf"]["settings"]["nlist"] == 512
    assert r["q-ivf"]["sweep"]["nprobe"]["128"]["recall@10_vs_exact"] >= 0.85
    assert r["q-hnsw"]["sweep"]["ef_search"]["256"]["recall@10_vs_exact"] >= 0.9
    assert r["q-ivf"]["recall@10_vs_exact"] < r["q-ivf"]["sweep"]["nprobe"]["128"]["recall@10_vs_exact"]
    assert r["q-hnsw"]["excerpts"]["recall@10_vs_exact"] >= 0.9 and r["q-exact"]["excerpts"]["hit@10"] >= 0.99
    # exact search over the 5 memory-mapped shards == brute force over one in-memory matrix
    emb, _ = open_embeddings(work / "index")
    matrix = np.concatenate([np.asarray(s) for s in emb.shards])
    queries, _ = bench.load_queries(work)
    qvec = bench.bench_encoder(work).encode(queries[:20])
    truth = np.load(work / "exact_top10.query.npy")[:20]
    brute = np.argsort(-(qvec @ matrix.T), axis=1, kind="stable")[:, :10]
    assert np.mean(truth == brute) >= 0.99
    assert r["extrapolation"]["factor"] == pytest.approx(21_015_324 / 20000)


def test_bm25_ties_are_ranked_by_row_whatever_the_segments(tmp_path: Path) -> None:
    """Passages with equal scores come back in corpus order, and the same ones make the top k, however the
    writer split them into segments (here: several threads; tantivy's own tie order follows segments)."""
    from ragteam.retrieval.bm25 import build_bm25
    from ragteam.types import Doc

    docs = [
        Doc(id=f"d{i}", title="", text="alpha beta gamma" if i % 25 == 0 else f"other {i} words")
        for i in range(300)
    ]
    build_bm25(tmp_path, docs, heap_mb=64, threads=4)
    rows, scores = BM25Retriever(tmp_path, docs).search_rows(["alpha"], 7)[0]
    assert rows.tolist() == [0, 25, 50, 75, 100, 125, 150] and len(set(scores.tolist())) == 1  # 12 tie
