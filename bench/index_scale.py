"""Benchmark: does `ragteam index` scale? One synthetic corpus of --passages (default 1,000,000) passages,
streamed through the real build, then searched four ways. Not part of the tests (tests/test_index_scale.py
runs the same code at 20,000 passages).

The corpus: passages of ~100 words over a Zipf vocabulary of made-up words whose head is English stop words
(as in bench/retrieval.py), each passage also drawing about a third of its words from one of 1,000 topics
(40 words each), so that passages form clusters as real text does. Queries: 6 distinct content words of a
random target passage. Generated in chunks, so the generator's memory does not grow with --passages either.

Phases, each in its own process at one thread (so that its peak memory is its own):

  build      `build_index` on the corpus file streamed by `iter_corpus`: docs.jsonl, BM25 (tantivy, real, over
             all passages) and dense shards (flat). The passages are embedded by HashEncoder, a cheap
             deterministic stand-in for MiniLM (a random projection of the bag of words: 384-d, unit length),
             because MiniLM on 2 CPU cores would take days for a million passages; MiniLM's rate is measured
             on a sample instead (phase minilm) and used to extrapolate. Everything else is the real code.
  ivf, hnsw  the approximate indexes added to the folder (`build_index(None, ..., dense=DenseBuild(index=...))`)
  q-bm25, q-exact, q-ivf, q-hnsw
             single-query latency (p50/p95 of `retriever.search([q], 10)`, passages included), hit@10 of the
             target; for ivf/hnsw recall@10 against exact search over the same vectors, and a sweep of
             nprobe / efSearch
  minilm     all-MiniLM-L6-v2's passages/s on a sample of the corpus, and its single-query encoding latency

Peak memory is reported three ways per phase: peak RSS (the kernel's high-water mark, VmHWM), and sampled
peaks of anonymous memory (what the process allocated) and of file-backed resident pages (memory-mapped
index files; the kernel can drop those at will, they are page cache).

    OMP_NUM_THREADS=1 .venv/bin/python bench/index_scale.py --json out.json          # ~1 h on 2 cores
    .venv/bin/python bench/index_scale.py --passages 20000 --minilm-sample 64
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

SYLLABLES = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ei", "oa")]
STOP_WORDS = (
    "the of and to in a is that for it as was with be by on not this are at or an but "
    "their they there these then such into if no will"
).split()
TOPICS, TOPIC_WORDS, TOPIC_SHARE = 1000, 40, 0.35
WIKI_SAMPLE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wiki18-sample-1000.jsonl"
HEAD = 500  # topic words are drawn from below the 500 most frequent words, as topical words are


# --- corpus --------------------------------------------------------------------------------------------------


def make_vocab(size: int, rng: np.random.Generator) -> list[str]:
    """Stop words, then distinct made-up words of 2-4 syllables; `size` words, most frequent first."""
    words, seen = list(STOP_WORDS), set(STOP_WORDS)
    while len(words) < size:
        w = "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), int(rng.integers(2, 5))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def make_corpus(folder: Path, passages: int, queries: int, vocab: int = 50_000, seed: int = 0) -> dict:
    """Write corpus.jsonl ({id, title, text}) and queries.json ([{query, target}]) into `folder`, streamed."""
    rng = np.random.default_rng(seed)
    words = np.array(make_vocab(vocab, rng))
    p = 1.0 / np.arange(1, vocab + 1) ** 1.07
    p /= p.sum()
    cdf = np.cumsum(p)
    topic_words = rng.integers(HEAD, vocab, size=(TOPICS, TOPIC_WORDS))
    targets = np.sort(rng.choice(passages, size=min(queries, passages), replace=False))
    qs: list[dict] = []
    t0, chunk = time.perf_counter(), 20_000
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for a in range(0, passages, chunk):
            b = min(a + chunk, passages)
            lengths = rng.integers(70, 131, b - a)
            topic = rng.integers(0, TOPICS, b - a)
            total = int(lengths.sum())
            glob = np.minimum(np.searchsorted(cdf, rng.random(total)), vocab - 1)
            top = topic_words[np.repeat(topic, lengths), rng.integers(0, TOPIC_WORDS, total)]
            tokens = np.where(rng.random(total) < TOPIC_SHARE, top, glob)
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            lines = []
            for i in range(b - a):
                toks = tokens[bounds[i] : bounds[i + 1]]
                title = " ".join(words[topic_words[topic[i], :2]]).title()
                lines.append(json.dumps({"id": f"p{a + i}", "title": title, "text": " ".join(words[toks])}))
            f.write("\n".join(lines) + "\n")
            for t in targets[(targets >= a) & (targets < b)].tolist():
                toks = tokens[bounds[t - a] : bounds[t - a + 1]]
                content = np.unique(toks[toks >= len(STOP_WORDS)])
                pick = rng.choice(content, size=min(6, content.size), replace=False)
                excerpt = " ".join(words[toks[: min(30, toks.size)]])
                qs.append({"query": " ".join(words[pick]), "excerpt": excerpt, "target": t})
    order = rng.permutation(len(qs))
    (folder / "queries.json").write_text(json.dumps([qs[i] for i in order]), encoding="utf-8")
    return {"seconds": time.perf_counter() - t0, "bytes": (folder / "corpus.jsonl").stat().st_size}


# --- the stand-in encoder ------------------------------------------------------------------------------------

TOKEN = re.compile(r"[a-z0-9]+")


class HashEncoder:
    """A deterministic, cheap stand-in for MiniLM (benchmark only): each word (stop words dropped) hashes
    (crc32) to one of 65,536 fixed random 384-d vectors, weighted by its inverse document frequency in the
    first 20,000 passages (`fit`); a text is the normalized weighted sum over its words, i.e. a random
    projection of its tf-idf vector. Texts sharing rare words get similar vectors, so nearest neighbours are
    meaningful and approximate search is measured on a clustered corpus; it encodes ~3,000 passages/s."""

    name = "bench-hashed-tfidf-384"
    dim = 384

    def __init__(self, buckets: int = 1 << 16, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.table = rng.standard_normal((buckets, self.dim), dtype=np.float32)
        self.mask = buckets - 1
        self.stop = set(STOP_WORDS)
        self.cache: dict[str, int] = {}

    def fit(self, texts: list[str]) -> HashEncoder:
        """Weight each bucket's vector by log((N + 1) / (df + 1)) over `texts`."""
        df = np.zeros(self.mask + 1)
        for t in texts:
            df[list(set(self._ids(t)))] += 1
        self.table *= np.log((len(texts) + 1) / (df + 1)).astype(np.float32)[:, None]
        return self

    def _ids(self, text: str) -> list[int]:
        cache, out = self.cache, []
        for w in TOKEN.findall(text.lower()):
            i = cache.get(w)
            if i is None:
                i = -1 if w in self.stop else zlib.crc32(w.encode()) & self.mask
                if len(cache) < 2_000_000:
                    cache[w] = i
            if i >= 0:
                out.append(i)
        return out

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for a in range(0, len(texts), 256):
            ids = [self._ids(t) for t in texts[a : a + 256]]
            lengths = np.array([len(x) for x in ids])
            flat = np.fromiter((i for x in ids for i in x), dtype=np.int64, count=int(lengths.sum()))
            if flat.size == 0:
                continue
            nonempty = np.flatnonzero(lengths)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
            out[a + nonempty] = np.add.reduceat(self.table[flat], starts, axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def read_texts(path: Path, limit: int) -> list[str]:
    """`title\ntext` of the first `limit` passages of a corpus file (any format `iter_corpus` reads)."""
    from ragteam.data.corpus import iter_corpus

    out = []
    for _, d in iter_corpus(path):
        out.append(d.contents)
        if len(out) >= limit:
            break
    return out


def bench_encoder(work: Path) -> HashEncoder:
    """The stand-in encoder of this corpus: fitted on its first 20,000 passages (the same in every phase)."""
    return HashEncoder().fit(read_texts(work / "corpus.jsonl", 20_000))


# --- measurement -------------------------------------------------------------------------------------------


class MemorySampler:
    """Peaks of anonymous and file-backed resident memory of this process, sampled every 20 ms."""

    def __init__(self) -> None:
        self.anon = self.file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> tuple[float, float]:
        anon = file = 0.0
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) / 1024
                elif line.startswith("RssFile:") or line.startswith("RssShmem:"):
                    file += int(line.split()[1]) / 1024
        return anon, file

    def _run(self) -> None:
        while not self._stop.is_set():
            anon, file = self.now()
            self.anon, self.file = max(self.anon, anon), max(self.file, file)
            self._stop.wait(0.02)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        anon, file = self.now()
        self.anon, self.file = max(self.anon, anon), max(self.file, file)

    def report(self) -> dict[str, float]:
        return {
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_anon_mb": self.anon,
            "peak_file_mb": self.file,
        }


