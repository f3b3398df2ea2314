"""The policy's reply read as Search-R1 reads it: the first `<search>` or `<answer>` tag is the action. Pure,
and it never raises.

The reply may end without the closing tag (a backend that leaves out the stop string `</search>` it stopped
at): the content then runs to the end of the text. No tag, or an empty one, is invalid; the episode shows
the policy the invalid-action note and it tries again, spending a turn, as in Search-R1.
"""

from __future__ import annotations

import re

from ragteam import Action

MAX_QUERY_CHARS = 400
_TAG = re.compile(r"<(search|answer)>(.*?)(?:</\1>|$)", re.DOTALL)


def parse_reply(text: str) -> Action:
    """`search` (value: the query), `answer` (value: the answer), or an invalid `none`."""
    m = _TAG.search(text) if isinstance(text, str) else None
    if m is None:
        return Action("none", valid=False, error="no <search> or <answer> tag; the turn is spent")
    kind, value = m.group(1), " ".join(m.group(2).split())
    if not value:
        return Action("none", valid=False, error=f"an empty <{kind}> tag; the turn is spent")
    return Action(kind, value=value[:MAX_QUERY_CHARS] if kind == "search" else value)


def write_reply(action: Action) -> str:
    """The canonical reply that parses to `action` (for relabeling a recovered reply)."""
    if action.kind not in ("search", "answer"):
        return ""
    return f"<{action.kind}> {action.value} </{action.kind}>"
