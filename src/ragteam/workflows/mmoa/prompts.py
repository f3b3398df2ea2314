"""Every prompt of MMOA-RAG in one place: Query Rewriter, Selector and Generator (all three policy roles).

Action formats follow the paper (MMOA-RAG, section 4 and Table 1); the wording is ours.

- Query Rewriter: sub-questions of the question, one per line.
- Selector: the ids of the helpful candidates, `Document0,Document4,Document7` (candidates numbered from 0).
  Its chat has the paper's shape: the task in the system message, an acknowledgement by the assistant, the
  question and the K candidates, a second acknowledgement, then the request for ids in that format.
- Generator: a short answer to the question from the selected documents.
"""

from __future__ import annotations

from ragteam.types import Doc, Message

SYSTEM = "You are a helpful assistant."

REWRITER = """Rewrite the question below into simple sub-questions that a search engine can answer one at a time. Each sub-question should ask for one fact; together they should give everything needed to answer the question. A simple question may need just one sub-question.

Write one sub-question per line and nothing else.

Question: {question}"""

SELECTOR_SYSTEM = """You are a careful assistant. Given a question and K candidate documents numbered Document0 to Document{last}, you name the documents that help answer the question."""

SELECTOR_ACK = "Understood. I will name the candidate documents that help answer the question."

SELECTOR_INPUT = """Question: {question}

{documents}"""

SELECTOR_RECEIVED = "I have read the question and the candidate documents."

SELECTOR_REQUEST = """Now name the candidate documents (Document0 to Document{last}) that help answer the question: {question}
Reply only with their ids separated by commas, in this format: Document0,Document4,Document7"""

GENERATOR = """Answer the question using the documents below. Give a short answer of a few words, without explanation.

{documents}
{options}
Question: {question}
Answer:"""

GENERATOR_NO_DOCUMENTS = """Answer the question with a short answer of a few words, without explanation.
{options}
Question: {question}
Answer:"""

CANDIDATE = "Document{index}: (Title: {title}) {text}"


def format_candidates(docs: list[Doc]) -> str:
    """The candidates as the Selector and Generator see them, numbered from 0 (`Document0: (Title: t) text`)."""
    return "\n\n".join(CANDIDATE.format(index=i, title=d.title, text=d.text) for i, d in enumerate(docs))


def rewriter_messages(question: str) -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": REWRITER.format(question=question)},
    ]


def selector_messages(question: str, docs: list[Doc]) -> list[Message]:
    """The Selector's five-message chat (the paper's Table 1 shape)."""
    last = max(0, len(docs) - 1)
    return [
        {"role": "system", "content": SELECTOR_SYSTEM.format(last=last)},
        {"role": "assistant", "content": SELECTOR_ACK},
        {
            "role": "user",
            "content": SELECTOR_INPUT.format(question=question, documents=format_candidates(docs)),
        },
        {"role": "assistant", "content": SELECTOR_RECEIVED},
        {"role": "user", "content": SELECTOR_REQUEST.format(question=question, last=last)},
    ]


def generator_messages(question: str, docs: list[Doc], options: str = "") -> list[Message]:
    if docs:
        user = GENERATOR.format(question=question, documents=format_candidates(docs), options=options)
    else:
        user = GENERATOR_NO_DOCUMENTS.format(question=question, options=options)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
