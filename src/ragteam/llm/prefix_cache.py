"""A radix tree of KV blocks keyed by token ids: the local engine's prefix cache.

Why. Most prompt tokens of a rollout repeat: the K members of a question's group share their first prompt,
the roles' templates recur in every episode, a later turn's prompt begins with an earlier one. vLLM
(automatic prefix caching) and SGLang (RadixAttention) never recompute a cached prefix; this tree lets the
in-process engine (`ragteam.llm.decoder`) do the same: each prompt prefills only the suffix the tree lacks.

Layout. Each node holds an edge: a run of token ids and, per layer, their keys and values ([heads, n, dim],
positions counted from the root, RoPE already applied). A path from the root spells a prefix; a prompt's
longest cached prefix is found by walking the tree, and may end inside an edge (its KV is then a slice).
Inserting a sequence that diverges inside an edge splits it in two. Tensors are cloned on insert and on split,
so that each node owns exactly its bytes and evicting it frees them.

Eviction. The tree holds at most `budget_bytes` of KV; past it, the least recently used leaf goes first (a
match or an insert touches every node on its path), then the parent it may leave bare, and so on.

Validity. KV depends on the weights, and a cache must never serve KV across a weight update. Whoever changes
the weights says so: `LocalChatModel.clear_prefix_cache` (`load_weights` calls it; the PPO trainer calls
`clear_prefix_caches` on its engine at every push, before each rollout and evaluation, `train/ppo/phases.py`; a Ray
rollout worker when it loads weights). As a safety net, `validate(key)` also empties the tree when the
weights' key changes (`weights_key`: each parameter's storage and version counter), but the counter misses
some updates: a fused optimizer step (`AdamW(fused=True)`) and writes through `p.data` do not bump it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if (
    TYPE_CHECKING
):  # torch is imported where a tensor is made: `import ragteam` (the counters below) stays light
    import torch

KV = list[tuple["torch.Tensor", "torch.Tensor"]]  # per layer: keys, values [heads, n, dim]


@dataclass(eq=False)
class _Node:
    """One edge of the tree: `tokens` and their `kv`; `children` by their first token."""

    tokens: tuple[int, ...]
    kv: KV
    parent: _Node | None
    children: dict[int, _Node] = field(default_factory=dict)
    used: int = 0  # the tick of the last match or insert that passed through

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.kv)


def _cut(kv: KV, start: int, end: int | None = None) -> KV:
    """Positions start..end of each layer's keys and values, as tensors of their own (not views)."""
    return [(k[:, start:end].clone(), v[:, start:end].clone()) for k, v in kv]


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of `a` and `b`."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """Cached KV of token prefixes, at most `budget_bytes` of it (module docstring)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 1:
            raise ValueError(f"a prefix cache needs a budget of at least 1 byte, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self.root = _Node((), [], None)
        self.nbytes = 0
        self.tokens = 0  # tokens held
        self.key: Hashable = None  # the weights the KV was computed with
        self.evicted_tokens = 0
        self.clears = 0
        self._tick = 0

    def validate(self, key: Hashable) -> None:
        """Empty the tree if its KV was computed under other weights than `key` names."""
        if key != self.key:
            if self.tokens:
                self.clears += 1
            self.clear()
            self.key = key

    def clear(self) -> None:
        """Drop every entry (the weights changed, or the caller asks)."""
        self.root = _Node((), [], None)
        self.nbytes = self.tokens = 0

    def matched(self, ids: Sequence[int], limit: int | None = None) -> int:
        """Length of the longest cached prefix of `ids` (at most `limit` tokens), touching nothing."""
        limit = len(ids) if limit is None else min(limit, len(ids))
        node, n = self.root, 0
        while n < limit:
            child = node.children.get(ids[n])
            if child is None:
                break
            take = _common(child.tokens, ids[n:limit])
            n += take
            if take < len(child.tokens):
                break
            node = child
        return n

    def match(self, ids: Sequence[int], limit: int | None = None) -> tuple[int, KV]:
        """The longest cached prefix of `ids` (at most `limit` tokens): its length and its KV, per layer
        [heads, length, dim] (empty list when nothing matches). Touches the nodes it passes."""
        limit = len(ids) if limit is None else min(limit, len(ids))
        self._tick += 1
        node, n, pieces = self.root, 0, []
        while n < limit:
            child = node.children.get(ids[n])
            if child is None:
                break
            take = _common(child.tokens, ids[n:limit])
            child.used = self._tick
            pieces.append([(k[:, :take], v[:, :take]) for k, v in child.kv])
            n += take
            if take < len(child.tokens):
                break
            node = child
        if not pieces:
            return 0, []
        if len(pieces) == 1:
            return n, [(k, v) for k, v in pieces[0]]
        import torch

        layers = len(pieces[0])
        return n, [
            (torch.cat([p[i][0] for p in pieces], dim=1), torch.cat([p[i][1] for p in pieces], dim=1))
            for i in range(layers)
        ]

    def insert(self, ids: Sequence[int], kv_of: Callable[[int, int], KV]) -> int:
        """Add `ids`, whose KV for positions a..b `kv_of(a, b)` gives as tensors of their own, which the tree
        keeps (only the positions it lacks are asked for); then evict down to the budget. Returns the tokens
        added."""
        self._tick += 1
        node, n = self.root, 0
        while n < len(ids):
            child = node.children.get(ids[n])
            if child is None:
                break
            take = _common(child.tokens, ids[n:])
            if take < len(child.tokens):
                child = self._split(child, take)
            child.used = self._tick
            n += take
            node = child
        added = len(ids) - n
        if added:
            leaf = _Node(tuple(ids[n:]), kv_of(n, len(ids)), node, used=self._tick)
            node.children[ids[n]] = leaf
            self.nbytes += leaf.nbytes
            self.tokens += added
        self._evict(keep=node if not added else leaf)
        return added

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut `node`'s edge after `at` tokens: a new node holds the first part, `node` the rest."""
        assert node.parent is not None
        head = _Node(node.tokens[:at], _cut(node.kv, 0, at), node.parent, used=node.used)
        node.parent.children[node.tokens[0]] = head
        node.tokens, node.kv, node.parent = node.tokens[at:], _cut(node.kv, at), head
        head.children[node.tokens[0]] = node
        return head

    def _evict(self, keep: _Node | None = None) -> None:
        """Drop least recently used leaves until the tree fits its budget; never `keep` (just inserted) while
        another leaf can go."""
        if self.nbytes <= self.budget_bytes:
            return
        leaves = [n for n in self._nodes() if not n.children and n is not self.root]
        leaves.sort(key=lambda n: n.used, reverse=True)  # the oldest last, popped first
        if keep in leaves:  # the newest entry goes last of all
            leaves.remove(keep)
            leaves.insert(0, keep)
        while self.nbytes > self.budget_bytes and leaves:
            leaf = leaves.pop()
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.tokens[0]]
            self.nbytes -= leaf.nbytes
            self.tokens -= len(leaf.tokens)
            self.evicted_tokens += len(leaf.tokens)
            if parent is not self.root and not parent.children:  # bare now: a leaf, in its LRU place
                at = next((i for i, n in enumerate(leaves) if n.used <= parent.used), len(leaves))
                leaves.insert(at, parent)

    def _nodes(self) -> list[_Node]:
        out, todo = [], [self.root]
        while todo:
            node = todo.pop()
            out.append(node)
            todo.extend(node.children.values())
        return out

    def __len__(self) -> int:
        """Nodes in the tree (the root excluded)."""
        return len(self._nodes()) - 1


