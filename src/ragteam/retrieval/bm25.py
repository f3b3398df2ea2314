"""BM25 over a tantivy index: English stemming and stop words, memory-mapped segments on disk.

Why tantivy and not bm25s: measured in the same run on 200,000 synthetic passages (bench/retrieval.py) tantivy
builds faster and answers a query in well under a millisecond where bm25s' numpy backend needs several, with
the same scoring (Lucene BM25, k1=1.2, b=0.75); on HotpotQA-500's pooled corpus its recall@10 is as good (see
the closing notes of issue 2). bm25s stays a benchmark baseline only.

Passages are indexed as `title + "\\n" + text` in one field. The analyzer (`english_analyzer`) splits on
non-alphanumerics, drops tokens over 40 bytes, lowercases, folds accents to ASCII, removes English stop words
and applies the Snowball English stemmer; queries go through the same analyzer and become a disjunction of
term queries (a repeated query term counts twice, as in BM25's query-term frequency).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import tantivy

from ragteam.retrieval.docstore import DocStore
from ragteam.types import Doc, Hit

SUBDIR = "bm25"
ANALYZER_NAME = "en_stem_stop"
BODY, ROW = "body", "row"
# Postings keep term frequencies but no positions: BM25 needs no phrase queries, and the index is smaller.
INDEX_OPTION = "freq"
TIE_MARGIN = 16  # extra hits fetched so that ties at the k-th place are broken by row, not by index layout
ANALYZER_SPEC = (
    "simple tokenizer, remove_long(40), lowercase, ascii_fold, stopword(english), stemmer(english)"
)


def english_analyzer() -> tantivy.TextAnalyzer:
    """The analyzer shared by indexing and querying (see the module docstring)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stopword("english"))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field(BODY, stored=False, tokenizer_name=ANALYZER_NAME, index_option=INDEX_OPTION)
    sb.add_unsigned_field(ROW, stored=False, fast=True)
    return sb.build()


def build_bm25(
    folder: str | Path,
    docs: Iterable[Doc],
    heap_mb: int = 256,
    threads: int | None = None,
    progress: bool = False,
    total: int | None = None,
) -> int:
    """Index `docs` (row = position), consumed as a stream, into `folder/bm25`; return how many were indexed.

    Memory is bounded by tantivy's writer heap (`heap_mb`, all threads together): when it fills, the
    writer turns what it holds into a segment on disk and starts again; segments are merged in the
    background and the last merges are awaited before returning."""
    from tqdm.auto import tqdm

    path = Path(folder) / SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(_schema(), path=str(path), reuse=False)
    index.register_tokenizer(ANALYZER_NAME, english_analyzer())
    threads = threads or max(1, min(4, os.cpu_count() or 1))
    if heap_mb < 16 * threads:
        raise ValueError(
            f"BM25 writer heap {heap_mb} MB is under tantivy's minimum of about 16 MB per thread ({threads} "
            "threads): raise --bm25.heap-mb or lower --bm25.threads"
        )
    writer = index.writer(heap_size=heap_mb * 1_000_000, num_threads=threads)
    n = 0
    with tqdm(total=total, desc="indexing BM25", unit="psg", disable=not progress) as bar:
        for row, d in enumerate(docs):
            doc = tantivy.Document()
            doc.add_text(BODY, d.contents)
            doc.add_unsigned(ROW, row)
            writer.add_document(doc)
            n += 1
            if n % 65536 == 0:
                bar.update(65536)
        bar.update(n % 65536)
    writer.commit()
    writer.wait_merging_threads()
    return n


class BM25Retriever:
    """Batched BM25 search of an index folder built by `build_index` (kind "bm25")."""

    name = "bm25"

    def __init__(self, folder: str | Path, docs: DocStore | None = None):
        self.folder = Path(folder)
        path = self.folder / SUBDIR
        if not tantivy.Index.exists(str(path)):
            raise FileNotFoundError(
                f"{self.folder}: no BM25 index (build it with `ragteam index --kinds bm25`)"
            )
        self.docs = docs if docs is not None else DocStore(self.folder)
        self._index = tantivy.Index.open(str(path))
        self._analyzer = english_analyzer()
        self._index.register_tokenizer(ANALYZER_NAME, self._analyzer)
        self._schema = self._index.schema
        self._searcher = self._index.searcher()

    def __len__(self) -> int:
        return len(self.docs)

    def analyze(self, text: str) -> list[str]:
        """The index terms of `text` (tokens after stop-word removal and stemming)."""
        return self._analyzer.analyze(text)

    def _query(self, terms: list[str]) -> tantivy.Query:
        return tantivy.Query.boolean_query(
            [
                (
                    tantivy.Occur.Should,
                    tantivy.Query.term_query(self._schema, BODY, t, index_option=INDEX_OPTION),
                )
                for t in terms
            ]
        )

    def _search_one(self, query: str, k: int) -> tuple[list[int], list[float]]:
        """Top-`k` (rows, scores), ties broken by corpus row: tantivy breaks them by segment and document
        address, which depend on how the index was built (one pass or streamed in chunks), so it is asked for
        `TIE_MARGIN` more hits and the ranking is made here. Equal results from any build, unless more than
        `TIE_MARGIN` passages tie at the k-th place."""
        terms = self._analyzer.analyze(query) if k > 0 else []
        if not terms:
            return [], []
        hits = self._searcher.search(self._query(terms), limit=k + TIE_MARGIN, count=False).hits
        if not hits:
            return [], []
        rows = self._searcher.fast_field_values(ROW, [addr for _, addr in hits])
        ranked = sorted(zip(rows, (s for s, _ in hits)), key=lambda rs: (-rs[1], rs[0]))[:k]
        return [r for r, _ in ranked], [s for _, s in ranked]

    def search_rows(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each query, (rows, scores) of its top-`k` passages, best first; empty if no term matches."""
        out = []
        for q in queries:
            rows, scores = self._search_one(q, k)
            out.append((np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float32)))
        return out

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """For each query, its top-`k` hits best first (fewer when fewer passages share a term with it)."""
        docs = self.docs
        out = []
        for q in queries:
            rows, scores = self._search_one(q, k)
            out.append([Hit(docs[r], s) for r, s in zip(rows, scores)])
        return out
