"""Per-workflow statistics over episode trees: pure functions, no I/O.

Every function takes a sequence of `Episode`s (as read back from an `episodes.jsonl`) and returns plain
JSON-able dicts, so `metrics.json`, `report.md` and the plots all show the same numbers.

Conventions:
- the *primary leaf* of an episode is its first answer leaf (the only one in an unbranched run); depth,
  retrieval rounds and strategy are read on the path to it, for episodes that did not fail;
- the strategy ratio (C-3PO's Fig. 5) is over the router acts that were *valid*: a malformed router act
  takes the parser's fallback (single-pass retrieval with the question), which is the workflow's choice, not
  the policy's, so counting it as a strategy would credit the policy with a ratio it never chose. Invalid
  acts, strategies forced by `--strategy` or by a forced prefix (tree rollouts), and episodes stopped
  before any act are counted apart (`strategy_excluded`);
- two depths: `depth` counts the policy acts on the path; `tree_depth` is C-3PO's depth t of the primary
  leaf (`workflows/c3po/tree.py`, the one definition the engine's fork schedule and depth limit read for `c3po`;
  argued in docs/workflows.md, *Depth t*): the question is 0, and each policy act, LLM call and the answer
  leaf is one step (a search is not). Direct answering is 3, a single pass 4, planning 2R + 5 with R
  retrieval-filter rounds ended by the decider's [LLM] (2R + 4 when the loop stops at the round limit): the
  paper's Fig. 6 depths 3-5 for the simple strategies and 9-13 for Musique's 2 to 4 hops;
- costs (model calls, tokens, retrievals, invalid actions) count every node of the tree;
- an episode's latency is its wall time `meta["seconds"]` when the engine records it, else the sum of its
  nodes' `seconds` (an upper bound when calls were batched with other episodes).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ragteam.rollout.tree import Episode, Node
from ragteam.workflows.c3po.tree import DEPTH as C3PO

WALL_TIME_KEY = "seconds"
"""Key of `Episode.meta` that holds the episode's wall time in seconds, when the engine records it."""


def primary_leaf(ep: Episode) -> Node | None:
    """The first answer leaf of `ep`, or None when the episode has none (e.g. it failed early)."""
    leaves = ep.leaves()
    return leaves[0] if leaves else None


def finished_leaf(ep: Episode) -> Node | None:
    """The primary leaf of an episode that did not fail (the engine adds a `failed` leaf to failed ones)."""
    leaf = primary_leaf(ep)
    if leaf is None or ep.status == "failed" or leaf.status == "failed":
        return None
    return leaf


def policy_depth(ep: Episode) -> int | None:
    """Number of policy acts on the path to the primary leaf (None if the episode failed)."""
    leaf = finished_leaf(ep)
    if leaf is None:
        return None
    return sum(1 for n in ep.path(leaf.id) if n.kind == "policy")


def retrieval_rounds(ep: Episode) -> int | None:
    """Number of retrieve nodes on the path to the primary leaf (None if the episode failed)."""
    leaf = finished_leaf(ep)
    if leaf is None:
        return None
    return sum(1 for n in ep.path(leaf.id) if n.kind == "retrieve")


def tree_depth(ep: Episode) -> int | None:
    """C-3PO's depth t of the primary leaf (Fig. 6; see the module docstring): the policy acts, LLM calls and
    the leaf on its path (None if the episode failed). For a `c3po` episode it equals the leaf's `depth`."""
    leaf = finished_leaf(ep)
    if leaf is None:
        return None
    return C3PO.of(ep, leaf.id)


def deciding_act(ep: Episode) -> Node | None:
    """The act that chose the recorded strategy: the first policy act on the path to the primary leaf."""
    leaf = finished_leaf(ep)
    if leaf is None:
        return None
    return next((n for n in ep.path(leaf.id) if n.kind == "policy"), None)


