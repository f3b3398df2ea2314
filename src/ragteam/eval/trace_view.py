"""A readable text rendering of one episode tree: who said what, what was retrieved, the answer.

Used by `ragteam ask`. Nodes are printed depth-first in the order they were recorded; where the tree
branches, each branch is marked and indented.
"""

from __future__ import annotations

import json
from typing import Any

from ragteam.rollout.tree import Episode, Node

INDENT = "    "
INFO_HIDDEN = frozenset({"doc_ids", "candidate_ids", "roadmap"})
"""Answer-info keys not repeated under the answer (ids, and the roadmap already shown as its LLM call)."""


def first_words(text: str, n: int = 14) -> str:
    """The first `n` words of `text`, with an ellipsis when cut."""
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    text = text.strip()
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … [{len(text) - limit} more characters]"


def _block(text: str, indent: str) -> list[str]:
    lines = text.splitlines() or [""]
    return [indent + line for line in lines]


def _value(value: Any, limit: int = 200) -> str:
    if value is None:
        return ""
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return clip(shown, limit)


def _cost(node: Node) -> str:
    parts = [f"{node.seconds:.2f} s"]
    c = node.completion
    if c is not None and (c.prompt_tokens or c.completion_tokens):
        parts.append(f"{c.prompt_tokens}+{c.completion_tokens} tokens")
        if c.finish_reason == "length":
            parts.append("cut at max tokens")
    return " · ".join(parts)


def format_node(node: Node, indent: str = "", prompts: bool = False, limit: int = 1200) -> list[str]:
    """The lines that show one node."""
    inner = indent + INDENT
    out: list[str] = []
    if node.kind == "policy":
        out.append(f"{indent}[{node.id}] {node.role}  (policy, depth {node.depth}) · {_cost(node)}")
    elif node.kind == "llm":
        out.append(f"{indent}[{node.id}] LLM {node.role or 'call'} · {_cost(node)}")
    elif node.kind == "retrieve":
        out.append(f"{indent}[{node.id}] retrieve top-{node.k} · {_cost(node)}")
    else:
        status = "" if node.status == "ok" else f"  [{node.status}]"
        out.append(f"{indent}[{node.id}] ANSWER: {node.answer or '(empty)'}{status}")
    if prompts and node.messages:
        for m in node.messages:
            out.append(f"{inner}> {m['role']}:")
            out += _block(clip(m["content"], limit), inner + "  ")
    if node.kind in ("policy", "llm") and node.completion is not None:
        label = "says" if node.kind == "policy" else "writes"
        text = clip(node.completion.text, limit)
        if "\n" in text:
            out.append(f"{inner}{label}:")
            out += _block(text, inner + "  ")
        else:
            out.append(f"{inner}{label}: {text}")
    if node.action is not None:
        a = node.action
        line = f"{inner}action: {a.kind}"
        if a.value not in (None, "", []):
            line += f" {_value(a.value)}"
        if a.penalty:
            line += f"  (penalty {a.penalty:g})"
        out.append(line)
        if not a.valid:
            out.append(f"{inner}INVALID: {a.error or 'unparseable output'}")
    if node.kind == "retrieve":
        for query, ranked in zip(node.queries or [], node.hits or [[] for _ in node.queries or []]):
            out.append(f"{inner}query: {query!r}")
            for rank, hit in enumerate(ranked, 1):
                out.append(
                    f"{inner}  {rank}. {hit.doc.title or hit.doc.id}: {first_words(hit.doc.text)}"
                    f"  ({hit.score:.2f})"
                )
    if node.kind == "answer":
        facts = {k: v for k, v in node.info.items() if k not in INFO_HIDDEN}
        if facts:
            out.append(f"{inner}info: {_value(facts, 300)}")
        if node.rewards:
            out.append(f"{inner}scores: " + " · ".join(f"{k} {v:.2f}" for k, v in node.rewards.items()))
    if node.error and not (node.kind == "answer" and node.status == "failed"):  # a failure is shown on top
        out += _block(clip(node.error, limit), inner + "error: ")
    return out


def format_episode(ep: Episode, prompts: bool = False, limit: int = 1200) -> str:
    """The whole episode as text: the question, every node depth-first, then the final answer."""
    out = [f"Question: {ep.question.question}"]
    if ep.question.golden_answers:
        out.append(f"Gold: {' | '.join(ep.question.golden_answers)}")
    seconds = ep.meta.get("seconds")
    took = f" · {seconds:.2f} s" if isinstance(seconds, (int, float)) else ""
    out.append(f"Workflow: {ep.workflow} · status {ep.status}{took}")
    if ep.error:
        out += _block(clip(ep.error, limit), "error: ")
    out.append("")

    def visit(node: Node, indent: str) -> None:
        out.extend(format_node(node, indent, prompts, limit))
        kids = ep.children(node.id)
        if len(kids) == 1:
            visit(kids[0], indent)
            return
        for i, kid in enumerate(kids, 1):
            out.append(f"{indent}{INDENT}── branch {i}/{len(kids)} ──")
            visit(kid, indent + INDENT)

    roots = ep.children(None)
    for root in roots:
        visit(root, "")
    leaves = ep.leaves()
    if leaves:
        out.append("")
        if len(leaves) == 1:
            out.append(f"Answer: {leaves[0].answer or '(empty)'}")
        else:
            out.append(f"Answers ({len(leaves)} leaves): " + " | ".join(repr(n.answer or "") for n in leaves))
    return "\n".join(out)
