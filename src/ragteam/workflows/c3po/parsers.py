"""Parsers of the three C-3PO roles. Pure, and they never raise: malformed output becomes an invalid Action
whose `error` names the fallback taken.

| role     | kinds                                  | value        | fallback on malformed output                  |
|----------|----------------------------------------|--------------|-----------------------------------------------|
| router   | no_retrieval, retrieval, planning      | query (str)  | single-pass retrieval with the question       |
| filter   | select                                 | ids (1-based)| keep every document                           |
| decider  | retrieval, llm                         | query (str)  | no documents yet: retrieve with the question; |
|          |                                        |              | otherwise hand over to the LLM ([LLM])        |

Tags are matched case-insensitively and with inner spaces tolerated (`[no retrieval]`, `[ LLM ]`); queries are
taken from the rest of the tag's line with wrapping `<...>` and quotes removed. A query that only repeats the
prompt's placeholder (`<your search query>`) counts as missing.
"""

from __future__ import annotations

import re

from ragteam.types import Action
from ragteam.workflows.c3po.settings import ROUTER_TAGS

MAX_QUERY_CHARS = 400
"""Longer queries are cut (a runaway generation is not a search query)."""

_ROUTER_TAG = re.compile(r"\[\s*(no[\s_-]*retrieval|retrieval|planning)\s*\]", re.IGNORECASE)
_DECIDER_TAG = re.compile(r"\[\s*(llm|retrieval)\s*\]", re.IGNORECASE)
_ACTION = re.compile(r"action\s*:", re.IGNORECASE)
_THOUGHT = re.compile(r"thought\s*:", re.IGNORECASE)
_FILTER_LIST = re.compile(r"action\s*:\s*\[([^\[\]]*)\]", re.IGNORECASE)
_ID_ITEM = re.compile(r"^(?:document|doc|id)?\s*#?\s*(\d{1,6})$", re.IGNORECASE)
_PLACEHOLDERS = {
    "your search query",
    "your query here",
    "query content",
    "subquery content",
    "query",
    "search query",
    "your query",
}
_WRAPPERS = "<>\"'`‘’“”*"


