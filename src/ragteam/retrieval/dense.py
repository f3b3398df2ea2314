"""Dense retrieval: passages embedded by an encoder (`ragteam.retrieval.encoder`), searched exactly or by ANN.

Passages are embedded once at index time (`title\\ntext`) chunk by chunk into row shards,
`dense/shards/*.npy` (float32 by default, float16 on request; `shards.py` says why shards), which open
memory-mapped. Search is exact by default: the query vectors times every passage vector (inner product:
cosine similarity for a normalising encoder such as MiniLM or BGE, the dot product for Contriever), walked
over the shards in row blocks so memory stays bounded.

Encoders (`ragteam.retrieval.encoder`): the packaged MiniLM by default, or a local folder with its pooling,
normalisation and query prefix. The index records the encoder's
name, folder, pooling, normalisation and query prefix in `dense/meta.json` and the manifest, and a retriever
refuses a query encoder that would embed queries otherwise than the passages were (`check_settings`).

An approximate structure can be built beside the shards (`ann.py`): IVF (inverted lists on disk,
memory-mapped) or HNSW (a graph in RAM); `backend="faiss"` searches the one built last, or a HNSW graph built
on first use when there is none.

Folders written before shards existed keep their one `dense/embeddings.npy` and open as before.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragteam.retrieval import ann
from ragteam.retrieval.build_config import DenseBuild
from ragteam.retrieval.docstore import DocStore
from ragteam.retrieval.encoder import Encoder, build_encoder, encoder_settings
from ragteam.retrieval.shards import (
    NpyWriter,
    ShardedMatrix,
    as_blocks,
    plan_shards,
    shard_complete,
    shard_file,
    take_rows,
)
from ragteam.types import Doc, Hit

SUBDIR = "dense"
EMBEDDINGS_FILE = "embeddings.npy"  # the single-file layout of folders built before shards
META_FILE = "meta.json"
BUILD_FILE = "build.json"  # what the shards being written belong to (a resumed build checks it)
# Passages embedded per call of the encoder (sentence-transformers sorts each by length).
EMBED_CHUNK = 2048
# Passage rows multiplied per step of exact search (at most): bounds the float32 copy of a float16 block.
SEARCH_CHUNK = 65_536
# Cells of the (queries x rows) score block of one step: many queries at once take fewer rows per step.
SCORE_CELLS = 1 << 25
BACKENDS = ("exact", "faiss", "ivf", "hnsw")


# --- building ------------------------------------------------------------------------------------------------


def _doc_chunks(docs: DocStore | Sequence[Doc], start: int, stop: int, size: int) -> Iterator[list[Doc]]:
    if isinstance(docs, DocStore):
        yield from docs.iter_chunks(size, start, stop)
    else:
        for a in range(start, stop, size):
            yield list(docs[a : min(a + size, stop)])


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def build_dense(
    folder: str | Path,
    docs: DocStore | Sequence[Doc],
    encoder: Any = None,
    progress: bool = True,
    cfg: DenseBuild | None = None,
    corpus_sha1: str | None = None,
) -> dict[str, Any]:
    """Embed `docs` (row = position) into `folder/dense/shards/`, shard by shard; return a summary.

    Finished shards of an interrupted build of the same corpus and encoder are kept (`build.json` records
    what they belong to). With `cfg.part` = "I/N" only this process' shards are embedded and the summary
    says `complete: False` unless every shard exists (the part finishing last completes the set); the
    folder's `meta.json` (which makes the embeddings visible to retrievers) is written only then.
    """
    from tqdm.auto import tqdm

    cfg = cfg or DenseBuild()
    encoder = encoder or build_encoder(cfg)
    settings = encoder_settings(encoder)
    out = Path(folder) / SUBDIR
    n, dim = len(docs), encoder.dim
    state = {
        "corpus_sha1": corpus_sha1,
        "num_docs": n,
        "encoder": encoder.name,
        "dim": dim,
        "dtype": cfg.dtype,
        "shard_rows": cfg.shard_rows,
    }
    if settings["pooling"] is not None:  # (a stand-in encoder names none: the state of older builds)
        state |= {"pooling": settings["pooling"], "normalized": settings["normalize"]}
    if _read_json(out / BUILD_FILE) != state:  # another corpus, encoder or layout: start afresh
        for stale in (out / "shards", out / META_FILE, out / EMBEDDINGS_FILE):
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        _write_json(out / BUILD_FILE, state)
    plan = plan_shards(n, cfg.shard_rows)
    part = cfg.part_of()
    mine = [i for i in range(len(plan)) if part is None or i % part[1] == part[0]]
    todo = [
        i for i in mine if not shard_complete(out / shard_file(i), plan[i][1] - plan[i][0], dim, cfg.dtype)
    ]
    total = sum(plan[i][1] - plan[i][0] for i in todo)
    with tqdm(total=total, desc="embedding passages", unit="psg", disable=not progress) as bar:
        for i in todo:
            start, stop = plan[i]
            writer = NpyWriter(out / shard_file(i), stop - start, dim, cfg.dtype)
            try:
                for chunk in _doc_chunks(docs, start, stop, EMBED_CHUNK):
                    writer.write(encoder.encode([d.contents for d in chunk]))
                    bar.update(len(chunk))
                writer.close()
            except BaseException:
                writer.abort()
                raise
    done = [i for i in range(len(plan)) if (out / shard_file(i)).is_file()]
    summary = {"dim": dim, "shards": len(plan), "embedded": len(todo), "complete": len(done) == len(plan)}
    if summary["complete"]:
        meta = {
            "model": encoder.name,
            "encoder": encoder.name,
            "model_path": getattr(encoder, "path", None),
            "pooling": settings["pooling"],
            "query_prefix": settings["query_prefix"],
            "dim": dim,
            "dtype": cfg.dtype,
            "normalized": settings["normalize"],
            "layout": "shards",
            "shard_rows": cfg.shard_rows,
            "shards": [{"file": shard_file(i), "rows": b - a} for i, (a, b) in enumerate(plan)],
            "ann": {},
        }
        _write_json(out / META_FILE, meta)
    return summary


def open_embeddings(folder: str | Path) -> tuple[np.ndarray | ShardedMatrix, dict[str, Any]]:
    """The embeddings of an index folder (a memory map, or a `ShardedMatrix` of several) and their meta."""
    out = Path(folder) / SUBDIR
    meta = _read_json(out / META_FILE)
    if meta.get("layout") == "shards":
        parts = []
        for s in meta["shards"]:
            path = out / s["file"]
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path}: embedding shard missing; rebuild with `ragteam index --kinds dense`"
                )
            arr = np.load(path, mmap_mode="r")
            if arr.shape[0] != s["rows"]:
                raise ValueError(f"{path}: {arr.shape[0]} rows, {out / META_FILE} says {s['rows']}")
            parts.append(arr)
        return (parts[0] if len(parts) == 1 else ShardedMatrix(parts)), meta
    legacy = out / EMBEDDINGS_FILE
    if legacy.is_file():
        return np.load(legacy, mmap_mode="r"), meta
    raise FileNotFoundError(
        f"{Path(folder)}: no dense embeddings (build them with `ragteam index --kinds dense`)"
    )


def build_ann(folder: str | Path, cfg: DenseBuild) -> dict[str, Any]:
    """Build the approximate index `cfg.index` (ivf or hnsw) over a folder's embeddings; record it in
    `dense/meta.json` (as the one `backend="faiss"` opens) and return its settings with the build time."""
    if cfg.index not in ann.FILES:
        raise ValueError(f"approximate index must be ivf or hnsw, got {cfg.index!r}")
    out = Path(folder) / SUBDIR
    emb, _ = open_embeddings(folder)
    t0 = time.perf_counter()
    if cfg.index == "ivf":
        info = ann.build_ivf(out, emb, cfg)
    else:
        _, info = ann.build_hnsw(out, emb, cfg)
    info["build_seconds"] = round(time.perf_counter() - t0, 3)
    record_ann(folder, cfg.index, info)
    return info


def record_ann(folder: str | Path, kind: str, info: dict[str, Any]) -> None:
    """Record approximate index `kind` (its settings and search defaults) in `dense/meta.json`, as the one
    `backend="faiss"` opens."""
    path = Path(folder) / SUBDIR / META_FILE
    meta = _read_json(path)
    meta.setdefault("ann", {})[kind] = info
    meta["ann_default"] = kind
    _write_json(path, meta)


def check_settings(meta: dict[str, Any], encoder: Any, where: Any) -> None:
    """ValueError when `encoder` would embed queries with another pooling, normalisation or query prefix than
    the index's `meta` records for its passages (an index built before these were recorded is not checked)."""
    if meta.get("pooling") is None:
        return
    mine = encoder_settings(encoder)
    recorded = {
        "pooling": meta.get("pooling"),
        "normalize": bool(meta.get("normalized", True)),
        "query_prefix": meta.get("query_prefix") or "",
    }
    wrong = [key for key in recorded if mine[key] is not None and mine[key] != recorded[key]]
    if wrong:
        said = ", ".join(f"{key} {recorded[key]!r} (queries: {mine[key]!r})" for key in wrong)
        raise ValueError(
            f"{where}: the passages were embedded with {said}; queries must be embedded alike: drop the "
            "--retriever.pooling / --retriever.normalize / --retriever.query-prefix settings that differ "
            "(the index's own are used when none is set)"
        )


