"""The benchmark formats ragteam reads: name -> (detector on the first record, parser of one record).

Order matters for detection: the first format whose detector accepts the first record's keys wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragteam.data.formats import choice, flashrag, ircot, musique, open_domain, wiki_multihop
from ragteam.types import Question

Parser = Callable[[dict[str, Any], int], Question]


@dataclass(frozen=True)
class Format:
    """One benchmark format: its name, a test on a raw record and a parser (record, record number) -> Question."""

    name: str
    detect: Callable[[dict[str, Any]], bool]
    parse: Parser
    summary: str


REGISTRY: dict[str, Format] = {
    f.name: f
    for f in [
        Format(
            "flashrag",
            flashrag.is_flashrag,
            flashrag.parse_flashrag,
            "FlashRAG JSONL {id, question, golden_answers, metadata}",
        ),
        Format(
            "multihop-rag",
            ircot.is_multihop_rag,
            ircot.parse_multihop_rag,
            "MultiHop-RAG (published or IRCoT-style)",
        ),
        Format(
            "hotpotqa",
            ircot.is_ircot,
            ircot.parse_ircot,
            "HotpotQA as processed by IRCoT (question_text, contexts)",
        ),
        Format(
            "hotpotqa-hf",
            wiki_multihop.is_hotpotqa_hf,
            wiki_multihop.parse_hotpotqa_hf,
            "HotpotQA, Hugging Face hotpot_qa schema or original JSON",
        ),
        Format(
            "2wikimultihopqa",
            wiki_multihop.is_2wiki,
            wiki_multihop.parse_2wiki,
            "2WikiMultihopQA (original or chunked)",
        ),
        Format("musique", musique.is_musique, musique.parse_musique, "MuSiQue-Ans"),
        Format(
            "popqa", open_domain.is_popqa, open_domain.parse_popqa, "PopQA (JSON with paragraphs, or TSV)"
        ),
        Format("ambignq", open_domain.is_ambignq, open_domain.parse_ambignq, "AmbigNQ (light)"),
        Format("medqa", choice.is_medqa, choice.parse_medqa, "MedQA (multiple choice)"),
        Format("freshqa", open_domain.is_freshqa, open_domain.parse_freshqa, "FreshQA (JSONL or CSV)"),
        Format("bamboogle", open_domain.is_bamboogle, open_domain.parse_bamboogle, "Bamboogle (TSV or JSON)"),
        Format(
            "triviaqa",
            open_domain.is_triviaqa,
            open_domain.parse_triviaqa,
            "TriviaQA (open-domain, HF or official)",
        ),
        Format(
            "nq-open",
            open_domain.is_nq_open,
            open_domain.parse_nq_open,
            "Natural Questions open {question, answer[]}",
        ),
    ]
}

# Other spellings accepted by --format.
ALIASES: dict[str, str] = {
    "ircot": "hotpotqa",
    "hotpot_qa": "hotpotqa-hf",
    "2wiki": "2wikimultihopqa",
    "2wikimqa": "2wikimultihopqa",
    "musique-ans": "musique",
    "nq": "nq-open",
    "nq_open": "nq-open",
    "trivia_qa": "triviaqa",
    "multihoprag": "multihop-rag",
    "jsonl": "flashrag",
}


def resolve(name: str) -> Format:
    """The format called `name` (or one of its aliases); ValueError listing the names otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in REGISTRY:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(REGISTRY)}")
    return REGISTRY[key]


def detect(record: dict[str, Any]) -> Format | None:
    """The first format whose detector accepts `record`, or None."""
    for fmt in REGISTRY.values():
        if fmt.detect(record):
            return fmt
    return None
