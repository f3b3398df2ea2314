"""Turning a `TeamConfig` into live objects: the workflow, the models, the retriever, the keep-one-of-N
scorer and the engine. Every entry point (`ask`, `eval`, `serve team`, `collect`, `train ppo`) builds here,
so a setting means the same thing in each.

Only what the workflow declares it needs is built (`Workflow.needs`), the workflow first, so a wrong name
fails before any model loads. When the policy and the LLM server are configured alike, one model object
plays both (one copy of the weights in memory), unless the caller brings its own policy (a trainer: the
policy is the model being trained, and the LLM stays fixed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragteam.assemble.config import TeamConfig
from ragteam.llm.base import ChatModel
from ragteam.protocol import Workflow
from ragteam.retrieval.base import Retriever
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.scorers import (
    LLMRankScorer,
    OutcomeScorer,
    PRMScorer,
    RandomScorer,
    RolloutScorer,
    Scorer,
)


@dataclass
class Team:
    """The live objects of a team; `policy` and `llm` are the same object when configured alike."""

    workflow: Workflow
    policy: ChatModel | None
    llm: ChatModel | None
    retriever: Retriever | None
    engine: Engine

    @property
    def shared_model(self) -> bool:
        return self.policy is not None and self.policy is self.llm


def build_workflow(cfg: TeamConfig) -> Workflow:
    """The workflow named by `cfg.workflow` (ValueError listing the names if unknown)."""
    from ragteam.workflows.registry import build_workflow as build

    return build(cfg.workflow, cfg.workflow_config())


def build_models(
    cfg: TeamConfig, need_policy: bool = True, need_llm: bool = True
) -> tuple[ChatModel | None, ChatModel | None]:
    """(policy, llm): one shared object when both configs are equal, each None when not needed (MMOA-RAG's
    team is all policy: loading the default LLM beside it would cost its load time and memory for nothing)."""
    from ragteam.llm.factory import build_chat_model

    llm = build_chat_model(cfg.llm) if need_llm else None
    if not need_policy:
        return None, llm
    if llm is not None and cfg.policy == cfg.llm:  # a local model serializes its own calls: sharing is safe
        return llm, llm
    return build_chat_model(cfg.policy), llm


def needs_retriever(cfg: TeamConfig) -> bool:
    """Whether the configured workflow may search (as it declares: C-3PO forced to answer directly does not)."""
    return "retriever" in build_workflow(cfg).needs


def build_retriever(cfg: TeamConfig, data: str | None = None, fmt: str | None = None) -> Retriever:
    """The retriever: an index, a remote URL, or the pooled paragraphs of `data` (built once, cached)."""
    from ragteam.retrieval.factory import open_retriever

    r = cfg.retriever
    if r.index is None and r.url is None and data is None:
        raise ValueError(
            f"workflow {cfg.workflow!r} retrieves documents but no corpus is given: pass --retriever.index DIR "
            "(built by `ragteam index`), --retriever.url URL (a /retrieve server) or --data FILE (a dataset "
            "whose records carry paragraphs)"
        )
    return open_retriever(r, data=data, fmt=fmt)


def build_scorer(
    config: RolloutConfig, policy: Any, llm: Any, retriever: Any, prm: Any = None
) -> Scorer | None:
    """The keep-one-of-N scorer `config.best_of` asks for (None when keep-one-of-N is off).

    `config` is the run's RolloutConfig; the rollout scorer gets its own engine over the same parts, with
    forks and keep-one-of-N off; the random scorer is seeded with `config.seed`."""
    best = config.best_of
    if best.n <= 1:
        return None
    if best.scorer == "prm":
        if prm is None:
            raise ValueError("best_of.scorer=prm needs a process reward model: pass --prm.model DIR")
        return PRMScorer(prm)
    if best.scorer == "llm":
        if llm is None:
            raise ValueError("best_of.scorer=llm needs the LLM server (--llm.*)")
        return LLMRankScorer(llm)
    if best.scorer == "random":
        return RandomScorer(config.seed)
    if best.scorer == "outcome":
        return OutcomeScorer(best.metric)
    probe = config.model_copy(update={"forks": [], "best_of": type(best)()})
    return RolloutScorer(Engine(policy, llm, retriever, probe), rollouts=best.rollouts, metric=best.metric)


def build_team(
    cfg: TeamConfig, data: str | None = None, fmt: str | None = None, policy: ChatModel | None = None
) -> Team:
    """Workflow, models, retriever, scorer and engine for `cfg`; `data` is the dataset whose paragraphs are
    the default corpus. `policy`: a policy the caller built (a trainer's model, in process or served); the
    LLM server is then a model of its own, built only when the workflow asks it, never that policy."""
    workflow = build_workflow(cfg)
    retriever = build_retriever(cfg, data, fmt) if "retriever" in workflow.needs else None
    # the LLM answers a workflow's LLM role, or ranks keep-one-of-N candidates (RAG-Gym Fig. 10)
    need_llm = "llm" in workflow.needs or cfg.rollout.best_of.scorer == "llm"
    if policy is None:
        policy, llm = build_models(cfg, "policy" in workflow.needs, need_llm)
    else:
        from ragteam.llm.factory import build_chat_model

        llm = build_chat_model(cfg.llm) if need_llm else None
    prm = None
    best = cfg.rollout.best_of
    if cfg.prm.model is not None and best.n > 1 and best.scorer == "prm":  # only where it scores
        from ragteam.llm.prm import ProcessRewardModel

        prm = ProcessRewardModel.from_config(cfg.prm)
    engine = build_engine(cfg, policy, llm, retriever, prm)
    return Team(workflow=workflow, policy=policy, llm=llm, retriever=retriever, engine=engine)


def build_engine(cfg: TeamConfig, policy: Any, llm: Any, retriever: Any, prm: Any = None) -> Engine:
    """The engine over these parts with `cfg.rollout`, and the keep-one-of-N scorer it names."""
    scorer = build_scorer(cfg.rollout, policy, llm, retriever, prm)
    return Engine(policy, llm, retriever, cfg.rollout, scorer=scorer)
