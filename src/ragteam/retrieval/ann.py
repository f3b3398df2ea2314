"""Approximate nearest-neighbour search over the embedding shards with faiss: IVF (on disk) or HNSW (in RAM).

IVF: `nlist` centroids are trained (k-means) on a random sample of rows; then each block of rows is assigned
to its nearest centroids in a small per-block index, and the blocks are merged into one inverted-list file,
`dense/ivf.ivfdata`, that search memory-maps (faiss' on-disk inverted lists). Building holds the sample, one
block and the centroids; searching holds the centroids and the `nprobe` lists a query scans. That is what
keeps 21 million passages searchable on a machine with little RAM: memory does not grow with the corpus.

HNSW: faiss' graph index, held whole in memory (n x (4d + 8M) bytes with float32 vectors: 1.8 GB per
million passages at d = 384, M = 32); the fastest queries, built in one process. `codec` "fp16"/"sq8"
shrinks the stored vectors (2x / 4x); their scores are then approximate, and the retriever rescores the top k
from the exact shards.

    dense/ivf.faiss + dense/ivf.ivfdata     kind "ivf"
    dense/hnsw.faiss                        kind "hnsw" (also the graph a legacy `backend="faiss"` builds)
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ragteam.retrieval.build_config import DenseBuild
from ragteam.retrieval.shards import ShardedMatrix, as_blocks, read_rows

IVF_FILE = "ivf.faiss"
IVF_DATA = "ivf.ivfdata"
HNSW_FILE = "hnsw.faiss"
FILES = {"ivf": IVF_FILE, "hnsw": HNSW_FILE}
CODECS = {"flat": "Flat", "fp16": "SQfp16", "sq8": "SQ8"}
# Rows converted to float32 and added to faiss per step: bounds the temporary copy (48 MB at d = 384).
ADD_ROWS = 32_768


def import_faiss() -> Any:
    try:
        import faiss
    except ImportError:
        raise ImportError("approximate dense search needs faiss-cpu (pip install 'ragteam[faiss]')") from None
    return faiss


@contextmanager
def _c_stdout_to_stderr() -> Iterator[None]:
    """faiss' on-disk lists print progress with C printf; keep stdout for the command's own output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _sample(emb: np.ndarray | ShardedMatrix, size: int, seed: int = 0) -> np.ndarray:
    n = emb.shape[0]
    rows = np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))
    return read_rows(emb, rows)


def build_ivf(dense_dir: str | Path, emb: np.ndarray | ShardedMatrix, cfg: DenseBuild) -> dict[str, Any]:
    """Train and fill an IVF index of `emb` into `dense_dir` (see the module docstring); return its settings."""
    faiss = import_faiss()
    from faiss.contrib.ondisk import merge_ondisk

    out = Path(dense_dir)
    n, d = emb.shape
    nlist = cfg.lists_for(n)
    sample = cfg.sample_for(n, nlist)
    t0 = time.perf_counter()
    index = faiss.index_factory(d, f"IVF{nlist},{CODECS[cfg.codec]}", faiss.METRIC_INNER_PRODUCT)
    index.train(_sample(emb, sample))
    train_s = time.perf_counter() - t0
    work = out / "ivf-blocks"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    trained = work / "trained.index"
    faiss.write_index(index, str(trained))
    blocks: list[str] = []
    block: Any = None
    for start, x in as_blocks(emb, ADD_ROWS, read=True):
        if block is None:
            block = faiss.read_index(str(trained))
        block.add_with_ids(x, np.arange(start, start + x.shape[0], dtype=np.int64))
        if block.ntotal >= cfg.shard_rows or start + x.shape[0] == n:
            blocks.append(str(work / f"{len(blocks):05d}.index"))
            faiss.write_index(block, blocks[-1])
            block = None
    data = work / IVF_DATA  # merged beside the blocks, moved in place with the index file at the end
    with _c_stdout_to_stderr():
        merge_ondisk(index, blocks, str(data))
    faiss.write_index(index, str(work / IVF_FILE))
    del index
    os.replace(data, out / IVF_DATA)  # open_ivf points the index at the data file beside it
    os.replace(work / IVF_FILE, out / IVF_FILE)
    shutil.rmtree(work)
    return {
        "factory": f"IVF{nlist},{CODECS[cfg.codec]}",
        "nlist": nlist,
        "train_sample": sample,
        "nprobe": cfg.nprobe,
        "codec": cfg.codec,
        "train_seconds": round(train_s, 3),
    }


def build_hnsw(
    dense_dir: str | Path, emb: np.ndarray | ShardedMatrix, cfg: DenseBuild
) -> tuple[Any, dict[str, Any]]:
    """Build an HNSW graph of `emb` in memory, save it as `dense_dir/hnsw.faiss` (if the folder is
    writable); return the index and its settings."""
    faiss = import_faiss()
    n, d = emb.shape
    spec = f"HNSW{cfg.hnsw_m},{CODECS[cfg.codec]}"
    index = faiss.index_factory(d, spec, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = cfg.ef_construction
    if not index.is_trained:  # scalar quantizers learn their ranges
        index.train(_sample(emb, cfg.train_sample or 100_000))
    for _, x in as_blocks(emb, ADD_ROWS, read=True):
        index.add(x)
    out = Path(dense_dir)
    tmp = out / (HNSW_FILE + ".partial")
    try:
        faiss.write_index(index, str(tmp))
        os.replace(tmp, out / HNSW_FILE)
    except RuntimeError:
        pass  # a read-only folder (the lazy graph of a legacy folder): keep it in memory only
    return index, {
        "factory": spec,
        "M": cfg.hnsw_m,
        "ef_construction": cfg.ef_construction,
        "ef_search": cfg.ef_search,
        "codec": cfg.codec,
    }


def open_ivf(dense_dir: str | Path) -> Any:
    """The IVF index of `dense_dir`, its inverted lists memory-mapped read-only from `ivf.ivfdata`.

    The index file records the data file's absolute path at build time; it is re-pointed at the file beside
    it, so that a moved or copied index folder still opens."""
    faiss = import_faiss()
    folder = Path(dense_dir)
    index = faiss.read_index(str(folder / IVF_FILE), faiss.IO_FLAG_SKIP_IVF_DATA)
    lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(index).invlists)
    lists.filename = str(folder / IVF_DATA)
    lists.read_only = True
    lists.do_mmap()
    return index


def open_hnsw(dense_dir: str | Path) -> Any:
    return import_faiss().read_index(str(Path(dense_dir) / HNSW_FILE))


def search(index: Any, kind: str, q: np.ndarray, k: int, nprobe: int, ef_search: int) -> tuple:
    """faiss search with this call's knobs (passed per call, so concurrent searches do not race)."""
    faiss = import_faiss()
    x = np.ascontiguousarray(q, dtype=np.float32)
    if kind == "ivf":
        params = faiss.SearchParametersIVF(nprobe=nprobe)
    else:
        params = faiss.SearchParametersHNSW(efSearch=max(ef_search, k))
    return index.search(x, k, params=params)
