"""Harder retrieval corpora: the passages of several files (`--corpus pooled+FILE`: a question file joined
with a Wikipedia sample) or of every benchmark and corpus file in a folder (`--corpus pooled:DIR`), pooled
into one.

The default corpus is the *distractor* setting: the paragraphs carried by the run's own questions, so each
question's gold paragraphs compete only with the ~8 distractors HotpotQA ships with it and with the other
questions' paragraphs (`ragteam.assemble.corpus`). Pooling more files (HotpotQA's, PopQA's, 2Wiki's and MuSiQue's
paragraphs, the Wikipedia sample) adds passages from other benchmarks and from Wikipedia at large: the gold
paragraphs are still there, but among more distractors.

Every file with a data suffix is read as a benchmark file (format detected); a file whose format cannot be
told is read as a passage corpus (`{id, title, text}` / FlashRAG `{id, contents}`). Question files that carry
no paragraphs (NQ, TriviaQA) add nothing and are listed so. Passages are deduplicated by title + text and all
take the id `types.doc_id(title, text)`, the id `Question.supporting_ids` uses, so recall can be measured.
A file that is neither is listed with the reason and skipped, never silently.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ragteam.types import Doc, doc_id

DATA_SUFFIXES = (".jsonl", ".json", ".tsv", ".csv")
"""Files (optionally `.gz`) read when pooling a folder; anything else (README, LICENSE) is not data."""

POOL_VERSION = 1
"""Part of the cache key: bump when the pooling rules change, so cached pools are rebuilt."""


@dataclass
class PoolSource:
    """What one file added to the pool: how it was read, its passages, and how many were new."""

    path: str
    kind: str  # "questions", "passages" or "skipped"
    format: str = ""
    records: int = 0
    passages: int = 0
    new: int = 0
    note: str = ""


def data_files(folder: str | Path) -> list[Path]:
    """The data files under `folder` (subfolders included), sorted by path so the pool's order is stable."""
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"{folder}: not a folder of benchmark files")
    out = []
    for p in sorted(root.rglob("*")):
        name = p.name.lower().removesuffix(".gz")
        if p.is_file() and not p.name.startswith(".") and name.endswith(DATA_SUFFIXES):
            out.append(p)
    return out


def _file_passages(path: Path, fmt: str | None = None) -> tuple[list[Doc], PoolSource]:
    """The passages one file contributes: a benchmark's carried paragraphs (read in `fmt`, default
    detected), or a corpus' passages."""
    from ragteam.data.corpus import pool_corpus, read_corpus
    from ragteam.data.questions import detect_format, read_questions
    from ragteam.data.records import RecordError

    try:
        fmt = fmt or detect_format(path)
    except (RecordError, ValueError) as not_questions:
        try:
            docs = read_corpus(path)
        except (RecordError, ValueError) as e:
            reason = f"neither a benchmark file ({not_questions}) nor a passage file ({e})"
            return [], PoolSource(str(path), "skipped", note=reason)
        return docs, PoolSource(str(path), "passages", "corpus", len(docs), len(docs))
    qset = read_questions(path, fmt)
    docs = pool_corpus(qset.questions)
    note = "" if docs else "its records carry no paragraphs"
    return docs, PoolSource(str(path), "questions", fmt, len(qset), len(docs), note=note)


def pool_files(
    paths: Iterable[str | Path], formats: dict[str, str | None] | None = None
) -> tuple[list[Doc], list[PoolSource]]:
    """Every passage of `paths`, deduplicated by title + text (first seen kept), ids `doc_id(title, text)`;
    `formats` gives a benchmark file's reader format by its path as given (default: detected)."""
    pooled: dict[str, Doc] = {}
    sources = []
    for path in paths:
        docs, src = _file_passages(Path(path), (formats or {}).get(str(path)))
        for d in docs:
            title, text = d.title.strip(), d.text.strip()
            key = doc_id(title, text)
            if key not in pooled:
                pooled[key] = Doc(id=key, title=title, text=text)
                src.new += 1
        sources.append(src)
    return list(pooled.values()), sources


def folder_key(paths: Iterable[str | Path], root: str | Path) -> str:
    """Cache key of a pool: sha1 of each file's path under `root` and bytes, and the pooling version."""
    digest = hashlib.sha1(f"pool-v{POOL_VERSION}".encode())
    for p in paths:
        digest.update(b"\0" + str(Path(p).relative_to(root)).encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def files_key(paths: Iterable[str | Path]) -> str:
    """Cache key of a pool of named files (`--corpus pooled+FILE`): sha1 of each file's resolved path and
    bytes, in order, and the pooling version; a file that is not there is a FileNotFoundError naming it."""
    digest = hashlib.sha1(f"files-v{POOL_VERSION}".encode())
    for p in paths:
        path = Path(p).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{p}: no such file to pool (--corpus pooled+FILE)")
        digest.update(b"\0" + str(path).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def write_files_pool(
    paths: Iterable[str | Path], out: str | Path, formats: dict[str, str | None] | None = None
) -> tuple[Path, list[PoolSource]]:
    """Pool the files `paths` into the corpus file `out` and `out` + `.sources.json`, as `write_pool` does
    for a folder."""
    paths = list(paths)
    docs, sources = pool_files(paths, formats)
    if not docs:
        raise ValueError(f"none of {', '.join(map(str, paths))} carries passages to pool")
    return _write(out, docs, sources, {"files": [str(Path(p).resolve()) for p in paths]})


def sources_table(sources: list[PoolSource]) -> list[dict]:
    """The sources as JSON-able rows (for the pool's manifest and the eval report)."""
    return [asdict(s) for s in sources]


def write_pool(folder: str | Path, out: str | Path) -> tuple[Path, list[PoolSource]]:
    """Pool `folder` into the corpus file `out` (JSONL `{id, title, text}`) and `out` + `.sources.json`."""
    files = data_files(folder)
    docs, sources = pool_files(files)
    for src in sources:  # paths under the folder: the report names `formats/musique-sample.jsonl`
        src.path = str(Path(src.path).relative_to(folder))
    if not docs:
        raise ValueError(f"{folder}: none of its {len(files)} data files carries passages to pool")
    return _write(out, docs, sources, {"folder": str(Path(folder).resolve())})


def _write(out: str | Path, docs: list[Doc], sources: list[PoolSource], where: dict) -> tuple[Path, list]:
    """The pool's corpus file and its `.sources.json` (what each file added); the corpus file last, so one
    that is present means a complete pool."""
    from ragteam.data.corpus import write_corpus

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    write_corpus(tmp, docs)
    Path(str(out) + ".sources.json").write_text(
        json.dumps({**where, "sources": sources_table(sources)}, indent=2), encoding="utf-8"
    )
    tmp.replace(out)
    return out, sources
