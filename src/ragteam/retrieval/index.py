"""Index folders: the corpus, its BM25 index and its dense embeddings, described by a manifest.

    folder/
      manifest.json          {"format": "ragteam-index", "version", "kinds", "corpus_sha1", "num_docs", ...}
      docs.jsonl             the passages, one {id, title, text} per line, in row order
      docs.offsets.npy       byte offset of every line (memory-mapped row access)
      bm25/                  tantivy segments (kind "bm25")
      dense/shards/*.npy     (rows, dim) float32 or float16 shards (kind "dense"; MiniLM: 384, unit length);
                             dense/meta.json names the encoder, its pooling, normalisation and query prefix
      dense/ivf.faiss, ivf.ivfdata / dense/hnsw.faiss   optional approximate indexes (`ann.py`)

`build_index` streams: the passages go to docs.jsonl as they arrive (an iterator of millions is never held
in memory), then each kind reads them back from there in chunks. It adds missing kinds to an existing folder
of the same corpus, or, given no passages, to the folder as it is. `open_index` reads its manifest and opens
the passages memory-mapped. Version 1 folders (one dense/embeddings.npy) still open.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragteam.config import versions
from ragteam.retrieval.build_config import BM25Build, DenseBuild
from ragteam.retrieval.docstore import DocStore, write_docstore
from ragteam.types import Doc

MANIFEST = "manifest.json"
FORMAT = "ragteam-index"
VERSION = 2
READS = (1, 2)  # version 1: dense embeddings in one file
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
    if manifest.get("version") not in READS:
        raise ValueError(
            f"{path}: index version {manifest.get('version')} (this ragteam reads {', '.join(map(str, READS))}); "
            "rebuild"
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
    """Write `manifest`, first taking in what another process recorded meanwhile for the same corpus
    (BM25 built in one process while GPU processes embed: neither may drop the other's kind)."""
    try:
        current = read_manifest(folder) if (folder / MANIFEST).is_file() else {}
    except ValueError:
        current = {}
    if current.get("corpus_sha1") == manifest.get("corpus_sha1"):
        manifest["kinds"] = sorted({*current.get("kinds", []), *manifest.get("kinds", [])})
        for key in ("bm25", "dense"):
            if key in current and key not in manifest:
                manifest[key] = current[key]
        for key, value in current.get("build_seconds", {}).items():
            manifest.setdefault("build_seconds", {}).setdefault(key, value)
    tmp = folder / f"{MANIFEST}.{os.getpid()}.tmp"  # per process: parts of one build may write at once
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(folder / MANIFEST)


def _place_docstore(
    docs: Iterable[Doc | tuple[int, Doc]],
    out: Path,
    overwrite: bool,
    source: str | None,
    skip_repeats: bool,
    errors: list[str] | None,
) -> dict[str, Any]:
    """Stream `docs` into a staging store; keep the folder's manifest if it holds the same corpus, else
    replace the folder's contents (with `overwrite`) and start a new manifest."""
    staging = out / ".staging"
    if staging.exists():
        shutil.rmtree(staging)
    where = source if source and Path(source).exists() else None
    try:
        n, sha = write_docstore(staging, docs, where=where, skip_repeats=skip_repeats, errors=errors)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if (out / MANIFEST).is_file():
        old = read_manifest(out)
        if old.get("corpus_sha1") == sha:
            shutil.rmtree(staging)
            return old
        if not overwrite:
            shutil.rmtree(staging)
            raise ValueError(
                f"{out}: holds an index of another corpus; pass overwrite (--overwrite) to replace it"
            )
    for name in (MANIFEST, "bm25", "dense"):
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for f in staging.iterdir():
        f.replace(out / f.name)
    shutil.rmtree(staging, ignore_errors=True)
    return {
        "format": FORMAT,
        "version": VERSION,
        "kinds": [],
        "corpus_sha1": sha,
        "num_docs": n,
        "source": source,
        "versions": versions(),
    }


def build_index(
    docs: Iterable[Doc | tuple[int, Doc]] | None,
    out_dir: str | Path,
    kinds: Sequence[str] = KINDS,
    overwrite: bool = False,
    progress: bool = True,
    batch_size: int = 64,
    source: str | None = None,
    dense: DenseBuild | None = None,
    bm25: BM25Build | None = None,
    encoder: Any = None,
    skip_repeats: bool = False,
    errors: list[str] | None = None,
) -> IndexFolder:
    """Write an index folder of `docs` with the given kinds ("bm25", "dense") and return it opened.

    `docs` is any iterable of `Doc`s (or `(line, Doc)` pairs, so that a repeated id is named by its line of
    `source`), consumed once as a stream; None adds kinds to the existing folder `out_dir`. An existing folder
    of the same corpus keeps its kinds and gains the missing ones (and the approximate index `dense.index`
    when it lacks it); a folder of another corpus is an error unless `overwrite`. `source` (e.g. the corpus
    file) is recorded in the manifest. `encoder` replaces the one `dense` names (`--dense.model`, MiniLM by
    default) for the passages; its name, folder, pooling, normalisation and query prefix are recorded.
    With `dense.part` set, only that part's shards are embedded; "dense" is marked built by the run that
    finds every shard done.
    """
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ValueError(f"index kinds must be among {list(KINDS)}, got {list(kinds)}")
    dense_cfg, bm25_cfg = dense or DenseBuild(), bm25 or BM25Build()
    out = Path(out_dir)
    if docs is None:
        if not (out / MANIFEST).is_file():
            raise ValueError(f"{out}: no passages given and not an index folder to add kinds to")
        manifest = read_manifest(out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        manifest = _place_docstore(docs, out, overwrite, source, skip_repeats, errors)
        manifest.setdefault("build_seconds", {}).setdefault("docs", round(time.perf_counter() - t0, 3))
        # written now, so that a build that dies later is resumed (same corpus) rather than wiped
        _write_manifest(out, {**manifest, "version": VERSION})
    manifest["version"] = VERSION
    store = DocStore(out)
    timings = manifest.setdefault("build_seconds", {})
    try:
        for kind in kinds:
            t0 = time.perf_counter()
            if kind == "bm25" and kind not in manifest["kinds"]:
                from ragteam.retrieval.bm25 import ANALYZER_SPEC, build_bm25

                build_bm25(
                    out, store, bm25_cfg.heap_mb, bm25_cfg.threads, progress=progress, total=len(store)
                )
                manifest["bm25"] = {"library": "tantivy", "analyzer": ANALYZER_SPEC, "k1": 1.2, "b": 0.75}
            elif kind == "dense" and kind not in manifest["kinds"]:
                from ragteam.retrieval.dense import build_dense
                from ragteam.retrieval.encoder import build_encoder, encoder_settings

                enc = encoder or build_encoder(dense_cfg, batch_size)
                done = build_dense(out, store, enc, progress, dense_cfg, manifest["corpus_sha1"])
                if not done["complete"]:
                    continue  # a part of a multi-process build, other parts still missing
                settings = encoder_settings(enc)
                manifest["dense"] = {
                    "model": enc.name,
                    "model_path": getattr(enc, "path", None),
                    "pooling": settings["pooling"],
                    "normalized": settings["normalize"],
                    "query_prefix": settings["query_prefix"],
                    "dim": done["dim"],
                    "dtype": dense_cfg.dtype,
                    "shards": done["shards"],
                }
            else:
                continue
            timings[kind] = round(time.perf_counter() - t0, 3)
            manifest["kinds"] = sorted({*manifest["kinds"], kind})
            _write_manifest(out, manifest)  # after each kind, so a crash later keeps what is done
        if "dense" in kinds and "dense" in manifest["kinds"] and dense_cfg.index != "flat":
            _add_ann(out, manifest, dense_cfg)
    finally:
        store.close()
    _write_manifest(out, manifest)
    return open_index(out)


def _add_ann(out: Path, manifest: dict[str, Any], cfg: DenseBuild) -> None:
    """Build the approximate index `cfg.index` unless the folder has one of the same settings."""
    from ragteam.retrieval.dense import build_ann, open_embeddings, record_ann

    _, meta = open_embeddings(out)
    have = meta.get("ann", {}).get(cfg.index)
    want = {"codec": cfg.codec}
    if cfg.index == "ivf":
        want["nlist"] = cfg.lists_for(manifest["num_docs"])
    else:
        want.update(M=cfg.hnsw_m, ef_construction=cfg.ef_construction)
    if have and all(have.get(k) == v for k, v in want.items()):
        knob = {"nprobe": cfg.nprobe} if cfg.index == "ivf" else {"ef_search": cfg.ef_search}
        record_ann(out, cfg.index, {**have, **knob})  # the same structure: only its search default changes
        manifest["dense"].setdefault("ann", {})[cfg.index] = {**have, **knob}
        return
    info = build_ann(out, cfg)
    dense = manifest.setdefault("dense", {})
    dense.setdefault("ann", {})[cfg.index] = {k: v for k, v in info.items() if k != "build_seconds"}
    manifest.setdefault("build_seconds", {})[f"dense.{cfg.index}"] = info["build_seconds"]
