"""Every prompt of the RAG-Gym agents in one place: the actor's templates (one per agent design, plus the
forced-answer template used at the last step) and the document summary of Search-o1 and Re2Search.

Formats follow the paper (RAG-Gym, section 2 and appendix H): the state is shown under
`### Information-seeking History` and `### Original Question`; the actor writes the sections
`### Step-by-step Reasoning` (and, for Re2Search, `### Unverified Claim Identification`) and ends with
`### Structured Output`, a JSON object with `"predicted_answer"` and/or `"generated_query"`. The wording is ours.

| agent      | reasoning | history shown             | actions                                   |
|------------|-----------|---------------------------|-------------------------------------------|
| direct     | no        | none                      | answer                                    |
| cot        | yes       | none                      | answer                                    |
| rag        | yes       | the question's documents  | answer                                    |
| react      | yes       | queries and documents     | search or answer                          |
| search-o1  | yes       | queries and summaries     | search or answer                          |
| re2search  | yes + reflection on unverified claims | queries and summaries | answer + next query (or "None") |
"""

from __future__ import annotations

from ragteam.types import Doc, Message

ACTOR_SYSTEM = (
    "You are a helpful assistant. You solve questions step by step and follow the output format exactly."
)

ANSWER_FIELD = '"predicted_answer": "a single letter for a multiple-choice question, otherwise a number, a word or a short phrase"'
QUERY_FIELD = '"generated_query": "an entity, a question or a statement to look up in the knowledge base"'

DIRECT = """### Original Question
{question}

Answer the question right away, with no explanation. Reply only with this JSON object:
```json
{{{answer_field}}}
```"""

COT = """### Original Question
{question}

Your reply must have two sections:
1. ### Step-by-step Reasoning
   - Work through the question step by step and arrive at an answer.
2. ### Structured Output
   - Give your answer as this JSON object:
```json
{{{answer_field}}}
```"""

HISTORY_ANSWER = """### Information-seeking History
{history}

### Original Question
{question}

Your reply must have two sections:
1. ### Step-by-step Reasoning
   - Work through the question step by step, using the information-seeking history, and arrive at an answer.
2. ### Structured Output
   - Give your answer as this JSON object:
```json
{{{answer_field}}}
```"""

SEARCH_OR_ANSWER = """### Information-seeking History
{history}

### Original Question
{question}

Your reply must have two sections:
1. ### Step-by-step Reasoning
   - Think step by step about what is known from the history and what is still missing.
   - Then choose the next action, one of:
     - Search[query]: look up one query in the external knowledge base (do not repeat a query from the history);
     - Finish[answer]: give the answer and stop.
2. ### Structured Output
   - To search, write this JSON object:
```json
{{{query_field}}}
```
   - To finish, write this JSON object:
```json
{{{answer_field}}}
```"""

RE2SEARCH = """### Information-seeking History
{history}

### Original Question
{question}

Your reply must have three sections:
1. ### Step-by-step Reasoning
   - Reason step by step and answer the question.
2. ### Unverified Claim Identification
   - Check whether your reasoning relies on claims that the information-seeking history does not support.
   - If it does, turn the first missing piece of information into one short, self-contained query for the knowledge base.
   - If it does not, say that no further query is needed.
3. ### Structured Output
   - Give your answer and your query as this JSON object (the query is "None" when no query is needed):
```json
{{{answer_field}, {query_field}}}
```"""

NO_HISTORY = "(nothing searched yet)"

SUMMARY_SYSTEM = "You are a helpful assistant that answers a follow-up query from the documents given."

SUMMARY = """### Relevant Documents
{documents}

### Context
Original question: {question}

### Follow-up Query
{query}

Answer the follow-up query briefly, using only what the documents say. If the documents do not contain the answer, say so plainly instead of guessing. Leave out details that do not answer the query."""

DOCUMENT = "Document [{index}] (Title: {title}) {text}"

TEMPLATES = {
    "direct": DIRECT,
    "cot": COT,
    "rag": HISTORY_ANSWER,
    "react": SEARCH_OR_ANSWER,
    "search-o1": SEARCH_OR_ANSWER,
    "re2search": RE2SEARCH,
}
"""The actor's template of each agent design (at the last step, `HISTORY_ANSWER` replaces it)."""


def format_documents(docs: list[Doc]) -> str:
    """Documents numbered from 0, as the history shows them (`Document [0] (Title: t) text`)."""
    return "\n".join(DOCUMENT.format(index=i, title=d.title, text=d.text) for i, d in enumerate(docs))


def question_block(question: str, choices: dict[str, str] | None = None) -> str:
    """The question with its options (`A. ...`) when it is multiple-choice."""
    if not choices:
        return question
    return question + "\n" + "\n".join(f"{letter}. {text}" for letter, text in choices.items())


def history_with_documents(history: list[tuple[str, list[Doc]]]) -> str:
    """ReAct / RAG state: each query followed by its documents."""
    if not history:
        return NO_HISTORY
    return "\n\n".join(f"Query: {query}\n{format_documents(docs)}" for query, docs in history)


def history_with_summaries(history: list[tuple[str, str]]) -> str:
    """Search-o1 / Re2Search state: each query followed by the summary of its documents."""
    if not history:
        return NO_HISTORY
    return "\n\n".join(f"Query: {query}\nAnswer: {summary}" for query, summary in history)


def actor_messages(agent: str, question: str, history: str, forced: bool = False) -> list[Message]:
    """The actor's chat for `agent`; `forced` (the last step) allows only an answer."""
    template = HISTORY_ANSWER if forced and agent not in ("direct", "cot") else TEMPLATES[agent]
    user = template.format(
        question=question, history=history, answer_field=ANSWER_FIELD, query_field=QUERY_FIELD
    )
    return [{"role": "system", "content": ACTOR_SYSTEM}, {"role": "user", "content": user}]


def summary_messages(question: str, query: str, docs: list[Doc]) -> list[Message]:
    """The LLM server's prompt that turns one query's documents into a short answer to that query."""
    user = SUMMARY.format(
        documents=format_documents(docs) or "(no documents)", question=question, query=query
    )
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": user}]
