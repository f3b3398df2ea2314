"""Open a retriever from a `RetrieverConfig`: an index folder, a remote service, or a dataset's paragraphs.

A dataset whose records carry paragraphs (HotpotQA, 2Wiki, MuSiQue, PopQA) gets a pooled corpus and its
indexes built once and cached under `$RAGTEAM_HOME/indexes/<sha1 of file bytes + format>`; later calls (and
other processes, which wait on a file lock while one builds) reuse them. `questions_index` indexes only the
paragraphs some questions carry (a 5-question eval embeds ~50 passages, not the file's 4,858) and
`files_index` the pooled paragraphs of several files (a benchmark file joined with a Wikipedia sample); each
announces a build that takes more than a few seconds with its size and an estimate of its time. An encoder other than MiniLM
(`--retriever.dense-model`, `--retriever.pooling`, ...) gets its own cached folder (the key gains a hash of
those settings). The query encoder of an index folder is the one its manifest records unless the settings
name another, and the dense retriever refuses one that would embed queries otherwise than the passages.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import sys
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

from ragteam.config import ragteam_home
from ragteam.retrieval.base import Retriever
from ragteam.retrieval.build_config import DenseBuild
from ragteam.retrieval.config import RetrieverConfig
from ragteam.retrieval.index import IndexFolder, build_index, open_index, read_manifest
from ragteam.types import Doc, Question

KIND_NEEDS = {"bm25": ("bm25",), "dense": ("dense",), "hybrid": ("bm25", "dense")}


def retriever_from_index(index: IndexFolder | str | Path, cfg: RetrieverConfig) -> Retriever:
    """A retriever of kind `cfg.kind` (bm25, dense or hybrid) over an index folder."""
    folder = index if isinstance(index, IndexFolder) else open_index(index)
    if cfg.kind not in KIND_NEEDS:
        raise ValueError(
            f"retriever kind {cfg.kind!r} does not open an index folder (use bm25, dense or hybrid)"
        )
    missing = [k for k in KIND_NEEDS[cfg.kind] if k not in folder.kinds]
    if missing:
        raise ValueError(
            f"{folder.path}: kind {cfg.kind} needs the {', '.join(missing)} index, which this folder lacks "
            f"(it has {', '.join(folder.kinds) or 'none'}); add it with `ragteam index ... --kinds {' '.join(missing)}`"
        )
    from ragteam.retrieval.bm25 import BM25Retriever
    from ragteam.retrieval.dense import DenseRetriever
    from ragteam.retrieval.hybrid import HybridRetriever

    if cfg.kind == "bm25":
        return BM25Retriever(folder.path, folder.docs)
    dense = DenseRetriever(
        folder.path,
        folder.docs,
        query_encoder(folder, cfg),
        backend=cfg.dense_backend,
        nprobe=cfg.nprobe,
        ef_search=cfg.ef_search,
    )
    if cfg.kind == "dense":
        return dense
    return HybridRetriever(
        BM25Retriever(folder.path, folder.docs),
        dense,
        fusion_method=cfg.fusion,
        dense_weight=cfg.dense_weight,
        depth=cfg.depth,
    )


def query_encoder(folder: IndexFolder, cfg: RetrieverConfig):
    """The encoder of `folder`'s queries: `--retriever.dense-model` or the folder its manifest records (MiniLM
    for an index built with the default), with the pooling, normalisation and query prefix the settings give,
    else the ones recorded (a plain transformers folder declares none itself)."""
    from ragteam.retrieval.encoder import MODEL_NAME, POOLINGS, Encoder

    dense = folder.manifest.get("dense") or {}
    model = cfg.dense_model
    if model is None and dense.get("model") not in (None, MODEL_NAME):
        model = dense.get("model_path") or dense["model"]
        if not Path(model).exists():
            raise ValueError(
                f"{folder.path}: its passages were embedded with {dense['model']!r}, whose folder {model} is "
                "not here; point --retriever.dense-model at a copy of it"
            )
    recorded = dense.get("pooling") is not None  # older indexes record no settings: the encoder's own
    pooling = cfg.pooling or (dense["pooling"] if recorded and dense["pooling"] in POOLINGS else None)
    normalize = (
        cfg.normalize if cfg.normalize is not None else (dense.get("normalized") if recorded else None)
    )
    prefix = (
        cfg.query_prefix
        if cfg.query_prefix is not None
        else (dense.get("query_prefix") if recorded else None)
    )
    return Encoder(model, device=cfg.device, pooling=pooling, normalize=normalize, query_prefix=prefix)


def dense_build(cfg: RetrieverConfig) -> DenseBuild | None:
    """The index-build settings of the encoder `cfg` names, for an index built from a dataset or corpus file;
    None when it names none (MiniLM with its own settings)."""
    chosen = {
        "model": cfg.dense_model,
        "pooling": cfg.pooling,
        "normalize": cfg.normalize,
        "query_prefix": cfg.query_prefix,
    }
    if all(v is None for v in chosen.values()):
        return None
    return DenseBuild(device=cfg.device, **chosen)


def encoder_key(dense: DenseBuild | None, kinds: Sequence[str]) -> str:
    """The suffix of a cached index folder's name for an encoder other than the default: "" for MiniLM (or an
    index without dense kind), else `-enc<hash of the encoder settings>`."""
    if dense is None or "dense" not in kinds:
        return ""
    from ragteam.retrieval.encoder import model_name

    spec = {
        "model": model_name(dense.model) if dense.model else None,
        "pooling": dense.pooling,
        "normalize": dense.normalize,
        "query_prefix": dense.query_prefix,
    }
    return "-enc" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]


def dataset_key(path: str | Path, fmt: str) -> str:
    """Cache key of a dataset file read in format `fmt`: sha1 of its bytes and the format name."""
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    digest.update(b"\0format=" + fmt.encode())
    return digest.hexdigest()[:16]


@contextmanager
def _locked(lock_path: Path):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def dataset_index(
    data: str | Path,
    fmt: str | None = None,
    kinds: Sequence[str] = ("bm25", "dense"),
    questions: Sequence[Question] | None = None,
    progress: bool = True,
    dense: DenseBuild | None = None,
) -> IndexFolder:
    """The cached index of the paragraphs pooled from dataset `data` (built now if missing), opened; `dense`
    names an encoder other than MiniLM (`dense_build`)."""
    from ragteam.data.corpus import pool_corpus
    from ragteam.data.questions import detect_format, read_questions

    fmt = fmt or detect_format(data)
    folder = ragteam_home() / "indexes" / (dataset_key(data, fmt) + encoder_key(dense, kinds))
    with _locked(folder.with_suffix(".lock")):
        have: list[str] = []
        if (folder / "manifest.json").is_file():
            have = list(read_manifest(folder).get("kinds", []))
        if all(k in have for k in kinds):
            return open_index(folder)
        if questions is None:
            questions = read_questions(data, fmt).questions
        docs = pool_corpus(questions)
        if not docs:
            raise ValueError(
                f"{data}: its {fmt} records carry no paragraphs to pool into a corpus; "
                "build an index from a corpus file (`ragteam index --corpus FILE`) and pass --index"
            )
        note = build_estimate(len(docs), [k for k in kinds if k not in have], dense) if progress else None
        if note:
            print(f"ragteam: {note}; cached in {folder}", file=sys.stderr, flush=True)
        return build_index(
            docs,
            folder,
            kinds=list(kinds),
            progress=progress,
            source=f"pooled from {Path(data).resolve()} ({fmt})",
            dense=dense,
        )


def open_retriever(cfg: RetrieverConfig, data: str | None = None, fmt: str | None = None) -> Retriever:
    """The retriever `cfg` describes: remote (`cfg.url`), an index folder (`cfg.index`), or the cached
    pooled-paragraph index of dataset `data` when neither is given."""
    if cfg.kind == "remote":
        if not cfg.url:
            raise ValueError("retriever kind remote needs a URL (--retriever.url http://HOST:PORT)")
        from ragteam.retrieval.remote import RemoteRetriever

        return RemoteRetriever(cfg.url, timeout=cfg.timeout, retries=cfg.retries)
    if cfg.index:
        return retriever_from_index(cfg.index, cfg)
    if data:
        folder = dataset_index(data, fmt, kinds=KIND_NEEDS[cfg.kind], dense=dense_build(cfg))
        return retriever_from_index(folder, cfg)
    raise ValueError(
        f"retriever kind {cfg.kind} needs an index folder (--index DIR, built by `ragteam index`) "
        "or a dataset whose records carry paragraphs"
    )


def _cached_index(
    folder: Path,
    kinds: Sequence[str],
    make_docs,
    source: str,
    progress: bool,
    dense: DenseBuild | None = None,
) -> IndexFolder:
    """Open the index cached in `folder` (+ the encoder's key) if it has `kinds`, else build it from
    `make_docs()` (under a lock, so that concurrent evals of the same corpus build it once)."""
    folder = folder.with_name(folder.name + encoder_key(dense, kinds))
    with _locked(folder.with_suffix(".lock")):
        have: list[str] = []
        if (folder / "manifest.json").is_file():
            have = list(read_manifest(folder).get("kinds", []))
        if all(k in have for k in kinds):
            return open_index(folder)
        docs = make_docs()
        if progress and isinstance(docs, list):
            note = build_estimate(len(docs), [k for k in kinds if k not in have], dense)
            if note:
                print(f"ragteam: {note}; cached in {folder}", file=sys.stderr, flush=True)
        return build_index(docs, folder, kinds=list(kinds), progress=progress, source=source, dense=dense)


DENSE_PASSAGES_PER_SECOND = 15.0
"""all-MiniLM-L6-v2 on the 2 shared CPU cores of the development machine (HotpotQA paragraphs, ~120 words):
13.5 passages/s in issue 31's run (4,858 in 6 min), 6.6/s at load average 9. The estimate is the busy
machine's order of magnitude (minutes or seconds); the progress bar that follows shows the live rate."""

BM25_PASSAGES_PER_SECOND = 5000.0
"""tantivy's BM25 build, conservatively (44,000 passages/s measured on the same busy machine)."""


def build_estimate(passages: int, kinds: Sequence[str], dense: DenseBuild | None = None) -> str | None:
    """One line announcing an index build of `passages` passages (the kinds still to build), with its
    estimated time, or None when it is quick (under ~5 s): a long silent build looks like a hang."""
    seconds = 0.0
    if "dense" in kinds:
        seconds += passages / DENSE_PASSAGES_PER_SECOND
    if "bm25" in kinds:
        seconds += passages / BM25_PASSAGES_PER_SECOND
    if seconds < 5:
        return None
    about = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
    encoder = (
        ""
        if "dense" not in kinds
        else f", embedded with {dense.model if dense and dense.model else 'all-MiniLM-L6-v2'}"
    )
    return (
        f"indexing {passages:,} passages ({', '.join(kinds)}{encoder}): about {about} on 2 busy CPU cores "
        "(once: later runs reuse it)"
    )


def content_key(docs: Sequence[Doc], label: str) -> str:
    """Cache key of a list of passages: sha1 of a label and each passage's id, title and text, in order."""
    digest = hashlib.sha1(label.encode())
    for d in docs:
        digest.update(b"\0" + d.id.encode() + b"\1" + d.title.encode() + b"\1" + d.text.encode())
    return digest.hexdigest()[:16]


def questions_index(
    questions: Sequence[Question],
    kinds: Sequence[str] = ("bm25", "dense"),
    progress: bool = True,
    dense: DenseBuild | None = None,
    source: str = "questions",
) -> IndexFolder:
    """The cached index of the paragraphs `questions` carry (each question's own, deduplicated): the passages
    a run over these questions can retrieve in the distractor setting, and no others, so a 5-question eval
    embeds ~50 passages instead of the whole file's. ValueError when they carry none."""
    from ragteam.data.corpus import pool_corpus

    docs = pool_corpus(questions)
    if not docs:
        raise ValueError(
            f"{source}: its questions carry no paragraphs to retrieve from; give a corpus "
            "(--corpus FILE, --corpus pooled+FILE, or an index folder)"
        )
    folder = ragteam_home() / "indexes" / f"own-{content_key(docs, 'own-v1')}"
    label = f"the own paragraphs of {len(questions)} questions of {source}"
    return _cached_index(folder, kinds, lambda: docs, label, progress, dense)


def files_index(
    paths: Sequence[str | Path],
    kinds: Sequence[str] = ("bm25", "dense"),
    progress: bool = True,
    dense: DenseBuild | None = None,
    formats: dict[str, str | None] | None = None,
) -> IndexFolder:
    """The cached index of every paragraph the files `paths` carry (benchmark files: their records'
    paragraphs; passage files: their passages), pooled and deduplicated by content (`data.pooled`); `formats`
    gives a benchmark file's reader format by path (default: detected)."""
    from ragteam.data.corpus import read_corpus
    from ragteam.data.pooled import files_key, write_files_pool

    key = files_key(paths)
    folder = ragteam_home() / "indexes" / f"pooled-{key}"
    corpus = ragteam_home() / "corpora" / f"pooled-{key}.jsonl"

    def docs():
        if not corpus.is_file():
            corpus.parent.mkdir(parents=True, exist_ok=True)
            write_files_pool(paths, corpus, formats)
        return read_corpus(corpus)

    source = "pooled from " + " + ".join(str(Path(p).resolve()) for p in paths) + f" ({corpus.name})"
    return _cached_index(folder, kinds, docs, source, progress, dense)


def corpus_file_index(
    path: str | Path,
    kinds: Sequence[str] = ("bm25", "dense"),
    progress: bool = True,
    dense: DenseBuild | None = None,
) -> IndexFolder:
    """The cached index of a passage file (`{id, title, text}` / FlashRAG `{id, contents}` / DPR TSV), under
    `$RAGTEAM_HOME/indexes/corpus-<key>`; the key is the file's resolved path, size and modification time
    (hashing a multi-GB corpus on every eval would cost more than the eval). The file is streamed into the
    index (`(line, Doc)` pairs, so a repeated id is named by its line), never held in memory."""
    from ragteam.data.corpus import iter_corpus

    p = Path(path).resolve()
    if not p.exists():
        raise FileNotFoundError(f"{path}: no such corpus file (--corpus FILE, or 'distractor' / 'pooled')")
    if not p.is_file():  # a folder, a FIFO (opening it would block), a device
        kind = "a folder" if p.is_dir() else "not a regular file (a pipe or a device?)"
        raise ValueError(f"{path}: {kind}; --corpus takes a passage file, or 'distractor' / 'pooled'")
    st = p.stat()
    key = hashlib.sha1(f"{p}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    folder = ragteam_home() / "indexes" / f"corpus-{key}"
    # a path: errors name lines
    return _cached_index(folder, kinds, lambda: iter_corpus(p), str(p), progress, dense)


def pooled_index(
    data_folder: str | Path,
    kinds: Sequence[str] = ("bm25", "dense"),
    progress: bool = True,
    dense: DenseBuild | None = None,
) -> IndexFolder:
    """The cached index of every passage of the benchmark and corpus files under `data_folder`
    (`ragteam.data.pooled`); the pooled corpus file is kept under `$RAGTEAM_HOME/corpora/`."""
    from ragteam.data.corpus import read_corpus
    from ragteam.data.pooled import data_files, folder_key, write_pool

    files = data_files(data_folder)
    key = folder_key(files, data_folder)
    folder = ragteam_home() / "indexes" / f"pooled-{key}"
    corpus = ragteam_home() / "corpora" / f"pooled-{key}.jsonl"

    def docs():
        if not corpus.is_file():
            corpus.parent.mkdir(parents=True, exist_ok=True)
            write_pool(data_folder, corpus)
        return read_corpus(corpus)

    source = f"pooled from {len(files)} files under {Path(data_folder).resolve()} ({corpus.name})"
    return _cached_index(folder, kinds, docs, source, progress, dense)


def pool_sources(index: IndexFolder) -> list[dict] | None:
    """The per-file sources of a pooled index (what each file added), or None for another index."""
    import json

    name = Path(index.path).name.split("-enc")[0]  # the same pool whatever the encoder
    if not name.startswith("pooled-"):
        return None
    path = ragteam_home() / "corpora" / f"{name}.jsonl.sources.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("sources")
