"""Which corpus a run retrieves from (`--corpus`, on every command that retrieves), and what its report
states about it.

`--corpus` picks it (unless `--retriever.index DIR` or `--retriever.url URL` names one directly):

- `distractor` (the default under `--profile small`): the paragraphs the run's own questions carry, gold
  included: HotpotQA's distractor setting, each question's two gold paragraphs among its ~8 distractors, and
  the other questions' of the run beside them. Only those passages are indexed: `eval --limit 5` embeds ~50,
  not the file's 4,858. The corpus grows with the run's questions; for one that does not, use `pooled`.
- `pooled` (the papers' setting: `--profile paper` and every `train ppo --recipe`): every paragraph of the
  question file(s) (`--data`, and `--eval-data` in training), pooled and deduplicated: 4,858 passages for
  HotpotQA-500. `pooled+FILE[+FILE...]` joins passage files or other benchmark files to it (e.g.
  `pooled+../shared/data/wiki18-sample-1000.jsonl`), the closest offline stand-in for the papers' Wikipedia.
- `pooled:DIR`: every benchmark and corpus file in the folder DIR, pooled (`ragteam.data.pooled`).
- an index folder (built by `ragteam index`), or a passage FILE (`{id, title, text}`, FlashRAG
  `{id, contents}`, DPR TSV), indexed once.

Every index built here is cached under `$RAGTEAM_HOME/indexes` and reused by later runs.

Every report states the corpus, its size, whether it holds the gold paragraphs of the run's questions, and,
when gold ids are known, recall@k of those questions (the question as the query, top `--topk`) and how much
of the gold evidence the workflow itself retrieved. Passages match gold ids by content
(`types.doc_id(title, text)`), so a corpus file with its own id scheme is measured too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragteam.config import ragteam_home
from ragteam.precedence import sources_of
from ragteam.retrieval.evaluate import support_recall
from ragteam.rollout.tree import Episode
from ragteam.types import Doc, Question, doc_id

DISTRACTOR = "distractor"
POOLED = "pooled"

DISTRACTOR_NAME = "distractor: the own paragraphs of the run's {n} questions, gold included"
POOLED_NAME = "pooled: every paragraph of {files}, deduplicated"
FOLDER_NAME = "pooled: every benchmark and corpus file of {folder}, deduplicated"

NO_DATA = (
    "the corpus {corpus} (--corpus, or the profile's) searches {what}, and there is no question file: give "
    "--data FILE, or name a corpus (--corpus FILE or DIR, --retriever.index DIR, --retriever.url URL)"
)

_CONTENT_ID = re.compile(r"^p[0-9a-f]{12}$")


@dataclass
class CorpusChoice:
    """The corpus of a run: its kind, a human name, and the opened index folder (None: remote or none)."""

    kind: str  # distractor | pooled | folder | file | index | remote | none
    name: str
    index: Any = None  # retrieval.index.IndexFolder
    url: str | None = None


def content_key(d: Doc) -> int:
    """A passage's content id (`doc_id(title, text)`) as an integer, for set lookups over large corpora."""
    return int(doc_id(d.title, d.text)[1:], 16)


def gold_keys(q: Question) -> list[int] | None:
    """The content keys of a question's supporting paragraphs; None when it names none (or not by content)."""
    ids = list(q.supporting_ids or [])
    if not ids or not all(_CONTENT_ID.match(i) for i in ids):
        return None
    return [int(i[1:], 16) for i in ids]


@dataclass(frozen=True)
class CorpusSpec:
    """A parsed `--corpus` value: its kind and the paths it names (files to join, a folder, a file)."""

    kind: str  # distractor | pooled | folder | path
    paths: tuple[str, ...] = ()


def parse_corpus(value: str | None) -> CorpusSpec:
    """`--corpus` read: None or `distractor`; `pooled`, `pooled+A+B` (files joined); `pooled:DIR`; else a
    path (an index folder or a passage file, told apart when opened). ValueError on an empty part."""
    text = (value or DISTRACTOR).strip()
    if text == DISTRACTOR:
        return CorpusSpec(DISTRACTOR)
    if text == POOLED or text.startswith(POOLED + "+"):
        extra = tuple(part.strip() for part in text.split("+")[1:])
        if any(not part for part in extra):
            raise ValueError(f"--corpus {text}: an empty file name after '+' (pooled+FILE[+FILE...])")
        return CorpusSpec(POOLED, extra)
    if text.startswith(POOLED + ":"):
        folder = text[len(POOLED) + 1 :].strip()
        return CorpusSpec("folder", (folder,) if folder else ())
    return CorpusSpec("path", (text,))


