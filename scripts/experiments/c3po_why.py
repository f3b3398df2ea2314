"""Why two C-3PO proxies answer alike held out: where their greedy episodes part, and where the router's mass sits.

Greedy evaluation shows only each act's argmax, so a trained proxy whose probabilities moved but whose argmaxes
did not looks untrained. This script measures both, from a run folder of `scripts/experiments/matrix.sh`'s c3po
leg (`eval-<arm>/episodes.jsonl[.gz]` and the `<arm>` model folders):

1. For each pair of evals, the role of the first policy act whose text differs, per question.
2. For each proxy, the probability of each route ("[No Retrieval]", "[Retrieval]", "[Planning]" as the first
   tokens of the router's reply) on the first N held-out router prompts of the first arm's eval, float32.

    python scripts/experiments/c3po_why.py runs/matrix-cpu/c3po --arms sft tree chain --prompts 100
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
from pathlib import Path

from ragteam.rollout.traces import read_episodes
from ragteam.rollout.tree import Episode

ROUTES = ("[No Retrieval]", "[Retrieval]", "[Planning]")


def episodes(run: Path, arm: str) -> dict[str, Episode]:
    """The arm's eval episodes by question id (plain or gzipped, as matrix.sh leaves them)."""
    path = run / f"eval-{arm}" / "episodes.jsonl"
    return {e.id: e for e in read_episodes(path if path.is_file() else f"{path}.gz")}


def first_difference(a: dict[str, Episode], b: dict[str, Episode]) -> collections.Counter:
    """Per question: the role of the first policy act that differs in text ("same" when none does)."""
    where: collections.Counter = collections.Counter()
    for qid, ea in a.items():
        pa, pb = ([(n.role, n.completion.text) for n in e.policy_nodes()] for e in (ea, b[qid]))
        diff = next((ra for (ra, ta), (rb, tb) in zip(pa, pb) if (ra, ta) != (rb, tb)), None)
        where[diff or ("length" if len(pa) != len(pb) else "same")] += 1
    return where


def route_probabilities(model_dir: Path, prompts: list[list[int]]) -> dict[str, list[float]]:
    """P(route) as the first tokens of the reply to each prompt, scored by the trainers' own
    `completion_logprobs` (one batch of the three routes per prompt)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.llm.logprobs import completion_logprobs

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = [tok(r, add_special_tokens=False)["input_ids"] for r in ROUTES]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    probs: dict[str, list[float]] = {r: [] for r in ROUTES}
    with torch.no_grad():
        for prompt in prompts:
            logp, _ = completion_logprobs(model, [prompt] * len(ROUTES), ids, pad)
            for route, lp in zip(ROUTES, logp.sum(-1).tolist()):
                probs[route].append(math.exp(lp))  # float64: a random model's P can be 1e-40
    return probs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="the leg's folder, e.g. runs/matrix-cpu/c3po")
    ap.add_argument("--arms", nargs="+", default=["sft", "tree", "chain"])
    ap.add_argument("--prompts", type=int, default=100, help="router prompts scored per proxy")
    args = ap.parse_args()
    evals = {arm: episodes(args.run, arm) for arm in args.arms}
    for x, y in itertools.combinations(args.arms, 2):
        print(
            f"{x} vs {y}: first differing policy act by role: {json.dumps(first_difference(evals[x], evals[y]))}"
        )
    first = list(evals[args.arms[0]].values())[: args.prompts]
    prompts = [next(n for n in e.policy_nodes() if n.role == "router").completion.prompt_ids for e in first]
    print(f"\n| proxy | {' | '.join(f'mean P {r}' for r in ROUTES)} | argmax route (of {len(prompts)}) |")
    print("|---|" + "---:|" * (len(ROUTES) + 1))
    for arm in args.arms:
        p = route_probabilities(args.run / arm, prompts)
        top = collections.Counter(max(ROUTES, key=lambda r: p[r][i]) for i in range(len(prompts)))
        means = " | ".join(f"{sum(p[r]) / len(p[r]):.3g}" for r in ROUTES)
        print(f"| {arm} | {means} | {', '.join(f'{r} {top[r]}' for r in ROUTES if top[r])} |", flush=True)


if __name__ == "__main__":
    main()
