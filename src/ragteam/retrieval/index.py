"""Index folders: the corpus, its BM25 index and its dense embeddings, described by a manifest.

    folder/
      manifest.json          {"format": "ragteam-index", "version", "kinds", "corpus_sha1", "num_docs", ...}
      docs.jsonl             the passages, one {id, title, text} per line, in row order
      docs.offsets.npy       byte offset of every line (memory-mapped row access)
      bm25/                  tantivy segments (kind "bm25")
      dense/embeddings.npy   (num_docs, 384) float32, unit length (kind "dense"); dense/meta.json

`build_index` writes a folder (adding missing kinds to an existing folder of the same corpus);
`open_index` reads its manifest and opens the passages memory-mapped.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragteam.config import versions
from ragteam.retrieval.docstore import DocStore, write_docstore
from ragteam.types import Doc

MANIFEST = "manifest.json"
FORMAT = "ragteam-index"
VERSION = 1
KINDS = ("bm25", "dense")


@dataclass
class IndexFolder:
    """An opened index folder: its manifest and its passages (shared by every retriever opened on it)."""

    path: Path
    manifest: dict[str, Any]
    docs: DocStore = field(repr=False)

    @property
    def kinds(self) -> list[str]:
        return list(self.manifest.get("kinds", []))

    def __len__(self) -> int:
        return len(self.docs)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of an index folder; a clear error when the folder is not one."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{folder}: not an index folder (no {MANIFEST}); build one with `ragteam index`"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not a ragteam index manifest")
    if manifest.get("version") != VERSION:
        raise ValueError(
            f"{path}: index version {manifest.get('version')} (this ragteam reads {VERSION}); rebuild"
        )
    return manifest


def open_index(folder: str | Path) -> IndexFolder:
    """Open an index folder built by `build_index` (passages memory-mapped)."""
    p = Path(folder)
    manifest = read_manifest(p)
    docs = DocStore(p)
    if len(docs) != manifest.get("num_docs"):
        raise ValueError(
            f"{p}: manifest says {manifest.get('num_docs')} passages, docs.jsonl has {len(docs)}"
        )
    return IndexFolder(path=p, manifest=manifest, docs=docs)


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(folder / MANIFEST)


def build_index(
    docs: Iterable[Doc],
    out_dir: str | Path,
    kinds: Sequence[str] = KINDS,
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 64,
    source: str | None = None,
) -> IndexFolder:
    """Write an index folder of `docs` with the given kinds ("bm25", "dense") and return it opened.

    An existing folder of the same corpus keeps its kinds and gains the missing ones; a folder of another
    corpus is an error unless `overwrite`. `source` (e.g. the corpus file) is recorded in the manifest.
    """
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"index kinds must be among {list(KINDS)}, got {list(kinds)}")
    out = Path(out_dir)
    docs = list(docs)
    if not docs:
        raise ValueError("cannot index an empty corpus")
    staging = out / ".staging"
    if staging.exists():
        shutil.rmtree(staging)
    n, sha = write_docstore(staging, docs)
    manifest: dict[str, Any] = {}
    if (out / MANIFEST).is_file():
        old = read_manifest(out)
        if old.get("corpus_sha1") == sha:
            manifest = old
        elif not overwrite:
            shutil.rmtree(staging)
            raise ValueError(
                f"{out}: holds an index of another corpus; pass overwrite (--overwrite) to replace it"
            )
    if not manifest:
        for name in (MANIFEST, "bm25", "dense"):
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        for f in staging.iterdir():
            f.replace(out / f.name)
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "kinds": [],
            "corpus_sha1": sha,
            "num_docs": n,
            "source": source,
            "versions": versions(),
        }
    shutil.rmtree(staging, ignore_errors=True)
    timings = manifest.setdefault("build_seconds", {})
    for kind in kinds:
        if kind in manifest["kinds"]:
            continue
        t0 = time.perf_counter()
        if kind == "bm25":
            from ragteam.retrieval.bm25 import ANALYZER_SPEC, build_bm25

            build_bm25(out, docs)
            manifest["bm25"] = {"library": "tantivy", "analyzer": ANALYZER_SPEC, "k1": 1.2, "b": 0.75}
        else:
            from ragteam.retrieval.dense import MODEL_NAME, Encoder, build_dense

            dim = build_dense(out, docs, Encoder(batch_size=batch_size), progress=progress)
            manifest["dense"] = {"model": MODEL_NAME, "dim": dim, "dtype": "float32", "normalized": True}
        timings[kind] = round(time.perf_counter() - t0, 3)
        manifest["kinds"] = sorted({*manifest["kinds"], kind})
        _write_manifest(out, manifest)  # after each kind, so a crash later keeps what is done
    return open_index(out)