def shared_stems(
    inputs: Sequence[Sequence[int]], forced: Sequence[int], tree: PrefixCache, least: int = 16
) -> list[list[int]]:
    """The prefixes that two or more of the distinct `inputs` of one batch share and `tree` lacks (by at least
    `least` tokens), none a prefix of another: prefilled first, they are computed once, not once per input.

    An input's stem stops before its last token and its `forced` prefix, which the input computes itself (their
    logits are its next token's and its prefix's scores). Sorted, an input shares its longest prefix with
    one of its neighbours."""
    order = sorted(range(len(inputs)), key=lambda i: list(inputs[i]))
    longest = [0] * len(inputs)
    for a, b in zip(order, order[1:]):
        n = _common(inputs[a], inputs[b])
        longest[a], longest[b] = max(longest[a], n), max(longest[b], n)
    stems = set()
    for i, n in enumerate(longest):
        n = min(n, len(inputs[i]) - 1 - forced[i])
        if n >= least and n - tree.matched(inputs[i], n) >= least:
            stems.add(tuple(inputs[i][:n]))
    ranked = sorted(stems)
    return [list(s) for s, t in zip(ranked, [*ranked[1:], None]) if t is None or t[: len(s)] != s]


def weights_key(model: Any) -> tuple[tuple[int, int], ...]:
    """A cheap, partial witness of the weights' values: each parameter's storage and in-place version counter.
    `load_state_dict` and a foreach/for-loop optimizer step bump the counters; replacing a tensor changes the
    storage. It does NOT see a fused optimizer step (`torch.optim.AdamW(fused=True)`, the PPO trainer's) nor a
    write through `p.data` (`p.data.copy_(...)`): code that updates weights so must call
    `clear_prefix_caches` (module docstring, "Validity"). The prefix cache is emptied when it changes."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def clear_prefix_caches(*models: Any) -> None:
    """Empty the prefix cache of each in-process model among `models` (None and server-backed models, which
    have none, are skipped): their weights were just updated or pushed, so KV computed before must not be
    served. The PPO trainer calls it (through its engine's `clear_prefix_cache`) at every push, so that each
    rollout and evaluation starts from an empty cache whatever ran before it: a resumed run, whose cache
    starts empty, then samples exactly what the uninterrupted run sampled."""
    for model in models:
        clear = getattr(model, "clear_prefix_cache", None)
        if clear is not None:
            clear()


def full_attention(model: Any) -> bool:
    """Whether every layer of the model's KV cache is a plain full-attention layer, whose keys and values for
    a prefix do not depend on what follows (a sliding-window layer keeps only the last window)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        layers = DynamicCache(config=model.config).layers
    except Exception:  # noqa: BLE001 - an unknown config: run without the cache
        return False
    return all(type(layer) is DynamicLayer for layer in layers)


# ---- the engine's per-run counters ------------------------------------------------------------------------------

PREFILL_COUNTERS = ("prompt_tokens", "prefill_tokens", "cached_tokens")


def prefill_models(policy: Any, llm: Any, mb: float) -> dict[str, Any]:
    """The in-process models among a rollout engine's policy and LLM, by role (one entry when both are the
    same model), their prefix cache set to `mb` MB (`--rollout.prefix-cache-mb`). A server-backed model has
    none: its server caches (or not) on its own."""
    out: dict[str, Any] = {}
    for name, model in (("policy", policy), ("llm", llm)):
        if model is None or not hasattr(model, "set_prefix_cache") or any(m is model for m in out.values()):
            continue
        model.set_prefix_cache(mb)
        out[name] = model
    return out


def prefill_counters(models: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Each model's prefill counters now (`prompt_tokens`, `prefill_tokens`, `cached_tokens`)."""
    return {name: {k: int(m.stats[k]) for k in PREFILL_COUNTERS} for name, m in models.items()}


def prefill_delta(
    models: dict[str, Any], before: dict[str, dict[str, int]], calls: dict[str, int]
) -> dict[str, dict[str, float]]:
    """What each model prefilled since `before`, summarized (`prefill_summary`); also added to the engine's
    `calls` as `policy_prompt_tokens`, `policy_prefill_tokens`, ... so that a run's totals travel with them."""
    now = prefill_counters(models)
    out = {}
    for name, counts in now.items():
        delta = {k: counts[k] - before[name][k] for k in PREFILL_COUNTERS}
        for k, v in delta.items():
            calls[f"{name}_{k}"] = calls.get(f"{name}_{k}", 0) + v
        out[name] = summary(delta)
    return out


def summary(counts: dict[str, int]) -> dict[str, float]:
    """Prompt, prefilled and cached tokens, the share of the prompt tokens that was prefilled and the hit rate
    (1 - that share: rows that shared a prompt in one batch count as hits too)."""
    prompt, prefilled = counts["prompt_tokens"], counts["prefill_tokens"]
    share = round(prefilled / prompt, 4) if prompt else 0.0
    return {**counts, "prefilled": share, "hit_rate": round(1 - share, 4) if prompt else 0.0}


def prefill_summary(calls: dict[str, int]) -> dict[str, dict[str, float]]:
    """The prefill summaries by role from an engine's `calls` (`prefill_delta`): the eval metrics' view."""
    out = {}
    for name in ("policy", "llm"):
        if f"{name}_prompt_tokens" in calls:
            out[name] = summary({k: calls[f"{name}_{k}"] for k in PREFILL_COUNTERS})
    return out
