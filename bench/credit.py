"""Two credit functions side by side on recorded episode trees: tree sizes per root strategy, and how far the
credits they give the same policy nodes differ.

    .venv/bin/python bench/credit.py runs/c3po-trees/episodes.jsonl --credits tree_mc tree_mean --reward cover_em

Why: C-3PO's eq. 5 (`tree_mc`) averages over every leaf below a node, so a branch that forked again counts more
leaves; `tree_mean` weighs each child once. On balanced trees they agree; on real trees, whose strategies end at
different depths (a direct answer is one leaf, a planning branch many), they do not, and this prints by how much,
per role and over all credited nodes.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

from ragteam.credit import get_credit
from ragteam.rollout.traces import read_episodes
from ragteam.rollout.tree import Episode


def root_strategy(episode: Episode, leaf_id: int) -> str:
    """The kind of the first policy act on the leaf's path (C-3PO: the router's strategy)."""
    for node in episode.path(leaf_id):
        if node.kind == "policy":
            return node.action.kind if node.action is not None else "?"
    return "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("episodes", type=Path, help="episodes.jsonl (from ragteam eval or collect)")
    p.add_argument("--credits", nargs=2, default=["tree_mc", "tree_mean"])
    p.add_argument("--reward", default="cover_em", help="the leaf metric credited")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    episodes = list(read_episodes(args.episodes))
    a, b = (get_credit(name) for name in args.credits)
    leaves_by: dict[str, list[int]] = defaultdict(list)
    policy_by: dict[str, list[int]] = defaultdict(list)
    diffs: dict[str, list[float]] = defaultdict(list)
    for ep in episodes:
        per_strategy: dict[str, set[int]] = defaultdict(set)
        for leaf in ep.leaves():
            strategy = root_strategy(ep, leaf.id)
            per_strategy[strategy].add(leaf.id)
            for node in ep.path(leaf.id):
                if node.kind == "policy":
                    per_strategy[f"{strategy}:policy"].add(node.id)
        for key, ids in per_strategy.items():
            (policy_by if key.endswith(":policy") else leaves_by)[key.removesuffix(":policy")].append(
                len(ids)
            )
        ca, cb = a(ep, args.reward), b(ep, args.reward)
        for node in ep.policy_nodes():
            if node.id in ca and node.id in cb:
                diffs[node.role].append(cb[node.id] - ca[node.id])
                diffs["all"].append(cb[node.id] - ca[node.id])

    out = {
        "trees": len(episodes),
        "sizes": {
            s: {"leaves": mean(leaves_by[s]), "policy_nodes": mean(policy_by[s]), "trees": len(leaves_by[s])}
            for s in sorted(leaves_by)
        },
        "difference": {
            role: {
                "nodes": len(d),
                "differing": sum(1 for x in d if abs(x) > 1e-9) / len(d),
                "mean_abs": mean(abs(x) for x in d),
                "max_abs": max(abs(x) for x in d),
                "mean": mean(d),
            }
            for role, d in sorted(diffs.items())
        },
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['trees']} trees; credit {args.credits[1]} - {args.credits[0]} on reward {args.reward}\n")
    print("| root strategy | trees | leaves per tree | policy nodes per tree |\n|---|---:|---:|---:|")
    for s, v in out["sizes"].items():
        print(f"| {s} | {v['trees']} | {v['leaves']:.1f} | {v['policy_nodes']:.1f} |")
    print("\n| role | credited nodes | differing | mean abs diff | max abs diff | mean diff |")
    print("|---|---:|---:|---:|---:|---:|")
    for role, v in out["difference"].items():
        print(
            f"| {role} | {v['nodes']} | {100 * v['differing']:.0f} % | {v['mean_abs']:.3f} | "
            f"{v['max_abs']:.3f} | {v['mean']:+.3f} |"
        )


if __name__ == "__main__":
    main()