def clean_query(text: str) -> str:
    """The query on the first non-empty line of `text`: wrapping brackets, quotes and a `query:` label removed."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            break
    else:
        return ""
    line = re.sub(r"^(?:sub-?)?query\s*:\s*", "", line, flags=re.IGNORECASE)
    previous = None
    while previous != line:
        previous = line
        line = line.strip().strip(_WRAPPERS).strip()
    return line[:MAX_QUERY_CHARS].strip()


def _is_placeholder(query: str) -> bool:
    return query.strip().lower().rstrip(".") in _PLACEHOLDERS


def extract_thought(text: str) -> str:
    """The text between `Thought:` and `Action:` (or before `Action:` when there is no label); may be empty."""
    if not isinstance(text, str):
        return ""
    action = _ACTION.search(text)
    head = text[: action.start()] if action else text
    thought = _THOUGHT.search(head)
    if thought:
        head = head[thought.end() :]
    return head.strip()


def parse_router(text: str, question: str = "") -> Action:
    """`[No Retrieval]` | `[Retrieval]<query>` | `[Planning]` (the first tag in the text wins)."""
    if not isinstance(text, str):
        text = ""
    fallback = f"fallback: single-pass retrieval with the question as query ({question[:60]!r})"
    m = _ROUTER_TAG.search(text)
    if m is None:
        return Action(
            "retrieval",
            question,
            valid=False,
            error=f"no [No Retrieval], [Retrieval] or [Planning] tag; {fallback}",
        )
    tag = re.sub(r"[\s_-]+", " ", m.group(1).lower())
    if tag == "no retrieval":
        return Action("no_retrieval")
    if tag == "planning":
        return Action("planning")
    query = clean_query(text[m.end() :])
    if not query or _is_placeholder(query):
        return Action("retrieval", question, valid=False, error=f"[Retrieval] without a query; {fallback}")
    return Action("retrieval", query)


def parse_filter(text: str, n_docs: int = 0) -> Action:
    """`Thought: ... Action: [ids]` with ids numbered 1..n_docs; value = the kept ids, in order, without repeats.

    No `Action: [...]` list, or an item that is not a number: invalid, every document kept. Ids outside
    1..n_docs: invalid, those ids dropped (the others kept). `Action: []` is valid and keeps nothing.
    """
    if not isinstance(text, str):
        text = ""
    every = list(range(1, max(0, n_docs) + 1))
    lists = list(_FILTER_LIST.finditer(text))
    if not lists:
        return Action(
            "select", every, valid=False, error="no 'Action: [ids]' list; fallback: keep all documents"
        )
    body = lists[-1].group(1)
    items = [s.strip().strip(_WRAPPERS).strip() for s in re.split(r"[,;]", body)]
    ids: list[int] = []
    for item in (s for s in items if s):
        m = _ID_ITEM.match(item)
        if m is not None:
            ids.append(int(m.group(1)))
        elif re.fullmatch(r"\d{1,6}(?:\s+\d{1,6})+", item):  # "1 3 4": numbers separated by spaces
            ids.extend(int(x) for x in item.split())
        else:
            return Action(
                "select",
                every,
                valid=False,
                error=f"document id {item[:30]!r} is not a number; fallback: keep all documents",
            )
    kept = list(dict.fromkeys(i for i in ids if 1 <= i <= n_docs))
    outside = sorted({i for i in ids if not 1 <= i <= n_docs})
    if outside:
        return Action(
            "select",
            kept,
            valid=False,
            error=f"ids {outside[:10]} are not in 1..{n_docs}; fallback: those ids dropped",
        )
    return Action("select", kept)


def parse_decider(text: str, question: str = "", have_docs: bool = False) -> Action:
    """`Thought: ... Action: [Retrieval]<subquery>` | `Thought: ... Action: [LLM]` (tag after `Action:` first)."""
    if not isinstance(text, str):
        text = ""
    if have_docs:
        fallback_action = Action("llm")
        fallback = "fallback: [LLM] (answer with the gathered documents)"
    else:
        fallback_action = Action("retrieval", question)
        fallback = f"fallback: retrieve with the question ({question[:60]!r}) as there are no documents yet"
    actions = list(_ACTION.finditer(text))
    segment = text[actions[-1].end() :] if actions else text
    m = _DECIDER_TAG.search(segment)
    if m is None:
        return Action(
            fallback_action.kind,
            fallback_action.value,
            valid=False,
            error=f"no [Retrieval] or [LLM] action; {fallback}",
        )
    if m.group(1).lower() == "llm":
        return Action("llm")
    query = clean_query(segment[m.end() :])
    if not query or _is_placeholder(query):
        return Action(
            fallback_action.kind,
            fallback_action.value,
            valid=False,
            error=f"[Retrieval] without a subquery; {fallback}",
        )
    return Action("retrieval", query)


# ---- the inverse: the canonical reply of an action (a valid act that does exactly this) ------------------


def write_router(action: Action) -> str:
    """`[No Retrieval]`, `[Planning]` or `[Retrieval] <query>` (`settings.ROUTER_TAGS`)."""
    if action.kind in ("no_retrieval", "planning"):
        return ROUTER_TAGS[action.kind]
    return f"{ROUTER_TAGS['retrieval']} {action.value}"


def write_filter(action: Action) -> str:
    """`Action: [ids]`, the kept documents' numbers as the prompt numbers them."""
    return f"Action: [{', '.join(str(i) for i in action.value or [])}]"


def write_decider(action: Action) -> str:
    """`Action: [Retrieval] <subquery>` or `Action: [LLM]`."""
    return "Action: [LLM]" if action.kind == "llm" else f"Action: [Retrieval] {action.value}"
