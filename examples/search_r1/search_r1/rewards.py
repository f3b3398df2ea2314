"""A format reward for Search-R1: the outcome reward, plus a share for ending in the `<answer>` format.

Search-R1's reward is the final answer's exact match alone. Its authors' follow-up study of the design
choices (Jin et al., 2025, arXiv:2505.15117, "An Empirical Study on Reinforcement Learning for
Reasoning-Search Interleaved LLM Agents") found that a format reward speeds and improves learning: a reply
in the format that answers wrongly still earns lambda_f, a correct one earns 1. A policy too small to follow
the tags from the prompt alone needs it most: sampled at temperature 1, untrained SmolLM2-135M ended 13 of
64 training episodes with an `<answer>` tag and every one of those scored F1 0, so an answer-only reward was 0
for every sample of every group and a group estimator had nothing to compare (docs/results.md, issue 22).

Here "in the format" means the episode ended with the policy's own `<answer>` (`Answer.info["stop"]`), and
the answer's metric is the run's `--ppo.reward` (em, f1, ...): an answered episode earns
lambda_f + (1 - lambda_f) x metric, any other 0. The registered `outcome` credit then gives every policy act
of a path its answer's reward (the mean over the leaves below an act, where a rollout forks).

    ragteam train ppo --recipe examples/search_r1/search-r1.yaml --ppo.credit search_r1_format ...

The same shaping over the exact match is also a registered *reward*, `search_r1_format_em`: what one answer is
worth, apart from credit, so it trains under any credit (`--ppo.reward search_r1_format_em` with the recipe's
`outcome` credit trains as `--ppo.credit search_r1_format --ppo.reward em` does), scores an evaluation
(`ragteam eval --reward search_r1_format_em`, `ragteam compare --metrics search_r1_format_em`) and is recorded on
the answers of the rollouts a run keeps (`--save-rollouts-every N`).
"""

from __future__ import annotations

from ragteam import get_credit, register_credit, register_reward

FORMAT_SHARE = 0.2
"""lambda_f: what an answer in the format earns however wrong it is (our choice, set before any run)."""


def shaped(leaf, reward) -> float:
    """The reward of one answer leaf: lambda_f + (1 - lambda_f) x its metric when the policy answered in the
    format and the leaf is ok, else 0."""
    if leaf.status != "ok" or leaf.info.get("stop") != "answer":
        return 0.0
    metric = reward(leaf) if callable(reward) else float(leaf.rewards[reward])  # a misspelt metric fails
    return FORMAT_SHARE + (1.0 - FORMAT_SHARE) * metric


@register_reward("search_r1_format_em")
def format_em(leaf, question) -> float:
    """The reward of an answer leaf: lambda_f + (1 - lambda_f) x its exact match (Search-R1's metric) when the
    policy answered in the format, else 0."""
    return shaped(leaf, "em")


@register_credit("search_r1_format")
def format_outcome(episode, reward) -> dict[int, float]:
    """`outcome` credit over the `shaped` leaf reward: each policy act gets the mean over the answer leaves
    below it (acts with none get no entry)."""
    return get_credit("outcome")(episode, lambda leaf: shaped(leaf, reward))
