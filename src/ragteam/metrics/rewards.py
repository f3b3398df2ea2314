"""Rewards: what one answer is worth, by name (`get_reward("f1")`), apart from how credit spreads it.

A reward is any function `(leaf, question) -> float` of an answer leaf (the episode's answering act: its
`answer`, its `status`, the `rewards` the engine recorded, its `info`) and the question it answers (golds,
choices). It is registered by name, as a credit function or a team is, so a run picks one by name
(`--ppo.reward NAME`, `ragteam eval --reward NAME`), and a team from outside the package adds its own without
touching ragteam:

    from ragteam import register_reward

    @register_reward("short_f1")
    def short_f1(leaf, question) -> float:
        return leaf.rewards["f1"] if len((leaf.answer or "").split()) <= 5 else 0.0

or declares it in its package's entry points (group `ragteam.rewards`, `name = "package.module:fn"`), loaded on
first use. A credit function (`ragteam.credit`) never sees a name: it gets the reward bound to each
episode's question, a function of the leaf alone (`for_question`).

Built in: `f1`, `em`, `cover_em` (the answer metrics the engine records on every answered leaf,
`metrics.answer.score_answer`) and `judge` (the LLM judge's 1/0, which PPO puts on the leaves before credit,
one batched call per iteration). Each reads the leaf's recorded value; a failed or truncated leaf without it
is worth 0, an ok leaf without it is an error (a misspelt metric must not silently train on zeros).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, TypeAlias, overload

from ragteam.metrics.answer import score_answer
from ragteam.types import Question

__all__ = [
    "ENTRY_POINT_GROUP",
    "REWARDS",
    "RewardFn",
    "answer_rewards",
    "eval_reward_help",
    "for_question",
    "get_reward",
    "recorded",
    "register_reward",
    "reward_help",
    "reward_names",
]

RewardFn: TypeAlias = Callable[[Any, Question], float]
"""A reward: `(answer leaf, question) -> float`."""

REWARDS: dict[str, RewardFn] = {}
"""Registered rewards by name (iterate it for the known names)."""

ENTRY_POINT_GROUP = "ragteam.rewards"
"""The entry-point group an installed package declares its rewards in (name = "package.module:fn")."""


@overload
def register_reward(name: str) -> Callable[[RewardFn], RewardFn]: ...
@overload
def register_reward(name: str, fn: RewardFn) -> RewardFn: ...
def register_reward(name: str, fn: RewardFn | None = None) -> RewardFn | Callable[[RewardFn], RewardFn]:
    """Register a reward under `name`: a call, `register_reward("mine", fn)`, or a decorator,
    `@register_reward("mine")`; either returns the function. The same function registered again (its module
    imported a second time) replaces itself; another function under a taken name is an error."""

    def deco(fn: RewardFn) -> RewardFn:
        if not callable(fn):
            raise TypeError(f"reward {name!r}: a reward is a function (leaf, question) -> float")
        if name in REWARDS and _origin(REWARDS[name]) != _origin(fn):
            raise ValueError(f"reward {name!r} is already registered ({REWARDS[name].__qualname__})")
        REWARDS[name] = fn
        return fn

    return deco(fn) if fn is not None else deco


def _origin(fn: RewardFn) -> tuple[str, str]:
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def reward_names() -> list[str]:
    """Every reward name `get_reward` knows: the registered ones, then installed packages' (entry points)."""
    installed = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in REWARDS)
    return [*REWARDS, *installed]


def reward_help() -> str:
    """The description of an option naming a reward, its names read from the registry."""
    return (
        "the answer's reward (ragteam.metrics.rewards; register your own with ragteam.register_reward): "
        + ", ".join(reward_names())
    )


def eval_reward_help() -> str:
    """`ragteam eval --reward`'s description."""
    return (
        "also score every answer with this registered reward, beside EM / F1 / cover-EM (register your own "
        "with ragteam.register_reward): " + ", ".join(reward_names())
    )


def get_reward(name: str) -> RewardFn:
    """The reward registered as `name`, or an installed package's of that name (its entry point loaded);
    a ValueError naming the known ones otherwise."""
    if name not in REWARDS:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            register_reward(name, ep.load())
    try:
        return REWARDS[name]
    except KeyError:
        raise ValueError(
            f"unknown reward {name!r}; known: {', '.join(sorted(reward_names()))} (a reward registered in a "
            f"module is known once that module is imported, e.g. by naming its team; an installed package "
            f"declares it in the entry-point group {ENTRY_POINT_GROUP})"
        ) from None


def for_question(reward: RewardFn, question: Question) -> Callable[[Any], float]:
    """`reward` bound to `question`: the function of a leaf that a credit function is given."""
    return lambda leaf: reward(leaf, question)


def answer_rewards(question: Question, answer: str) -> dict[str, float]:
    """The answer metrics as the engine's `reward` hook takes them, `(question, answer) -> {metric: value}`:
    what every answered leaf records in `rewards` (the built-in rewards read them there)."""
    return score_answer(answer, question)


def recorded(metric: str) -> RewardFn:
    """The reward that reads `metric` from the leaf's recorded `rewards`: a failed or truncated leaf without
    it is worth 0; an ok leaf without it is a KeyError naming what it has."""

    def reward(leaf: Any, question: Question) -> float:
        if metric in leaf.rewards:
            return float(leaf.rewards[metric])
        if leaf.status != "ok":
            return 0.0
        raise KeyError(
            f"answer leaf {leaf.id} has no reward {metric!r}; it has: {sorted(leaf.rewards) or 'none'}"
        )

    reward.__qualname__ = f"recorded({metric!r})"
    return reward


for _metric in ("f1", "em", "cover_em", "judge"):
    register_reward(_metric, recorded(_metric))
