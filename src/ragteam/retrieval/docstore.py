"""The passages of an index folder, written as a stream and read lazily by row through a memory map.

`docs.jsonl` holds one `{id, title, text}` per line in row order; `docs.offsets.npy` holds the byte offset of
every line (n + 1 values). Opening a store maps both files, so a 20-million-passage corpus costs no memory
until rows are read, and every retriever of the folder shares the same rows.

Writing streams too: passages are written as they arrive, and the only state kept per passage is 16 bytes
(a 64-bit hash of its id and its source line), so that repeated ids can be found after the pass (a sort of
the hashes; equal hashes are confirmed on the ids themselves) and named by line: 336 MB for the 21 million
passages of the DPR Wikipedia dump, where a set of the ids themselves would take several GB. The offsets go
to a raw file as they are known and become the .npy at the end.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ragteam.types import Doc

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs.offsets.npy"
# Passages per buffered write of offsets/hashes, and per chunk when a store is read as a stream.
CHUNK = 4096


def _id_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")


def _write_npy_from_raw(raw: Path, path: Path, dtype: str, count: int) -> None:
    """Turn a raw little-endian array file into a .npy without loading it (header, then the bytes)."""
    with open(path, "wb") as out, open(raw, "rb") as src:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (count,)}
        )
        shutil.copyfileobj(src, out, 1 << 20)
    raw.unlink()


def write_docstore(
    folder: str | Path,
    docs: Iterable[Doc | tuple[int, Doc]],
    where: str | None = None,
    skip_repeats: bool = False,
    errors: list[str] | None = None,
) -> tuple[int, str]:
    """Write `docs` into `folder` (docs.jsonl + offsets), streaming; return (count, sha1 of docs.jsonl).

    Items are `Doc`s or `(line, Doc)` pairs (as `data.corpus.iter_corpus` yields them); with pairs and
    `where` (the corpus file), a repeated id is reported as `FILE:LINE: field 'id' repeats ...`. A repeated
    id is an error, or with `skip_repeats` the later passage is dropped and its message goes to `errors`.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1()
    raw_offsets = out / (OFFSETS_FILE + ".raw")
    hashes: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    buf_off: list[int] = []
    buf_hash: list[int] = []
    buf_line: list[int] = []
    pos = n = 0
    with open(out / DOCS_FILE, "wb", buffering=1 << 20) as f, open(raw_offsets, "wb") as fo:
        fo.write(np.zeros(1, dtype="<i8").tobytes())
        for item in docs:
            line, d = item if isinstance(item, tuple) else (n + 1, item)
            row = (json.dumps(d.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
            f.write(row)
            digest.update(row)
            pos += len(row)
            n += 1
            buf_off.append(pos)
            buf_hash.append(_id_hash(d.id))
            buf_line.append(line)
            if len(buf_off) >= CHUNK:
                fo.write(np.asarray(buf_off, dtype="<i8").tobytes())
                hashes.append(np.asarray(buf_hash, dtype=np.uint64))
                lines.append(np.asarray(buf_line, dtype=np.int64))
                buf_off, buf_hash, buf_line = [], [], []
        fo.write(np.asarray(buf_off, dtype="<i8").tobytes())
    hashes.append(np.asarray(buf_hash, dtype=np.uint64))
    lines.append(np.asarray(buf_line, dtype=np.int64))
    if n == 0:
        raw_offsets.unlink()
        raise ValueError("corpus: no passages to index")
    _write_npy_from_raw(raw_offsets, out / OFFSETS_FILE, "<i8", n + 1)
    repeats = _repeated_rows(out, np.concatenate(hashes))
    if not repeats:
        return n, digest.hexdigest()
    line_of = np.concatenate(lines)
    by_line = where is not None
    messages = []
    for row, first, doc_id in repeats:
        if by_line:
            messages.append(
                f"{where}:{line_of[row]}: field 'id' repeats {doc_id!r} (first at line {line_of[first]})"
            )
        else:
            messages.append(
                f"corpus: passage {row + 1} repeats the id {doc_id!r} (first at passage {first + 1}); "
                "ids must be unique"
            )
    if not skip_repeats:
        raise ValueError(messages[0])
    if errors is not None:
        errors.extend(messages)
    return _drop_rows(out, {row for row, _, _ in repeats})


def _repeated_rows(folder: Path, hashes: np.ndarray) -> list[tuple[int, int, str]]:
    """(row, first row, id) of every passage whose id an earlier passage has, in row order."""
    order = np.argsort(hashes, kind="stable")
    sorted_h = hashes[order]
    later = np.flatnonzero(sorted_h[1:] == sorted_h[:-1]) + 1
    if later.size == 0:
        return []
    store = DocStore(folder)
    try:
        out = []
        for p in later.tolist():
            row = int(order[p])
            group_start = int(np.searchsorted(sorted_h, sorted_h[p], side="left"))
            doc_id = store[row].id
            # the first row of the group with this very id (equal hashes of other ids are not repeats)
            for q in range(group_start, p):
                first = int(order[q])
                if store[first].id == doc_id:
                    out.append((row, first, doc_id))
                    break
        return sorted(out)
    finally:
        store.close()


def _drop_rows(folder: Path, drop: set[int]) -> tuple[int, str]:
    """Rewrite the store without rows `drop` (a second streaming pass, only when repeats were skipped)."""
    src = DocStore(folder)
    tmp = folder / ".rewrite"
    try:
        kept = (d for row, d in enumerate(src) if row not in drop)
        n, sha = write_docstore(tmp, kept)
    finally:
        src.close()
    for name in (DOCS_FILE, OFFSETS_FILE):
        os.replace(tmp / name, folder / name)
    tmp.rmdir()
    return n, sha


class DocStore:
    """Row -> Doc over a memory-mapped `docs.jsonl`; `len()` is the number of passages."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        path = self.folder / DOCS_FILE
        if not path.is_file() or not (self.folder / OFFSETS_FILE).is_file():
            raise FileNotFoundError(f"{self.folder}: no {DOCS_FILE} / {OFFSETS_FILE} (not an index folder?)")
        self._offsets = np.load(self.folder / OFFSETS_FILE, mmap_mode="r")
        self._file = open(path, "rb")  # noqa: SIM115 - stays open for the memory map; see close()
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._n = len(self._offsets) - 1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, row: int) -> Doc:
        row = int(row)
        if not 0 <= row < self._n:
            raise IndexError(f"{self.folder}: row {row} out of range (0..{self._n - 1})")
        start, end = self._offsets[row : row + 2].tolist()
        return _parse(self._map[start:end], self.folder, row)

    def get_many(self, rows: Iterable[int]) -> list[Doc]:
        """The docs at `rows`, in that order."""
        return [self[r] for r in rows]

    def iter_chunks(
        self, size: int | None = None, start: int = 0, stop: int | None = None
    ) -> Iterator[list[Doc]]:
        """Rows `start..stop` as lists of at most `size` (default `CHUNK`) docs, read with plain file reads.

        Why not the memory map: a sequential pass over a many-GB store through the map would leave every
        page it touched counted in this process's resident memory; reads leave them in the page cache only.
        """
        stop = self._n if stop is None else min(stop, self._n)
        size = size or CHUNK
        with open(self.folder / DOCS_FILE, "rb") as f:
            for a in range(start, stop, size):
                b = min(a + size, stop)
                offs = self._offsets[a : b + 1].tolist()
                f.seek(offs[0])
                data = f.read(offs[-1] - offs[0])
                base = offs[0]
                yield [
                    _parse(data[offs[i] - base : offs[i + 1] - base], self.folder, a + i)
                    for i in range(b - a)
                ]

    def __iter__(self) -> Iterator[Doc]:
        for chunk in self.iter_chunks():
            yield from chunk

    def close(self) -> None:
        self._map.close()
        self._file.close()


def _parse(line: bytes, folder: Path, row: int) -> Doc:
    try:
        d = json.loads(line)
        return Doc(d["id"], d["title"], d["text"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{folder / DOCS_FILE}:{row + 1}: not a passage record ({e}); rebuild the index"
        ) from None