def percentiles(times_ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(times_ms, 50)), "p95_ms": float(np.percentile(times_ms, 95))}


def timed(fn, items, warmup: int = 5) -> list[float]:
    for x in items[:warmup]:
        fn(x)
    out = []
    for x in items:
        t0 = time.perf_counter()
        fn(x)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def folder_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def load_queries(work: Path, field: str = "query") -> tuple[list[str], list[int]]:
    """The queries (`query`: 6 keywords; `excerpt`: the target's first 30 words) and their targets."""
    qs = json.loads((work / "queries.json").read_text())
    return [q[field] for q in qs], [q["target"] for q in qs]


def _threads_one() -> None:
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except ImportError:
        pass


# --- phases --------------------------------------------------------------------------------------------------


def phase_build(work: Path, a: argparse.Namespace) -> dict:
    from ragteam.data.corpus import iter_corpus
    from ragteam.retrieval.build_config import BM25Build, DenseBuild
    from ragteam.retrieval.index import build_index

    index = work / "index"
    t0 = time.perf_counter()
    folder = build_index(
        iter_corpus(work / "corpus.jsonl"),
        index,
        kinds=["bm25", "dense"],
        overwrite=True,
        progress=False,
        source=str(work / "corpus.jsonl"),
        dense=DenseBuild(index="flat", dtype=a.dtype, shard_rows=a.shard_rows),
        bm25=BM25Build(heap_mb=a.bm25_heap_mb, threads=1),
        encoder=bench_encoder(work),
    )
    took = time.perf_counter() - t0
    shards = sorted((index / "dense" / "shards").glob("*.npy"))
    return {
        "seconds": took,
        "phases_s": folder.manifest["build_seconds"],
        "passages": len(folder),
        "shards": len(shards),
        "segments": len(list((index / "bm25").glob("*.idx"))),
        "disk_mb": {
            "docs": folder_mb(index / "docs.jsonl") + folder_mb(index / "docs.offsets.npy"),
            "bm25": folder_mb(index / "bm25"),
            "dense_shards": folder_mb(index / "dense" / "shards"),
        },
    }