def strategy_choice(ep: Episode) -> tuple[str, str] | None:
    """(strategy, how it was chosen) of a finished episode that records one, else None. `how`: `valid`
    (the policy's parsed choice), `invalid` (its act was malformed: the fallback's strategy), `forced`
    (`--strategy`, or a forced prefix in a tree rollout), `no_act` (stopped before any act)."""
    strategy = strategy_of(ep)
    if strategy is None:
        return None
    leaf = finished_leaf(ep)
    if leaf is not None and leaf.info.get("forced"):
        return strategy, "forced"
    act = deciding_act(ep)
    if act is None:
        return strategy, "no_act"
    if act.completion is not None and act.completion.forced_tokens:
        return strategy, "forced"
    if act.action is not None and not act.action.valid:
        return strategy, "invalid"
    return strategy, "valid"


def strategy_of(ep: Episode) -> str | None:
    """The workflow's `Answer.info["strategy"]` recorded on the primary leaf (C-3PO), if any."""
    leaf = finished_leaf(ep)
    if leaf is None:
        return None
    value = leaf.info.get("strategy")
    return str(value) if value is not None else None


def episode_seconds(ep: Episode) -> float:
    """Wall time of one episode: `meta["seconds"]` if recorded, else the sum of its nodes' seconds."""
    recorded = ep.meta.get(WALL_TIME_KEY)
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
        return float(recorded)
    return float(sum(n.seconds for n in ep.nodes))


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) of `values` with linear interpolation between order statistics."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def histogram(values: Sequence[int]) -> dict[str, int]:
    """Counts of each integer value, keys as strings (JSON), in increasing order of the value."""
    counts = Counter(values)
    return {str(v): counts[v] for v in sorted(counts)}


def distribution(values: Sequence[int]) -> dict[str, Any]:
    """Histogram, mean and max of integer values (e.g. policy depth per question)."""
    return {
        "histogram": histogram(values),
        "mean": _mean(values),
        "max": max(values) if values else 0,
        "n": len(values),
    }


def strategy_stats(episodes: Sequence[Episode]) -> dict[str, Any] | None:
    """Counts and ratios of the strategies chosen by *valid* router acts (module docstring); None if no
    episode records a strategy. `n` is the number of valid choices (0 when every act was malformed)."""
    choices = [c for c in (strategy_choice(ep) for ep in episodes) if c is not None]
    if not choices:
        return None
    counts = Counter(s for s, how in choices if how == "valid")
    total = sum(counts.values())
    order = sorted(counts, key=lambda s: (-counts[s], s))
    return {
        "counts": {s: counts[s] for s in order},
        "ratio": {s: counts[s] / total for s in order},
        "n": total,
    }


def strategy_excluded(episodes: Sequence[Episode]) -> dict[str, Any] | None:
    """The episodes left out of the strategy ratio: by reason (`invalid`, `forced`, `no_act`), each with the
    strategy they ended up taking; None if no episode records a strategy."""
    choices = [c for c in (strategy_choice(ep) for ep in episodes) if c is not None]
    if not choices:
        return None
    out: dict[str, Any] = {"valid": sum(1 for _, how in choices if how == "valid")}
    for reason in ("invalid", "forced", "no_act"):
        taken = Counter(s for s, how in choices if how == reason)
        out[reason] = {"n": sum(taken.values()), "took": dict(sorted(taken.items()))}
    return out


def invalid_acts(ep: Episode) -> tuple[int, int]:
    """(invalid acts, policy acts) of one episode: an act is invalid when its reply did not parse (the
    fallback was taken, `action.valid` False)."""
    acts = ep.policy_nodes()
    return sum(1 for n in acts if n.action is not None and not n.action.valid), len(acts)


def invalid_rate(episodes: Sequence[Episode]) -> float:
    """THE invalid-act rate, as report.md, metrics.json, PPO's log and `ragteam compare` all give it: invalid
    acts over all policy acts of the run (pooled; a question with more acts weighs more, as each act is one
    reply the policy could have got wrong). 0.0 when there is no act."""
    counts = [invalid_acts(ep) for ep in episodes]
    total = sum(n for _, n in counts)
    return sum(k for k, _ in counts) / total if total else 0.0


