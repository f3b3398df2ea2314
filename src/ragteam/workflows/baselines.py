"""Baselines with no trainable role: the LLM server alone (Direct) and retrieve-then-read (StandardRAG).

Direct asks the fixed LLM server the question; StandardRAG retrieves the top-k passages with the question
itself and asks the LLM server to answer from them. Both prompt for a short answer and extract it with
`extract_answer` (first line, "Answer:" prefixes and wrapping quotes removed). A multiple-choice question
lists its options and is answered with an option letter.
"""

from __future__ import annotations

import re

from ragteam.protocol import Answer, AskLLM, Episodic, Retrieve, Workflow
from ragteam.types import Hit, Message, Question
from ragteam.workflows.config import WorkflowConfig

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

OPTIONS_TEMPLATE = "\nOptions:\n{lines}\nAnswer with the letter of the correct option.\n"

_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+|short\s+)?answer\s*(?:is\b\s*:?|[:\-])\s*", re.IGNORECASE)
_ANSWER_MARK = re.compile(r"(?:final\s+|short\s+)?answer\s*:", re.IGNORECASE)


def format_documents(hits: list[Hit]) -> str:
    """The retrieved passages as numbered lines for a prompt."""
    return "\n".join(
        DOCUMENT_TEMPLATE.format(index=i, title=h.doc.title, text=h.doc.text) for i, h in enumerate(hits, 1)
    )


def format_options(question: Question) -> str:
    """The options block of a multiple-choice question, or an empty string."""
    if not question.choices:
        return ""
    lines = "\n".join(f"{letter}. {text}" for letter, text in question.choices.items())
    return OPTIONS_TEMPLATE.format(lines=lines)


def extract_answer(text: str, choices: dict[str, str] | None = None) -> str:
    """The short answer in a model's output (never raises): text after the last "Answer:", first line that is
    not a Markdown heading, without wrapping quotes or a final period; for multiple choice, the first option
    letter named."""
    marks = list(_ANSWER_MARK.finditer(text))
    if marks:
        text = text[marks[-1].end() :]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("#")] or lines
    answer = lines[0] if lines else ""
    answer = _PREFIX.sub("", answer).strip()
    answer = answer.strip().strip("\"'`*").strip()
    if answer.endswith(".") and not re.search(r"\b[A-Z]\.$|\.\.\.$", answer):
        answer = answer[:-1].rstrip()
    if choices:
        letters = "|".join(re.escape(k) for k in choices)
        m = re.match(rf"^\(?({letters})\b[\).:]?", answer)
        if m:
            return m.group(1)
        for letter, option in choices.items():
            if answer.lower() == option.strip().lower():
                return letter
    return answer


def _messages(user: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


class Direct(Workflow):
    """The LLM server answers the question alone (no retrieval, no policy)."""

    name = "direct"
    needs = frozenset({"llm"})

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else WorkflowConfig()

    def run(self, question: Question) -> Episodic:
        prompt = DIRECT_PROMPT.format(question=question.question, options=format_options(question))
        text = yield AskLLM("answer", _messages(prompt))
        return Answer(extract_answer(text, question.choices))


class StandardRAG(Workflow):
    """Retrieve the top-k passages with the question, then the LLM server answers from them."""

    name = "standard-rag"

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else WorkflowConfig()

    def run(self, question: Question) -> Episodic:
        ranked = yield Retrieve([question.question], k=self.cfg.topk)
        hits = ranked[0] if ranked else []
        prompt = RAG_PROMPT.format(
            documents=format_documents(hits), question=question.question, options=format_options(question)
        )
        text = yield AskLLM("answer", _messages(prompt))
        return Answer(extract_answer(text, question.choices), info={"doc_ids": [h.doc.id for h in hits]})
