"""Search-R1's prompt and observations, in its tag format: the policy reasons in `<think>`, asks the search
engine with `<search> query </search>`, reads the hits between `<information>` and `</information>`, and
ends with `<answer> ... </answer>`.

Search-R1 keeps one growing text (prompt, reply, observation, reply, ...) and continues it. Here every turn is
a chat: the instruction and question as the first user message, then each earlier reply as an assistant
message followed by its observation as a user message. Either way the observations are prompt tokens, which
PPO never trains: only each turn's own reply is a trained completion.
"""

from __future__ import annotations

from ragteam import Doc, Message

INSTRUCTION = (
    "Answer the question below. Each time you receive new information, first reason about it inside "
    "<think> and </think>. If you then find that you are missing knowledge, query a search engine by "
    "writing <search> your query </search>; the top results come back between <information> and "
    "</information>. You may search as often as you need. Once no more outside knowledge is needed, give "
    "the answer alone inside <answer> and </answer>, with no explanation, e.g. <answer> Paris </answer>. "
    "Question: {question}\n"
)
INVALID = (
    "\nThat action was not valid. To search, put the query between <search> and </search>. To give the "
    "final answer, put it between <answer> and </answer>. Try again.\n"
)


def information(docs: list[Doc]) -> str:
    """The observation of one search: Search-R1's numbered `Doc i(Title: t) text` lines in `<information>`."""
    lines = "".join(f"Doc {i}(Title: {d.title}) {d.text}\n" for i, d in enumerate(docs, 1))
    return f"\n\n<information>{lines.strip()}</information>\n\n"


def messages(question: str, replies: list[str], docs: list[tuple[str, list[Doc]]]) -> list[Message]:
    """The prompt of the next turn: the instruction, then each earlier reply with what it got back (`docs[i]`:
    the query and hits of turn i's search; an empty query marks an invalid turn)."""
    out: list[Message] = [{"role": "user", "content": INSTRUCTION.format(question=question)}]
    for reply, (query, hits) in zip(replies, docs, strict=True):
        out.append({"role": "assistant", "content": reply})
        out.append({"role": "user", "content": information(hits) if query else INVALID})
    return out