def invalid_action_stats(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Policy acts and invalid (unparseable, fallback taken) acts, in total and by role, with rates: each
    rate is `invalid_rate`'s pooled share."""
    acts: Counter[str] = Counter()
    invalid: Counter[str] = Counter()
    for ep in episodes:
        for node in ep.policy_nodes():
            acts[node.role] += 1
            if node.action is not None and not node.action.valid:
                invalid[node.role] += 1
    by_role = {
        role: {"acts": acts[role], "invalid": invalid[role], "rate": invalid[role] / acts[role]}
        for role in sorted(acts)
    }
    total_acts, total_invalid = sum(acts.values()), sum(invalid.values())
    return {
        "acts": total_acts,
        "invalid": total_invalid,
        "rate": invalid_rate(episodes),
        "by_role": by_role,
    }


def action_kinds(episodes: Sequence[Episode]) -> dict[str, dict[str, int]]:
    """How often each role chose each action kind (e.g. router: retrieval / planning / no_retrieval)."""
    out: dict[str, Counter[str]] = {}
    for ep in episodes:
        for node in ep.policy_nodes():
            kind = node.action.kind if node.action is not None else "(none)"
            out.setdefault(node.role, Counter())[kind] += 1
    return {role: dict(sorted(out[role].items())) for role in sorted(out)}


def penalty_stats(episodes: Sequence[Episode]) -> dict[str, dict[str, float]]:
    """Per role: acts with a nonzero per-role penalty (MMOA-RAG), and the mean penalty per act."""
    acts: Counter[str] = Counter()
    hit: Counter[str] = Counter()
    total: dict[str, float] = {}
    for ep in episodes:
        for node in ep.policy_nodes():
            acts[node.role] += 1
            p = node.action.penalty if node.action is not None else 0.0
            if p:
                hit[node.role] += 1
                total[node.role] = total.get(node.role, 0.0) + p
    return {
        role: {"penalized": hit[role], "mean": total[role] / acts[role]} for role in sorted(acts) if hit[role]
    }


MAX_CATEGORIES = 20
"""A leaf-info key with more distinct string values than this (free text, e.g. a roadmap) is not tabulated."""


def answer_info_stats(episodes: Sequence[Episode]) -> dict[str, Any]:
    """What the workflows record in `Answer.info`, over finished episodes: counts of each value of a
    categorical key (str / bool: strategy, stop, agent...), mean and max of a numeric key (rounds, steps...);
    dicts of numbers (MMOA penalties) become `key.sub`. Lists and free text are left out."""
    categorical: dict[str, Counter[str]] = {}
    numeric: dict[str, list[float]] = {}

    def add(key: str, value: Any) -> None:
        if isinstance(value, (bool, str)):
            categorical.setdefault(key, Counter())[
                str(value).lower() if isinstance(value, bool) else value
            ] += 1
        elif isinstance(value, (int, float)):
            numeric.setdefault(key, []).append(float(value))

    for ep in episodes:
        leaf = finished_leaf(ep)
        if leaf is None:
            continue
        for key, value in leaf.info.items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        add(f"{key}.{sub}", v)
            else:
                add(key, value)
    return {
        "counts": {
            k: dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))
            for k, c in sorted(categorical.items())
            if len(c) <= MAX_CATEGORIES
        },
        "numeric": {k: {"mean": _mean(v), "max": max(v), "n": len(v)} for k, v in sorted(numeric.items())},
    }