def corpus_was_chosen(cfg: Any) -> bool:
    """Whether the config's corpus was given (flag, config file, recipe), not filled in by a profile: a
    profile's `pooled` yields to an index or URL the user names, a corpus the user names clashes with it."""
    if getattr(cfg, "corpus", None) is None or not isinstance(cfg, BaseModel):
        return False
    return sources_of(cfg).get("corpus", "default") not in ("default", "profile")


def open_corpus(
    spec: CorpusSpec,
    data: str | None,
    fmt: str | None,
    questions: Sequence[Question] | None = None,
    kinds: Sequence[str] = ("bm25", "dense"),
    progress: bool = True,
    dense: Any = None,
    more_data: Sequence[str] = (),
) -> CorpusChoice:
    """The corpus `spec` names, its index opened (built and cached first when missing). `data` (read in `fmt`)
    and `more_data` are the run's question files; `questions` the run's questions (None: every question of
    `data`, as for a server, whose questions arrive later)."""
    from ragteam.retrieval import factory

    if spec.kind == DISTRACTOR:
        if questions is None:
            if data is None:
                raise ValueError(NO_DATA.format(corpus=DISTRACTOR, what="the questions' own paragraphs"))
            folder = factory.dataset_index(data, fmt, kinds=kinds, progress=progress, dense=dense)
            n = len(folder)
            return CorpusChoice(DISTRACTOR, f"distractor: every paragraph of {data} ({n} passages)", folder)
        folder = factory.questions_index(questions, kinds, progress, dense, source=str(data or "the run"))
        return CorpusChoice(DISTRACTOR, DISTRACTOR_NAME.format(n=len(questions)), folder)
    if spec.kind == POOLED:
        files = [f for f in (data, *more_data) if f is not None]
        if not files:
            raise ValueError(NO_DATA.format(corpus=POOLED, what="every paragraph of the question file"))
        files = list(dict.fromkeys(files))  # --eval-data may be --data
        name = POOLED_NAME.format(files=" + ".join([*files, *spec.paths]))
        if len(files) == 1 and not spec.paths:  # the file alone: the cache of every earlier run
            folder = factory.dataset_index(files[0], fmt, kinds=kinds, progress=progress, dense=dense)
        else:
            formats = {str(data): fmt} if data is not None else None
            paths = [*files, *spec.paths]
            folder = factory.files_index(paths, kinds, progress, dense, formats=formats)
        return CorpusChoice(POOLED, name, folder)
    if spec.kind == "folder":
        where = spec.paths[0] if spec.paths else (str(Path(data).resolve().parent) if data else None)
        if where is None:
            raise ValueError("--corpus pooled: names no folder and there is no --data beside which to look")
        folder = factory.pooled_index(where, kinds=kinds, progress=progress, dense=dense)
        return CorpusChoice("folder", FOLDER_NAME.format(folder=where), folder)
    path = Path(spec.paths[0])
    if path.is_dir():
        if not (path / "manifest.json").is_file():
            raise ValueError(
                f"--corpus {path}: a folder but not an index folder (no manifest.json); "
                f"`--corpus pooled:{path}` pools the files in it"
            )
        folder = factory.open_index(path)
        return CorpusChoice("index", index_name(path, folder), folder)
    folder = factory.corpus_file_index(path, kinds=kinds, progress=progress, dense=dense)
    return CorpusChoice("file", f"corpus file {path}", folder)


def index_name(path: Any, folder: Any) -> str:
    """An index folder's line: its path and what its manifest says it was built from. The indexes are cached by
    content under RAGTEAM_HOME, so that source may name the folder of whichever checkout built it first."""
    return f"index folder {path} (built from {folder.manifest.get('source')})"


def choose_corpus(
    cfg: Any,
    data: str | None,
    fmt: str | None,
    needs_retriever: bool,
    progress: bool = True,
    questions: Sequence[Question] | None = None,
    more_data: Sequence[str] = (),
):
    """(the run config to build with, the `CorpusChoice`): the chosen corpus' index, built once and cached,
    is put in `retriever.index` of a copy of `cfg`, so `build_team` opens it like any index folder. The
    config's own `retriever.index` / `url` win over a corpus a profile filled in; one the user named too
    is an error naming both."""
    from ragteam.retrieval.factory import KIND_NEEDS, dense_build

    r = cfg.retriever
    spec = parse_corpus(getattr(cfg, "corpus", None))
    explicit = r.index is not None or r.url is not None or r.kind == "remote"
    if explicit and spec.kind != DISTRACTOR and corpus_was_chosen(cfg):
        raise ValueError(
            f"--corpus {cfg.corpus} and --retriever.{'url' if r.url else 'index'} both name a corpus; give one"
        )
    if not needs_retriever:
        return cfg, CorpusChoice("none", "none: the workflow does not retrieve")
    if r.kind == "remote":
        return cfg, CorpusChoice("remote", f"remote service at {r.url}", url=r.url)
    if r.index is not None:
        from ragteam.retrieval.factory import open_index

        folder = open_index(r.index)
        return cfg, CorpusChoice("index", index_name(r.index, folder), folder)
    made = open_corpus(
        spec, data, fmt, questions, KIND_NEEDS[r.kind], progress, dense_build(r), more_data
    )  # the encoder --retriever.dense-model names, if any
    built = cfg.model_copy(update={"retriever": r.model_copy(update={"index": str(made.index.path)})})
    return built, made


