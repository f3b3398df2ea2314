"""Episodes as trees: what one question produced, ready for credit assignment, training and reports.

An episode is a flat list of nodes linked by `parent`; a plain run is a chain, a branched rollout a tree.
Node kinds: `policy` (one act of a role by the trainable policy, the only kind that is trained), `llm` (a
call to the fixed LLM server), `retrieve` (a batched search) and `answer` (a leaf: the final answer and
its rewards). Episodes serialize to one JSON line each and load back equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ragteam.llm.base import Completion
from ragteam.types import Action, Hit, Message, Question

NodeKind = Literal["policy", "llm", "retrieve", "answer"]


@dataclass
class Node:
    """One step of an episode. Which fields are set depends on `kind`:

    - every node: `id` (its index in `Episode.nodes`), `parent` (None at the root), `kind`, `depth`, `seconds`.
      `depth` is the node's depth t as its workflow counts it (`depth.py`): the policy acts on the
      path up to and including it, or for C-3PO its steps (acts, LLM calls, the answer leaf).
    - `policy`: `role`, `messages` (the prompt as sent, after any fitting), `completion` (text, prompt and
      completion ids, per-token log-probs, `forced_tokens`, `finish_reason`; see `Completion`), `action` (the
      parse), `sampling` (temperature, top_p, max_tokens, stop, seed, n of the call that produced it),
      `fit` (set when the prompt was cut to the context: what was dropped or shortened), and for a
      keep-one-of-N act `score` (the selector's score) and `chosen` (True on the candidate that was
      continued, False on its siblings, which stay childless). `rewards` holds credit once assigned.
    - `llm`: `role` (the call's purpose), `messages`, `completion`, `sampling`, `fit`.
    - `retrieve`: `queries`, `k`, `hits` (one ranked list per query).
    - `answer` (a leaf): `answer`, `info` (workflow facts, e.g. C-3PO's strategy), `status` (`ok`,
      `truncated` by a budget, or `failed` with `error`), `rewards` (metric name -> value).
    """

    id: int
    parent: int | None
    kind: NodeKind
    role: str = ""
    depth: int = 0  # depth t: steps from the root down to this node, by its workflow's DepthRule
    messages: list[Message] | None = None
    completion: Completion | None = None
    action: Action | None = None
    sampling: dict[str, Any] | None = None
    fit: dict[str, Any] | None = None
    score: float | None = None
    chosen: bool | None = None
    queries: list[str] | None = None
    k: int | None = None
    hits: list[list[Hit]] | None = None
    answer: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    rewards: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    @property
    def text(self) -> str | None:
        return self.completion.text if self.completion is not None else None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "parent": self.parent, "kind": self.kind}
        for name in ("role", "depth", "messages", "sampling", "fit", "queries", "k", "answer", "error"):
            value = getattr(self, name)
            if value not in (None, "", 0) or (name == "depth" and self.kind == "policy"):
                d[name] = value
            elif name == "answer" and self.kind == "answer" and value is not None:
                d[name] = value  # an empty answer ("") must load back as "", not None
        if self.score is not None:
            d["score"] = self.score
        if self.chosen is not None:
            d["chosen"] = self.chosen
        if self.completion is not None:
            d["completion"] = self.completion.to_dict()
        if self.action is not None:
            d["action"] = self.action.to_dict()
        if self.hits is not None:
            d["hits"] = [[h.to_dict() for h in ranked] for ranked in self.hits]
        if self.info:
            d["info"] = self.info
        if self.kind == "answer":
            d["status"] = self.status
        if self.rewards:
            d["rewards"] = self.rewards
        d["seconds"] = round(self.seconds, 6)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Node:
        return cls(
            id=d["id"],
            parent=d["parent"],
            kind=d["kind"],
            role=d.get("role", ""),
            depth=d.get("depth", 0),
            messages=d.get("messages"),
            completion=Completion.from_dict(d["completion"]) if "completion" in d else None,
            action=Action.from_dict(d["action"]) if "action" in d else None,
            sampling=d.get("sampling"),
            fit=d.get("fit"),
            score=d.get("score"),
            chosen=d.get("chosen"),
            queries=d.get("queries"),
            k=d.get("k"),
            hits=[[Hit.from_dict(h) for h in ranked] for ranked in d["hits"]] if "hits" in d else None,
            answer=d.get("answer"),
            info=d.get("info", {}),
            status=d.get("status", "ok"),
            rewards=d.get("rewards", {}),
            error=d.get("error"),
            seconds=d.get("seconds", 0.0),
        )


@dataclass
class Episode:
    """One question's tree of nodes. `status` is `ok`, `failed` (a call failed after retries) or `partial`."""

    id: str
    workflow: str
    question: Question
    nodes: list[Node] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, node: Node) -> Node:
        node.id = len(self.nodes)
        self.nodes.append(node)
        return node

    def children(self, node_id: int | None) -> list[Node]:
        return [n for n in self.nodes if n.parent == node_id]

    def leaves(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "answer"]

    def path(self, node_id: int) -> list[Node]:
        """Nodes from the root down to `node_id`, inclusive."""
        out = []
        current: int | None = node_id
        while current is not None:
            node = self.nodes[current]
            out.append(node)
            current = node.parent
        return out[::-1]

    def policy_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "policy"]

    @property
    def answer(self) -> str:
        """The answer of the first leaf (the only one in an unbranched episode)."""
        leaves = self.leaves()
        return leaves[0].answer or "" if leaves else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "workflow": self.workflow,
            "question": self.question.to_dict(with_context=False),
            "status": self.status,
            "error": self.error,
            "meta": self.meta,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        return cls(
            id=d["id"],
            workflow=d["workflow"],
            question=Question.from_dict(d["question"]),
            nodes=[Node.from_dict(n) for n in d["nodes"]],
            status=d.get("status", "ok"),
            error=d.get("error"),
            meta=d.get("meta", {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Episode:
        return cls.from_dict(json.loads(line))
