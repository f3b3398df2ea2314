"""Every prompt of C-3PO in one place: the three proxy roles, the LLM's roadmap and its final answer.

The roles and their action formats follow the paper (C-3PO, appendix B.1 and D.1); the wording is ours.

- Reasoning Router (policy): `[No Retrieval]`, `[Retrieval]<query>` or `[Planning]`.
- Information Filter (policy): `Thought: ... Action: [ids]`, ids as the documents are numbered (1, 2, ...).
- Decision Maker (policy): `Thought: ... Action: [Retrieval]<subquery>` or `Thought: ... Action: [LLM]`.
- Roadmap (LLM server): a step-by-step plan, asked once in the planning strategy.
- Answer (LLM server): the final short answer, from the question alone or with the kept documents.
"""

from __future__ import annotations

from ragteam.types import Doc, Message

SYSTEM = "You are a helpful assistant."

ROUTER = """Your job is to choose how a question should be handled before anyone answers it. A large language model (LLM) will write the final answer; a search engine over a document collection is available to bring it facts.

Pick exactly one of these actions:
- If the question is complicated and needs a plan of several searches before it can be answered, reply:
[Planning]
- If the question asks for a specific fact the LLM may not know (a niche topic, a recent event, an exact date or name), reply with one search query:
[Retrieval]<your search query>
- If the LLM can surely answer from its own knowledge, reply:
[No Retrieval]

Do not answer the question yourself; only choose the action.

Question: {question}"""

FILTER = """Your job is to read search results and keep only the documents that help answer a question{objective_hint}.

Go through the documents one by one and say briefly whether each is useful (does it contain the answer, or a fact needed to reach it?). Then list the numbers of the documents worth keeping, in brackets, or [] if none is useful.

Reply in this format:
Thought: <a short judgement of each document>
Action: [<numbers of the documents to keep, e.g. 1, 3>]
{objective}
Question: {question}

Documents:
{documents}"""

FILTER_OBJECTIVE = "\nObjective of this search step: {objective}\n"

DECIDER = """Your job is to decide the next step in answering a question by searching. You are given the question, a plan written by a large language model (LLM), and the documents gathered so far. A search engine can fetch more documents; the LLM can write the final answer from the gathered documents.

Check whether the gathered documents already hold everything the question needs, and follow the plan to see which step comes next.
- If something is still missing, write one search query for the next missing fact:
Action: [Retrieval]<your search query>
- If the gathered documents are enough, hand over to the LLM:
Action: [LLM]

Do not answer the question yourself.

Reply in this format:
Thought: <what is known, what is missing, and the objective of the next step>
Action: <[Retrieval]<your search query> or [LLM]>

Gathered documents:
{documents}

Plan:
{roadmap}

Question: {question}"""

NO_DOCUMENTS = "(none yet)"

ROADMAP = """Make a plan for answering the question below with the help of a search engine. Do not answer the question.

First say what the question asks and which facts must be looked up. Then write numbered steps (Step 1, Step 2, ...), each naming one fact to search for or one conclusion to draw from what was found. Keep the plan short and clear.

Question: {question}"""

ANSWER = """Answer the question with a short answer of a few words, without explanation.
{options}
Question: {question}
Answer:"""

ANSWER_WITH_DOCUMENTS = """Answer the question using the documents below. Give a short answer of a few words, without explanation.

{documents}
{options}
Question: {question}
Answer:"""

DOCUMENT = "Document {index} (Title: {title}): {text}"

NO_RELEVANT = "No relevant information was found for this search."


def messages(user: str) -> list[Message]:
    """A two-message chat: the shared system line and the role's prompt."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def format_documents(docs: list[Doc]) -> str:
    """Documents numbered from 1 as the filter and decision maker see them (`Document 1 (Title: t): text`)."""
    return "\n\n".join(DOCUMENT.format(index=i, title=d.title, text=d.text) for i, d in enumerate(docs, 1))


def router_prompt(question: str) -> str:
    return ROUTER.format(question=question)


def filter_prompt(question: str, docs: list[Doc], objective: str | None = None) -> str:
    """The filter's prompt; `objective` (the decision maker's thought) only in the planning strategy."""
    return FILTER.format(
        question=question,
        documents=format_documents(docs),
        objective=FILTER_OBJECTIVE.format(objective=objective.strip()) if objective else "",
        objective_hint=" and the objective of the current search step" if objective else "",
    )


def decider_prompt(question: str, roadmap: str, docs: list[Doc]) -> str:
    return DECIDER.format(
        question=question,
        roadmap=roadmap.strip() or "(no plan)",
        documents=format_documents(docs) if docs else NO_DOCUMENTS,
    )


def roadmap_prompt(question: str) -> str:
    return ROADMAP.format(question=question)


def answer_prompt(question: str, docs: list[Doc], options: str = "") -> str:
    """The LLM's final prompt: the question alone (no retrieval) or with the kept documents."""
    if not docs:
        return ANSWER.format(question=question, options=options)
    return ANSWER_WITH_DOCUMENTS.format(question=question, documents=format_documents(docs), options=options)
