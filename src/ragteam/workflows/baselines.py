"""Baselines with no trainable role: the LLM server alone (Direct) and retrieve-then-read (StandardRAG).

Direct asks the fixed LLM server the question; StandardRAG retrieves the top-k passages with the question
itself and asks the LLM server to answer from them. Both prompt for a short answer and extract it with
`extract_answer` (first line, "Answer:" prefixes and wrapping quotes removed). A multiple-choice question
lists its options and is answered with an option letter.
"""

from __future__ import annotations

from ragteam.protocol import Answer, AskLLM, EpisodeGenerator, Retrieve, Workflow
from ragteam.types import Hit, Message, Question
from ragteam.workflows.answers import extract_answer, format_options
from ragteam.workflows.c3po import settings as c3po
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.setting import CORPUS_SMALL, Presets, Setting, corpus_paper

SYSTEM_PROMPT = "You are a helpful assistant that answers questions with a short answer (a few words)."

DIRECT_PROMPT = """Answer the question with a short answer of a few words, without explanation.
{options}
Question: {question}
Answer:"""

RAG_PROMPT = """Answer the question using the documents below.
Give a short answer of a few words, without explanation.

{documents}
{options}
Question: {question}
Answer:"""

DOCUMENT_TEMPLATE = "Document [{index}] (Title: {title}) {text}"


def format_documents(hits: list[Hit]) -> str:
    """The retrieved passages as numbered lines for a prompt."""
    return "\n".join(
        DOCUMENT_TEMPLATE.format(index=i, title=h.doc.title, text=h.doc.text) for i, h in enumerate(hits, 1)
    )


def _messages(user: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


PRESETS: Presets = {
    "small": (
        Setting("topk", 5, "ragteam: as the workflows of this profile"),
        Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per answer"),
        CORPUS_SMALL,
    ),
    "paper": (
        Setting(
            "topk", c3po.TOPK, "C-3PO's retrieval depth, so the standard-RAG baseline sees as many documents"
        ),
        Setting(
            "rollout.llm_max_tokens",
            c3po.MAX_LEN,
            "C-3PO Table 7's 2048, as the c3po LLM calls under this profile, so the baselines answer alike",
        ),
        corpus_paper("C-3PO's (§6.1: the 2018 Wikipedia dump), as the baselines follow it"),
    ),
}
"""The baselines' rows of each profile: they have no paper of their own, so they follow C-3PO's."""


class Direct(Workflow):
    """The LLM server answers the question alone (no retrieval, no policy)."""

    name = "direct"
    needs = frozenset({"llm"})
    presets = PRESETS

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = WorkflowConfig.of(cfg)

    def run(self, question: Question) -> EpisodeGenerator:
        prompt = DIRECT_PROMPT.format(question=question.question, options=format_options(question))
        text = yield AskLLM("answer", _messages(prompt))
        return Answer(extract_answer(text, question.choices))


class StandardRAG(Workflow):
    """Retrieve the top-k passages with the question, then the LLM server answers from them."""

    name = "standard-rag"
    presets = PRESETS

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = WorkflowConfig.of(cfg)

    def run(self, question: Question) -> EpisodeGenerator:
        ranked = yield Retrieve([question.question], k=self.cfg.topk)
        hits = ranked[0] if ranked else []
        prompt = RAG_PROMPT.format(
            documents=format_documents(hits), question=question.question, options=format_options(question)
        )
        text = yield AskLLM("answer", _messages(prompt))
        return Answer(extract_answer(text, question.choices), info={"doc_ids": [h.doc.id for h in hits]})
