"""Every prompt of the RAG-Gym agents in one place: the actor's templates (one per agent design, plus the
forced-answer template used at the last step) and the document summary of Search-o1 and Re2Search.

Formats follow the paper (RAG-Gym, section 2 and appendix H): the state is shown under
`### Information-seeking History` and `### Original Question`; the actor writes the sections
`### Step-by-step Reasoning` (and, for Re2Search, `### Unverified Claim Identification`) and ends with
`### Structured Output`, a JSON object with `"predicted_answer"` and/or `"generated_query"`. The wording is ours.

Where the history stands is `history_at` (`--history-at`): `start`, the paper's order (Figure 9: the history,
then the question and the instructions), or `end` (the question and the instructions, then the history). Each
design with a history has one template without it (`TEMPLATES`), and `actor_messages` places the history
block (`HISTORY`) before or after it, so both orders say the same words. Under `end` each step's prompt extends
the previous step's (its history grows at the end), so a prefix cache (the local engine's, vLLM's, SGLang's)
prefills only the new entry, where under `start` every step recomputes the question and the instructions after
its grown history. The empty history keeps its placeholder (`NO_HISTORY`) under both: the model is told that
nothing was searched yet, at the cost of the placeholder's few tokens once per episode (step 2 replaces it).

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

from typing import Literal, get_args

from ragteam.types import Doc, Message

ACTOR_SYSTEM = (
    "You are a helpful assistant. You solve questions step by step and follow the output format exactly."
)

ANSWER_FIELD = '"predicted_answer": "a single letter for a multiple-choice question, otherwise a number, a word or a short phrase"'
QUERY_FIELD = '"generated_query": "an entity, a question or a statement to look up in the knowledge base"'

HISTORY = """### Information-seeking History
{history}"""
"""The history block: before (`history_at` `start`) or after (`end`) a design's template."""

HistoryAt = Literal["start", "end"]
"""Where the actor's prompt shows the history (`GymOptions.history_at`, module docstring)."""

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

HISTORY_ANSWER = """### Original Question
{question}

Your reply must have two sections:
1. ### Step-by-step Reasoning
   - Work through the question step by step, using the information-seeking history, and arrive at an answer.
2. ### Structured Output
   - Give your answer as this JSON object:
```json
{{{answer_field}}}
```"""

SEARCH_OR_ANSWER = """### Original Question
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

RE2SEARCH = """### Original Question
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
"""The actor's template of each agent design, without the history (at the last step, `HISTORY_ANSWER`
replaces it)."""

WITHOUT_HISTORY = ("direct", "cot")
"""The designs whose prompt shows no history (and that have no forced last step)."""


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


def actor_messages(
    agent: str, question: str, history: str, forced: bool = False, history_at: HistoryAt = "start"
) -> list[Message]:
    """The actor's chat for `agent`; `forced` (the last step) allows only an answer. A design with a history
    shows it before its template (`history_at` `start`, Figure 9) or after it (`end`), a blank line between."""
    if agent in WITHOUT_HISTORY:
        parts = [TEMPLATES[agent]]
    else:
        task = HISTORY_ANSWER if forced else TEMPLATES[agent]
        if history_at not in get_args(HistoryAt):
            raise ValueError(f"history_at must be start or end, not {history_at!r}")
        parts = [HISTORY, task] if history_at == "start" else [task, HISTORY]
    user = "\n\n".join(parts).format(
        question=question, history=history, answer_field=ANSWER_FIELD, query_field=QUERY_FIELD
    )
    return [{"role": "system", "content": ACTOR_SYSTEM}, {"role": "user", "content": user}]


def summary_messages(question: str, query: str, docs: list[Doc]) -> list[Message]:
    """The LLM server's prompt that turns one query's documents into a short answer to that query."""
    user = SUMMARY.format(
        documents=format_documents(docs) or "(no documents)", question=question, query=query
    )
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": user}]
