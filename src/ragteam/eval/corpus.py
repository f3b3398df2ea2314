"""Which corpus an eval retrieves from, and what its report states about it.

`--corpus` picks it (unless `--retriever.index DIR` or `--retriever.url URL` names one directly):

- `distractor` (the default): the paragraphs carried by the question file itself, gold included. HotpotQA's
  distractor setting: each question's two gold paragraphs sit among its own ~8 distractors and the other
  questions' paragraphs, a few thousand passages in all. Easy, and it says little about open retrieval.
- `pooled` (or `pooled:DIR`): every benchmark and corpus file in the folder of `--data` (or DIR), pooled and
  deduplicated (`ragteam.data.pooled`): the gold paragraphs are present, among passages of other benchmarks
  and of the Wikipedia sample. Built once, cached under `$RAGTEAM_HOME`.
- a FILE: any passage corpus (`{id, title, text}`, FlashRAG `{id, contents}`, DPR TSV), indexed once.

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

from ragteam.config import ragteam_home
from ragteam.retrieval.evaluate import support_recall
from ragteam.rollout.tree import Episode
from ragteam.types import Doc, Question, doc_id

DISTRACTOR = "distractor"
POOLED = "pooled"

DISTRACTOR_NAME = "distractor: the question file's own paragraphs, gold included"
POOLED_NAME = "pooled: every benchmark and corpus file of {folder}, deduplicated"

_CONTENT_ID = re.compile(r"^p[0-9a-f]{12}$")


@dataclass
class CorpusChoice:
    """The corpus of a run: its kind, a human name, and the opened index folder (None: remote or none)."""

    kind: str  # distractor | pooled | file | index | remote | none
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


def choose_corpus(cfg: Any, data: str, fmt: str, needs_retriever: bool, progress: bool = True):
    """(the run config to build with, the `CorpusChoice`): the chosen corpus' index, built once and cached,
    is put in `retriever.index` of a copy of `cfg`, so `build_team` opens it like any index folder."""
    from ragteam.retrieval.factory import (
        KIND_NEEDS,
        corpus_file_index,
        dataset_index,
        dense_build,
        open_index,
        pooled_index,
    )

    r = cfg.retriever
    choice = (getattr(cfg, "corpus", None) or DISTRACTOR).strip()
    explicit = r.index is not None or r.url is not None or r.kind == "remote"
    if explicit and choice != DISTRACTOR:
        raise ValueError(
            f"--corpus {choice} and --retriever.{'url' if r.url else 'index'} both name a corpus; give one"
        )
    if not needs_retriever:
        return cfg, CorpusChoice("none", "none: the workflow does not retrieve")
    if r.kind == "remote":
        return cfg, CorpusChoice("remote", f"remote service at {r.url}", url=r.url)
    if r.index is not None:
        folder = open_index(r.index)
        return cfg, CorpusChoice("index", f"index folder {r.index} ({folder.manifest.get('source')})", folder)
    kinds, dense = KIND_NEEDS[r.kind], dense_build(r)  # the encoder --retriever.dense-model names, if any
    if choice == DISTRACTOR:
        folder = dataset_index(data, fmt, kinds=kinds, progress=progress, dense=dense)
        made = CorpusChoice("distractor", DISTRACTOR_NAME)
    elif choice == POOLED or choice.startswith(POOLED + ":"):
        where = choice[len(POOLED) + 1 :] or str(Path(data).resolve().parent)
        folder = pooled_index(where, kinds=kinds, progress=progress, dense=dense)
        made = CorpusChoice("pooled", POOLED_NAME.format(folder=where))
    else:
        folder = corpus_file_index(choice, kinds=kinds, progress=progress, dense=dense)
        made = CorpusChoice("file", f"corpus file {choice}")
    made.index = folder
    built = cfg.model_copy(update={"retriever": r.model_copy(update={"index": str(folder.path)})})
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