def cost_per_question(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Mean per question of model calls, prompt/completion tokens (policy and LLM apart) and retrievals."""
    n = len(episodes)
    calls = {"policy": 0, "llm": 0, "retrieve": 0, "retrieve_queries": 0}
    tokens = {"policy": {"prompt": 0, "completion": 0}, "llm": {"prompt": 0, "completion": 0}}
    for ep in episodes:
        for node in ep.nodes:
            if node.kind in ("policy", "llm"):
                calls[node.kind] += 1
                if node.completion is not None:
                    tokens[node.kind]["prompt"] += node.completion.prompt_tokens
                    tokens[node.kind]["completion"] += node.completion.completion_tokens
            elif node.kind == "retrieve":
                calls["retrieve"] += 1
                calls["retrieve_queries"] += len(node.queries or [])
    per = (lambda x: x / n) if n else (lambda x: 0.0)
    return {
        "calls": {k: per(v) for k, v in calls.items()},
        "tokens": {who: {k: per(v) for k, v in t.items()} for who, t in tokens.items()},
        "totals": {"calls": calls, "tokens": tokens},
    }


def latency_stats(episodes: Sequence[Episode]) -> dict[str, float]:
    """Mean, median, 90th percentile, max and total of the per-question latency in seconds."""
    secs = [episode_seconds(ep) for ep in episodes]
    return {
        "mean": _mean(secs),
        "p50": quantile(secs, 0.5),
        "p90": quantile(secs, 0.9),
        "max": max(secs) if secs else 0.0,
        "total": float(sum(secs)),
    }


def truncation_stats(episodes: Sequence[Episode]) -> dict[str, Any]:
    """How often the fitting policy and the reply limit cut a call, per model and role (policy roles; the
    LLM's purposes): `calls`; `prompt_cut` (the prompt was cut to fit, `Node.fit`: documents dropped,
    passages shortened or text cut); `reply_cut` (the reply reached its max tokens, `finish_reason ==
    "length"`); `reply_cut_invalid` (policy: a cut reply that did not parse, so the workflow fell back: the
    act lost its action to the cut). Where a profile asks more of a small model than it holds (`--profile
    paper`), these say how often the truncation policy stood in for the paper's value."""
    out: dict[str, dict[str, dict[str, int]]] = {"policy": {}, "llm": {}}
    for ep in episodes:
        for node in ep.nodes:
            if node.kind not in out:
                continue
            row = out[node.kind].setdefault(
                node.role, {"calls": 0, "prompt_cut": 0, "reply_cut": 0, "reply_cut_invalid": 0}
            )
            row["calls"] += 1
            row["prompt_cut"] += int(bool(node.fit) and "error" not in node.fit)
            cut = node.completion is not None and node.completion.finish_reason == "length"
            row["reply_cut"] += int(cut)
            row["reply_cut_invalid"] += int(cut and node.action is not None and not node.action.valid)
    totals = {
        who: {k: sum(r[k] for r in roles.values()) for k in ("calls", "prompt_cut", "reply_cut")}
        for who, roles in out.items()
    }
    return {
        "by_role": {who: dict(sorted(roles.items())) for who, roles in out.items()},
        "totals": totals,
    }


def workflow_stats(episodes: Sequence[Episode]) -> dict[str, Any]:
    """All statistics of one workflow's run; depth and strategy over the episodes that did not fail."""
    depths = [d for d in (policy_depth(ep) for ep in episodes) if d is not None]
    steps = [d for d in (tree_depth(ep) for ep in episodes) if d is not None]
    rounds = [r for r in (retrieval_rounds(ep) for ep in episodes) if r is not None]
    leaf_status = Counter(leaf.status for leaf in (primary_leaf(ep) for ep in episodes) if leaf is not None)
    out: dict[str, Any] = {
        "episodes": len(episodes),
        "episode_status": dict(sorted(Counter(ep.status for ep in episodes).items())),
        "leaf_status": dict(sorted(leaf_status.items())),
        "depth": distribution(depths),
        "tree_depth": distribution(steps),
        "retrieval_rounds": distribution(rounds),
        "invalid_actions": invalid_action_stats(episodes),
        "actions": action_kinds(episodes),
        "penalties": penalty_stats(episodes),
        "answer_info": answer_info_stats(episodes),
        "per_question": cost_per_question(episodes),
        "latency_seconds": latency_stats(episodes),
        "truncation": truncation_stats(episodes),
    }
    strategies = strategy_stats(episodes)
    if strategies is not None:
        out["strategy"] = strategies
        out["strategy_excluded"] = strategy_excluded(episodes)
    return out