def phase_ann(work: Path, a: argparse.Namespace, kind: str) -> dict:
    from ragteam.retrieval.build_config import DenseBuild
    from ragteam.retrieval.index import build_index

    _threads_one()
    cfg = DenseBuild(
        index=kind,
        dtype=a.dtype,
        shard_rows=a.shard_rows,
        nlist=a.nlist,
        nprobe=a.nprobe,
        hnsw_m=a.hnsw_m,
        ef_construction=a.ef_construction,
        ef_search=a.ef_search,
    )
    t0 = time.perf_counter()
    folder = build_index(None, work / "index", kinds=["dense"], progress=False, dense=cfg)
    took = time.perf_counter() - t0
    info = json.loads((work / "index" / "dense" / "meta.json").read_text())["ann"][kind]
    files = ["ivf.faiss", "ivf.ivfdata"] if kind == "ivf" else ["hnsw.faiss"]
    return {
        "seconds": took,
        "settings": {k: v for k, v in info.items()},
        "passages": len(folder),
        "disk_mb": sum(folder_mb(work / "index" / "dense" / f) for f in files),
    }


def _retriever(work: Path, kind: str, **kw: Any):
    from ragteam.retrieval.bm25 import BM25Retriever
    from ragteam.retrieval.dense import DenseRetriever
    from ragteam.retrieval.index import open_index

    ix = open_index(work / "index")
    if kind == "bm25":
        return BM25Retriever(ix.path, ix.docs)
    backend = {"exact": "exact", "ivf": "ivf", "hnsw": "hnsw"}[kind]
    return DenseRetriever(ix.path, ix.docs, encoder=bench_encoder(work), backend=backend, **kw)