def corpus_content_keys(index: Any) -> np.ndarray:
    """Sorted content keys of every passage of an index folder, cached by the corpus' sha1 (reading a
    21M-passage corpus once is minutes; every later report looks them up)."""
    sha = str(index.manifest.get("corpus_sha1", ""))
    cache = ragteam_home() / "corpus-keys" / f"{sha}.npy" if sha else None
    if cache is not None and cache.is_file():
        return np.load(cache)
    keys = np.fromiter((content_key(d) for d in index.docs), dtype=np.uint64, count=len(index))
    keys.sort()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.stem + ".tmp.npy")
        np.save(tmp, keys)
        tmp.replace(cache)
    return keys


def gold_presence(keys: np.ndarray, questions: Sequence[Question]) -> dict[str, Any]:
    """Of the questions with gold ids: how many have every supporting paragraph in the corpus."""
    with_gold = [g for g in (gold_keys(q) for q in questions) if g is not None]
    complete = 0
    for gold in with_gold:
        wanted = np.asarray(gold, dtype=np.uint64)
        pos = np.searchsorted(keys, wanted)
        found = (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == wanted)
        complete += int(found.all())
    return {"questions": len(with_gold), "all_present": complete}


def question_recall(retriever: Any, questions: Sequence[Question], k: int) -> dict[str, Any] | None:
    """recall@k (all gold paragraphs in the top k) and support recall@k (the fraction found) of the
    questions with gold ids, the question as the query; None when no question has gold ids."""
    usable = [q for q in questions if gold_keys(q) is not None]
    if not usable:
        return None
    ranked = retriever.search([q.question for q in usable], k)
    full = part = 0.0
    for q, hits in zip(usable, ranked):
        a, b = support_recall([content_key(h.doc) for h in hits[:k]], gold_keys(q))  # type: ignore[arg-type]
        full, part = full + a, part + b
    n = len(usable)
    return {"k": k, "questions": n, "recall": full / n, "support_recall": part / n}


def workflow_recall(episodes: Sequence[Episode]) -> dict[str, Any] | None:
    """Of finished episodes whose question has gold ids: how often every gold paragraph was among the hits
    of any search on the path to the answer, and the mean fraction found (what the workflow's own queries
    reached, at its own k); None when no such episode."""
    full = part = 0.0
    n = 0
    for ep in episodes:
        gold = gold_keys(ep.question)
        leaves = ep.leaves()
        if gold is None or ep.status == "failed" or not leaves or leaves[0].status == "failed":
            continue
        got = {
            content_key(h.doc)
            for node in ep.path(leaves[0].id)
            if node.kind == "retrieve"
            for hits in node.hits or []
            for h in hits
        }
        a, b = support_recall(got, gold)  # type: ignore[arg-type]
        full, part, n = full + a, part + b, n + 1
    if not n:
        return None
    return {"questions": n, "recall": full / n, "support_recall": part / n}


def corpus_facts(
    choice: CorpusChoice,
    questions: Sequence[Question],
    episodes: Sequence[Episode],
    k: int,
    retriever: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """What the report states about the corpus (see the module docstring). `retriever()` opens the run's
    retriever for recall@k (called only when gold ids are known and the corpus is an index folder)."""
    from ragteam.retrieval.factory import pool_sources

    out: dict[str, Any] = {"kind": choice.kind, "name": choice.name}
    if choice.kind == "none":
        return out
    if choice.url:
        out["url"] = choice.url
    index = choice.index
    if index is not None:
        out.update(
            index=str(index.path),
            source=index.manifest.get("source"),
            passages=len(index),
            gold=gold_presence(corpus_content_keys(index), questions),
        )
        sources = pool_sources(index)
        if sources is not None:
            out["pool_sources"] = sources
        if retriever is not None and any(gold_keys(q) is not None for q in questions):
            out["recall_at_k"] = question_recall(retriever(), questions, k)
    wf = workflow_recall(episodes)
    if wf is not None:
        out["workflow_recall"] = wf
    return out
