"""Embeddings as row shards: .npy files written as a stream, read back memory-mapped, searched in blocks.

Why shards and not one file: 21 million passages x 384 dimensions is 32 GB in float32. A shard (131,072
rows by default, 192 MB) is written chunk by chunk with plain writes (no array of the whole corpus, no
dirty memory map), appears under its final name only when complete, and so survives a crash: a rebuilt
index re-embeds only the missing shards. Disjoint shards can be embedded by several processes at once
(one per GPU, `DenseBuild.part`). Reading maps every shard; `ShardedMatrix` presents them as one (n, d)
matrix that is never materialized: exact search and index builds walk it in blocks.

    dense/shards/00000.npy ...   (rows, dim) float32 or float16, unit length
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

SHARD_DIR = "shards"


def shard_file(i: int) -> str:
    """The path of shard `i` relative to the dense folder."""
    return f"{SHARD_DIR}/{i:05d}.npy"


def plan_shards(n: int, shard_rows: int) -> list[tuple[int, int]]:
    """(start, stop) rows of each shard of an `n`-row matrix."""
    return [(a, min(a + shard_rows, n)) for a in range(0, n, shard_rows)]


class NpyWriter:
    """Write a (rows, dim) .npy as a stream of row blocks; it takes its final name only when complete."""

    def __init__(self, path: str | Path, rows: int, dim: int, dtype: str):
        self.path = Path(path)
        self.rows, self.dim, self.dtype = rows, dim, np.dtype(dtype)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        self._f = open(self._tmp, "wb")  # noqa: SIM115 - closed by close()/abort()
        np.lib.format.write_array_header_1_0(
            self._f, {"descr": self.dtype.str, "fortran_order": False, "shape": (rows, dim)}
        )
        self.written = 0

    def write(self, block: np.ndarray) -> None:
        if block.ndim != 2 or block.shape[1] != self.dim:
            raise ValueError(f"{self.path}: block of shape {block.shape}, expected (rows, {self.dim})")
        if self.written + block.shape[0] > self.rows:
            raise ValueError(f"{self.path}: more than the {self.rows} rows declared")
        self._f.write(np.ascontiguousarray(block, dtype=self.dtype).tobytes())
        self.written += block.shape[0]

    def close(self) -> None:
        self._f.close()
        if self.written != self.rows:
            self._tmp.unlink()
            raise ValueError(f"{self.path}: {self.written} rows written of the {self.rows} declared")
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._f.close()
        self._tmp.unlink(missing_ok=True)


def shard_complete(path: str | Path, rows: int, dim: int, dtype: str) -> bool:
    """Whether `path` is a finished shard of this shape and type (a resumed build keeps it)."""
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return arr.shape == (rows, dim) and arr.dtype == np.dtype(dtype)


class ShardedMatrix:
    """The row-concatenation of memory-mapped shards, read in blocks (float32) and never held whole."""

    ndim = 2

    def __init__(self, shards: Sequence[np.ndarray]):
        if not shards:
            raise ValueError("no embedding shards")
        dims = {s.shape[1] for s in shards}
        if len(dims) != 1:
            raise ValueError(f"embedding shards of different dimensions: {sorted(dims)}")
        self.shards = list(shards)
        self.starts = np.cumsum([0] + [s.shape[0] for s in self.shards])
        self.shape = (int(self.starts[-1]), dims.pop())
        self.dtype = self.shards[0].dtype

    def __len__(self) -> int:
        return self.shape[0]

    def blocks(self, rows: int, read: bool = False) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, float32 block of at most `rows` rows) covering the matrix in order (`read`: see
        `as_blocks`)."""
        for start, shard in zip(self.starts.tolist(), self.shards):
            for a, block in _array_blocks(shard, rows, read):
                yield start + a, block

    def take(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        """The float32 rows at `rows` (any order), one read per row."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((rows.size, self.shape[1]), dtype=np.float32)
        if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
            raise IndexError(f"row out of range 0..{self.shape[0] - 1}")
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for i, (s, r) in enumerate(zip(which.tolist(), rows.tolist())):
            out[i] = self.shards[s][r - self.starts[s]]
        return out

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            return self.take(np.arange(self.shape[0])[key])
        return self.take([int(key)])[0]


def as_blocks(
    emb: np.ndarray | ShardedMatrix, rows: int, read: bool = False
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 block) over either a sharded matrix or one (memory-mapped) array.

    `read=True` reads memory-mapped files with plain reads instead of through the map: for one pass over
    everything (building an index), so that the pages read stay page cache and are not counted as this
    process' resident memory; searches use the map, whose pages every query and process shares."""
    if isinstance(emb, ShardedMatrix):
        yield from emb.blocks(rows, read)
    else:
        yield from _array_blocks(emb, rows, read)


def _array_blocks(arr: np.ndarray, rows: int, read: bool) -> Iterator[tuple[int, np.ndarray]]:
    if not (read and isinstance(arr, np.memmap) and arr.filename):
        for a in range(0, arr.shape[0], rows):
            yield a, np.asarray(arr[a : a + rows], dtype=np.float32)
        return
    row_bytes = arr.shape[1] * arr.dtype.itemsize
    with open(arr.filename, "rb") as f:
        for a in range(0, arr.shape[0], rows):
            n = min(rows, arr.shape[0] - a)
            f.seek(arr.offset + a * row_bytes)
            block = np.fromfile(f, dtype=arr.dtype, count=n * arr.shape[1]).reshape(n, arr.shape[1])
            yield a, block.astype(np.float32, copy=False)


def take_rows(emb: np.ndarray | ShardedMatrix, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """float32 rows of either kind of matrix."""
    if isinstance(emb, ShardedMatrix):
        return emb.take(rows)
    return np.asarray(emb[np.asarray(rows, dtype=np.int64)], dtype=np.float32)


def read_rows(emb: np.ndarray | ShardedMatrix, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """float32 rows (sorted, e.g. a training sample) read with plain reads where the data is a mapped
    file (see `as_blocks`), else taken from the arrays."""
    rows = np.asarray(rows, dtype=np.int64)
    shards = emb.shards if isinstance(emb, ShardedMatrix) else [emb]
    starts = emb.starts if isinstance(emb, ShardedMatrix) else np.array([0, emb.shape[0]])
    if not all(isinstance(s, np.memmap) and s.filename for s in shards):
        return take_rows(emb, rows)
    out = np.empty((rows.size, emb.shape[1]), dtype=np.float32)
    which = np.searchsorted(starts, rows, side="right") - 1
    for s, shard in enumerate(shards):
        mine = np.flatnonzero(which == s)
        if mine.size == 0:
            continue
        row_bytes = shard.shape[1] * shard.dtype.itemsize
        fd = os.open(shard.filename, os.O_RDONLY)
        try:
            for i in mine.tolist():
                raw = os.pread(fd, row_bytes, shard.offset + (int(rows[i]) - int(starts[s])) * row_bytes)
                out[i] = np.frombuffer(raw, dtype=shard.dtype)
        finally:
            os.close(fd)
    return out