def phase_query(work: Path, a: argparse.Namespace, kind: str) -> dict:
    """Latency on the keyword queries; hit@10 and (ANN) recall against exact search on both query sets."""
    _threads_one()
    queries, _ = load_queries(work)
    t0 = time.perf_counter()
    r = _retriever(work, kind)
    open_s = time.perf_counter() - t0
    lat = queries[: a.latency_queries]
    out: dict[str, Any] = {"open_s": open_s, **percentiles(timed(lambda q: r.search([q], 10), lat))}
    if kind != "bm25":
        qvec = r.encoder.encode(lat)
        vector = percentiles(timed(lambda v: r.search_vectors(v[None], 10), list(qvec)))
        out.update({f"vector_{k}": v for k, v in vector.items()})
    for field in ("query", "excerpt"):
        qs, targets = load_queries(work, field)
        res: dict[str, Any] = {}
        if kind == "bm25":
            rows = [rw for rw, _ in r.search_rows(qs, 10)]
        else:
            qvec = r.encoder.encode(qs)
            t0 = time.perf_counter()
            rows = [rw for rw, _ in r.search_vectors(qvec, 10)]
            res["batch_qps"] = len(qs) / (time.perf_counter() - t0)
        res["hit@10"] = float(np.mean([t in set(rw.tolist()) for rw, t in zip(rows, targets)]))
        truth_file = work / f"exact_top10.{field}.npy"
        if kind == "exact":
            np.save(truth_file, np.stack([np.pad(rw, (0, 10 - len(rw)), constant_values=-1) for rw in rows]))
        elif kind in ("ivf", "hnsw"):
            truth = np.load(truth_file)
            res["recall@10_vs_exact"] = recall(rows, truth)
            knob = "nprobe" if kind == "ivf" else "ef_search"
            default, sweep = getattr(r, knob), {}
            out[knob] = default
            for value in a.nprobe_sweep if kind == "ivf" else a.ef_sweep:
                setattr(r, knob, value)  # read per search: no second copy of the index
                got = [rw for rw, _ in r.search_vectors(qvec, 10)]
                sweep[str(value)] = {"recall@10_vs_exact": recall(got, truth)}
                if field == "query":
                    vecs = list(qvec[: a.latency_queries])
                    sweep[str(value)].update(
                        percentiles(timed(lambda v: r.search_vectors(v[None], 10), vecs))
                    )
            setattr(r, knob, default)
            res["sweep"] = {knob: sweep}
        if field == "query":
            out.update(res)  # the keyword queries are the headline figures
        else:
            out["excerpts"] = res
    return out


def recall(rows: list[np.ndarray], truth: np.ndarray) -> float:
    vals = []
    for got, want in zip(rows, truth):
        want = set(want[want >= 0].tolist())
        vals.append(len(want & set(got.tolist())) / max(1, len(want)))
    return float(np.mean(vals))


def phase_minilm(work: Path, a: argparse.Namespace) -> dict:
    """Real all-MiniLM-L6-v2 at one thread on real passages (the Wikipedia sample when given): its rate."""
    import torch

    from ragteam.retrieval.encoder import Encoder

    torch.set_num_threads(1)
    source = Path(a.minilm_corpus) if a.minilm_corpus else work / "corpus.jsonl"
    texts = read_texts(source, a.minilm_sample)
    enc = Encoder()
    enc.encode(texts[:16])  # load and warm up
    tokens = [len(x) for x in enc.model.tokenizer(texts, truncation=True, max_length=256)["input_ids"]]
    t0 = time.perf_counter()
    enc.encode(texts)
    rate = len(texts) / (time.perf_counter() - t0)
    queries, _ = load_queries(work)
    lat = percentiles(timed(lambda q: enc.encode([q]), queries[:50]))
    return {
        "passages_per_s": rate,
        "sample": len(texts),
        "source": str(source),
        "mean_tokens": float(np.mean(tokens)),
        "threads": 1,
        "query_encode": lat,
    }


def phase_real_ann(work: Path, a: argparse.Namespace) -> dict:
    """Calibration: IVF/HNSW recall against exact search on REAL MiniLM vectors (an index folder built by
    `ragteam index`, e.g. HotpotQA-500's pooled paragraphs) with its questions as queries, built by the
    same code (`ann.py`) at the same settings rules, to compare with the stand-in's recall."""
    import torch

    from ragteam.data.questions import read_questions
    from ragteam.retrieval import ann
    from ragteam.retrieval.build_config import DenseBuild
    from ragteam.retrieval.dense import exact_search, open_embeddings
    from ragteam.retrieval.encoder import Encoder

    _threads_one()
    torch.set_num_threads(1)
    emb, _ = open_embeddings(a.real_index)
    questions = [q.question for q in read_questions(a.real_data).questions]
    q = Encoder().encode(questions)
    truth = np.stack([rw for rw, _ in exact_search(emb, q, 10)])
    out: dict[str, Any] = {"passages": int(emb.shape[0]), "queries": len(questions)}
    tmp = work / "real-ann"
    tmp.mkdir(exist_ok=True)
    cfg = DenseBuild(index="ivf")
    info = ann.build_ivf(tmp, emb, cfg)
    index = ann.open_ivf(tmp)
    out["ivf"] = {"nlist": info["nlist"]}
    for nprobe in a.nprobe_sweep:
        _, rows = ann.search(index, "ivf", q, 10, nprobe, 0)
        out["ivf"][str(nprobe)] = recall(list(rows), truth)
    index, _ = ann.build_hnsw(tmp, emb, DenseBuild(index="hnsw"))
    out["hnsw"] = {}
    for ef in a.ef_sweep:
        _, rows = ann.search(index, "hnsw", q, 10, 0, ef)
        out["hnsw"][str(ef)] = recall(list(rows), truth)
    return out


