"""The passages of an index folder, read lazily by row through a memory map.

`docs.jsonl` holds one `{id, title, text}` per line in row order; `docs.offsets.npy` holds the byte offset of
every line (n + 1 values). Opening a store maps both files, so a 20-million-passage corpus costs no memory
until rows are read, and every retriever of the folder shares the same rows.
"""

from __future__ import annotations

import hashlib
import json
import mmap
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ragteam.types import Doc

DOCS_FILE = "docs.jsonl"
OFFSETS_FILE = "docs.offsets.npy"


def write_docstore(folder: str | Path, docs: Iterable[Doc]) -> tuple[int, str]:
    """Write `docs` into `folder` (docs.jsonl + offsets); return (count, sha1 of docs.jsonl)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1()
    offsets = [0]
    seen: set[str] = set()
    with open(out / DOCS_FILE, "wb") as f:
        for n, d in enumerate(docs, start=1):
            if d.id in seen:
                raise ValueError(f"corpus: passage {n} repeats the id {d.id!r}; ids must be unique")
            seen.add(d.id)
            line = (json.dumps(d.to_dict(), ensure_ascii=False) + "\n").encode("utf-8")
            f.write(line)
            digest.update(line)
            offsets.append(offsets[-1] + len(line))
    if len(offsets) == 1:
        raise ValueError("corpus: no passages to index")
    np.save(out / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    return len(offsets) - 1, digest.hexdigest()


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
        d = json.loads(self._map[start:end])
        return Doc(d["id"], d["title"], d["text"])

    def get_many(self, rows: Iterable[int]) -> list[Doc]:
        """The docs at `rows`, in that order."""
        return [self[r] for r in rows]

    def __iter__(self):
        for row in range(len(self)):
            yield self[row]

    def close(self) -> None:
        self._map.close()
        self._file.close()