# --- searching -----------------------------------------------------------------------------------------------


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices and values of the `k` largest entries of a 1-D array, largest first (ties: lower index)."""
    n = scores.shape[0]
    k = min(k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=scores.dtype)
    if k < n:
        kth = -np.partition(-scores, k - 1)[k - 1]
        idx = np.flatnonzero(scores >= kth)  # every tie of the k-th value, so the cut is reproducible
    else:
        idx = np.arange(n)
    idx = idx[np.lexsort((idx, -scores[idx]))][:k]
    return idx.astype(np.int64), scores[idx]


def exact_search(
    emb: np.ndarray | ShardedMatrix, q: np.ndarray, k: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Top-`k` rows of `emb` (n, d) by inner product with each row of `q` (m, d), walking `emb` in blocks of
    at most `SEARCH_CHUNK` rows (one array or the shards; float16 blocks are widened one at a time), fewer
    when many queries come at once, so the score block stays under `SCORE_CELLS` floats."""
    m = q.shape[0]
    if min(k, emb.shape[0]) <= 0 or m == 0:
        return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in range(m)]
    q = np.asarray(q, dtype=np.float32)
    parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(m)]
    rows_per_step = min(SEARCH_CHUNK, max(1024, SCORE_CELLS // m))
    for start, block in as_blocks(emb, rows_per_step):
        scores = q @ block.T  # (m, rows), contiguous per query
        for j in range(m):
            rows, vals = top_k(scores[j], k)
            parts[j].append((rows + start, vals))
    out = []
    for chunks in parts:
        rows = np.concatenate([r for r, _ in chunks])
        vals = np.concatenate([v for _, v in chunks])
        order = np.lexsort((rows, -vals))[:k]
        out.append((rows[order], vals[order].astype(np.float32)))
    return out


class DenseRetriever:
    """Batched cosine-similarity search of an index folder built by `build_index` (kind "dense").

    `backend`: "exact" (every vector), "ivf" or "hnsw" (that approximate index), or "faiss" (the approximate
    index built last; a HNSW graph built now and saved when the folder has none). `nprobe` / `ef_search`
    default to the values recorded when the index was built."""

    name = "dense"

    def __init__(
        self,
        folder: str | Path,
        docs: DocStore | None = None,
        encoder: Any = None,
        backend: Literal["exact", "faiss", "ivf", "hnsw"] = "exact",
        ef_search: int | None = None,
        nprobe: int | None = None,
    ):
        self.folder = Path(folder)
        if backend not in BACKENDS:
            raise ValueError(f"dense backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.docs = docs if docs is not None else DocStore(self.folder)
        self.embeddings, self.meta = open_embeddings(self.folder)
        if self.embeddings.shape[0] != len(self.docs):
            raise ValueError(
                f"{self.folder / SUBDIR}: {self.embeddings.shape[0]} embeddings for {len(self.docs)} passages; "
                "rebuild the index"
            )
        self.encoder = encoder or Encoder()
        built_with = self.meta.get("encoder")
        if built_with is not None and built_with != getattr(self.encoder, "name", None):
            raise ValueError(
                f"{self.folder / SUBDIR}: passages were embedded with {built_with!r}, queries would be "
                f"embedded with {getattr(self.encoder, 'name', self.encoder)!r}; pass a matching encoder"
            )
        check_settings(self.meta, self.encoder, self.folder / SUBDIR)
        self.backend = backend
        self.ann_kind: str | None = None
        self._faiss: Any = None
        if backend != "exact":
            self.ann_kind = backend if backend in ann.FILES else self.meta.get("ann_default", "hnsw")
            self._faiss = self._open_ann(self.ann_kind)
        info = self.meta.get("ann", {}).get(self.ann_kind or "", {})
        self.ef_search = ef_search or self.meta.get("ann", {}).get("hnsw", {}).get("ef_search", 128)
        self.nprobe = nprobe or self.meta.get("ann", {}).get("ivf", {}).get("nprobe", 32)
        self.rescore = info.get("codec", "flat") != "flat"

    def __len__(self) -> int:
        return len(self.docs)

    def _open_ann(self, kind: str) -> Any:
        dense_dir = self.folder / SUBDIR
        if kind == "ivf":
            if not (dense_dir / ann.IVF_FILE).is_file():
                raise FileNotFoundError(
                    f"{self.folder}: no IVF index (build it with "
                    f"`ragteam index --out {self.folder} --kinds dense --dense.index ivf`)"
                )
            return ann.open_ivf(dense_dir)
        if (dense_dir / ann.HNSW_FILE).is_file():
            return ann.open_hnsw(dense_dir)
        index, _ = ann.build_hnsw(dense_dir, self.embeddings, DenseBuild(index="hnsw"))
        return index

    def search_vectors(self, q: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query vector (rows of `q`), (rows, scores) of its top-`k` passages, best first."""
        if self._faiss is None:
            return exact_search(self.embeddings, q, k)
        k = min(k, len(self.docs))
        if k <= 0:
            return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in range(q.shape[0])]
        scores, rows = ann.search(self._faiss, self.ann_kind or "hnsw", q, k, self.nprobe, self.ef_search)
        out = []
        for j, (r, s) in enumerate(zip(rows, scores)):
            keep = r >= 0
            r, s = r[keep].astype(np.int64), s[keep].astype(np.float32)
            if self.rescore and r.size:  # quantized codes: exact scores from the shards, re-sorted
                s = take_rows(self.embeddings, r) @ np.asarray(q[j], dtype=np.float32)
                order = np.lexsort((r, -s))
                r, s = r[order], s[order].astype(np.float32)
            out.append((r, s))
        return out

    def search_rows(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query, (rows, scores) of its top-`k` passages by inner product, best first."""
        if not queries:
            return []
        encode = getattr(self.encoder, "encode_queries", None) or self.encoder.encode
        return self.search_vectors(encode(queries), k)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """For each query, its top-`k` hits best first (scores are inner products: cosine similarities for a
        normalising encoder)."""
        return [
            [Hit(self.docs[r], float(s)) for r, s in zip(rows, scores)]
            for rows, scores in self.search_rows(queries, k)
        ]