PHASES = {
    "build": phase_build,
    "ivf": lambda w, a: phase_ann(w, a, "ivf"),
    "hnsw": lambda w, a: phase_ann(w, a, "hnsw"),
    "q-bm25": lambda w, a: phase_query(w, a, "bm25"),
    "q-exact": lambda w, a: phase_query(w, a, "exact"),
    "q-ivf": lambda w, a: phase_query(w, a, "ivf"),
    "q-hnsw": lambda w, a: phase_query(w, a, "hnsw"),
    "minilm": phase_minilm,
    "real-ann": phase_real_ann,
}


def run_phase(name: str, work: Path, a: argparse.Namespace) -> dict:
    load = os.getloadavg()[0]
    with MemorySampler() as mem:
        result = PHASES[name](work, a)
    result.update(mem.report())
    result["load_avg_1min"] = [load, os.getloadavg()[0]]  # a shared machine: how busy it was, before/after
    return result


def run_phase_process(name: str, work: Path, argv: list[str]) -> dict:
    cmd = [sys.executable, __file__, *argv, "--phase", name, "--dir", str(work)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"phase {name} failed:\n{proc.stderr[-4000:]}")
    print(f"  {name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return json.loads(lines[-1][len("RESULT ") :])


# --- orchestration -------------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--latency-queries", type=int, default=200)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--shard-rows", type=int, default=131_072)
    ap.add_argument("--bm25-heap-mb", type=int, default=128)
    ap.add_argument("--nlist", type=int, default=None, help="IVF lists (default: 4 sqrt(n), a power of 2)")
    ap.add_argument("--nprobe", type=int, default=64)
    ap.add_argument("--nprobe-sweep", type=int, nargs="*", default=[8, 16, 32, 64, 128, 256, 512])
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=80)
    ap.add_argument("--ef-search", type=int, default=128)
    ap.add_argument("--ef-sweep", type=int, nargs="*", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument("--minilm-sample", type=int, default=1000, help="passages MiniLM embeds (0: skip)")
    ap.add_argument(
        "--minilm-corpus",
        default=str(WIKI_SAMPLE) if WIKI_SAMPLE.is_file() else None,
        help="real passages MiniLM's rate is measured on (default: the 100-word Wikipedia sample)",
    )
    ap.add_argument("--real-index", help="index folder with real MiniLM vectors (phase real-ann)")
    ap.add_argument("--real-data", help="its question file (phase real-ann)")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=list(PHASES))
    ap.add_argument("--target-passages", type=int, default=21_015_324, help="extrapolate to this corpus size")
    ap.add_argument(
        "--in-process", action="store_true", help="run phases here (the test does; no memory figures)"
    )
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temporary folder)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    return ap


