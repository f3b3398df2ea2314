"""Benchmark questions and passage corpora: readers for every supported format, FlashRAG JSONL writers."""

from ragteam.data.corpus import iter_corpus, pool_corpus, read_corpus, write_corpus
from ragteam.data.questions import FORMATS, QuestionSet, detect_format, read_questions, write_questions

__all__ = [
    "FORMATS",
    "QuestionSet",
    "detect_format",
    "iter_corpus",
    "pool_corpus",
    "read_corpus",
    "read_questions",
    "write_corpus",
    "write_questions",
]