def run(argv: list[str]) -> dict:
    a = parser().parse_args(argv)
    if a.phase:
        return run_phase(a.phase, Path(a.dir), a)
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="ragteam-index-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    skip = {"minilm"} if a.minilm_sample <= 0 else set()
    if not (a.real_index and a.real_data):
        skip.add("real-ann")
    phases = [p for p in PHASES if p in a.phases and p not in skip]
    results: dict[str, Any] = {"args": vars(a), "cpus": os.cpu_count()}
    try:
        t0 = time.perf_counter()
        results["corpus"] = make_corpus(work, a.passages, a.queries)
        print(
            f"corpus: {a.passages} passages ({results['corpus']['bytes'] / 2**20:.0f} MB) in "
            f"{time.perf_counter() - t0:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        for name in phases:
            if a.in_process:
                results[name] = run_phase(name, work, a)
            else:
                results[name] = run_phase_process(name, work, [x for x in argv if x not in ("--in-process",)])
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["extrapolation"] = extrapolate(results, a)
    return results


def extrapolate(r: dict, a: argparse.Namespace) -> dict:
    """Linear scaling of the measured build times and sizes to `a.target_passages` (stated as such)."""
    f = a.target_passages / a.passages
    out: dict[str, Any] = {"target_passages": a.target_passages, "factor": f}
    if "build" in r:
        b = r["build"]
        out["docs_s"] = b["phases_s"].get("docs", 0) * f
        out["bm25_s"] = b["phases_s"].get("bm25", 0) * f
        out["disk_gb"] = {k: v * f / 1024 for k, v in b["disk_mb"].items()}
    if "minilm" in r:
        out["minilm_cpu_thread_hours"] = a.target_passages / r["minilm"]["passages_per_s"] / 3600
    if "ivf" in r:
        out["ivf_disk_gb"] = r["ivf"]["disk_mb"] * f / 1024
    if "hnsw" in r:
        out["hnsw_ram_gb"] = r["hnsw"]["disk_mb"] * f / 1024
    if "q-exact" in r:
        out["exact_p50_ms"] = r["q-exact"]["vector_p50_ms"] * f
    return out


def table(r: dict) -> str:
    lines = [
        f"{'phase':<10}{'seconds':>10}{'p50 ms':>9}{'p95 ms':>9}{'hit@10':>8}{'recall':>8}{'RSS MB':>9}{'anon MB':>9}{'file MB':>9}"
    ]
    for name in PHASES:
        if name not in r:
            continue
        x = r[name]
        secs = x.get("seconds", x.get("open_s", 0.0))
        rec = x.get("recall@10_vs_exact")
        lines.append(
            f"{name:<10}{secs:>10.1f}{x.get('p50_ms', float('nan')):>9.2f}{x.get('p95_ms', float('nan')):>9.2f}"
            f"{x.get('hit@10', float('nan')):>8.3f}{(rec if rec is not None else float('nan')):>8.3f}"
            f"{x['peak_rss_mb']:>9.0f}{x['peak_anon_mb']:>9.0f}{x['peak_file_mb']:>9.0f}"
        )
    return "\n".join(lines)


def main() -> int:
    argv = sys.argv[1:]
    a = parser().parse_args(argv)
    if a.phase:
        print("RESULT " + json.dumps(run(argv)), flush=True)
        return 0
    r = run(argv)
    print(table(r))
    if "build" in r:
        print(
            f"build phases (s): {json.dumps(r['build']['phases_s'])}; shards {r['build']['shards']}; "
            f"disk MB {json.dumps({k: round(v) for k, v in r['build']['disk_mb'].items()})}"
        )
        print("dense vectors: HashEncoder (hashed bag of words, a stand-in for MiniLM); BM25 is real.")
    for kind, knob in (("q-ivf", "nprobe"), ("q-hnsw", "ef_search")):
        if kind in r:
            ex = r[kind]["excerpts"]["sweep"][knob]
            for v, s in r[kind]["sweep"][knob].items():
                print(
                    f"  {kind} {knob}={v}: recall@10 keywords {s['recall@10_vs_exact']:.3f}, "
                    f"excerpts {ex[v]['recall@10_vs_exact']:.3f}; p50 {s['p50_ms']:.2f} ms"
                )
    for kind in ("q-bm25", "q-exact", "q-ivf", "q-hnsw"):
        if kind in r:
            print(f"  {kind} on excerpt queries: hit@10 {r[kind]['excerpts']['hit@10']:.3f}")
    if "minilm" in r:
        m = r["minilm"]
        print(
            f"MiniLM (real, 1 thread): {m['passages_per_s']:.1f} passages/s on {m['sample']}; "
            f"query encode p50 {m['query_encode']['p50_ms']:.1f} ms"
        )
    if "real-ann" in r:
        x = r["real-ann"]
        print(
            f"real MiniLM vectors ({x['passages']} passages, {x['queries']} questions): IVF{x['ivf']['nlist']} "
            f"recall@10 by nprobe {json.dumps({k: round(v, 3) for k, v in x['ivf'].items() if k != 'nlist'})}; "
            f"HNSW by efSearch {json.dumps({k: round(v, 3) for k, v in x['hnsw'].items()})}"
        )
    print("extrapolation (linear): " + json.dumps(r["extrapolation"]))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
