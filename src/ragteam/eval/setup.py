"""What `ragteam ask` and `ragteam eval` share: one run config and the builder of its live parts.

`RunConfig` names the workflow and holds its options (the `WorkflowConfig` fields, flat: `--topk`,
`--variant`, `--strategy`...), the policy and the LLM server (configured independently: `--policy.*`,
`--llm.*`), the retriever (`--retriever.*`) and the rollout settings (`--rollout.*`). `build_run` turns it
into a workflow, models, a retriever and an engine. When the policy and the LLM server are configured alike,
one model object plays both (one copy of the weights in memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import Field

from ragteam.llm.base import ChatModel
from ragteam.llm.config import ModelConfig
from ragteam.llm.critic import CriticConfig
from ragteam.protocol import Workflow
from ragteam.retrieval.base import Retriever
from ragteam.retrieval.config import RetrieverConfig
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.workflows.config import WorkflowConfig

DEMO_DATA = "hotpotqa-dev-50.jsonl"
"""The bundled demo questions (ragteam/demo/), whose pooled paragraphs are `ask`'s default corpus."""


class RunConfig(WorkflowConfig):
    """A workflow with its options, the policy, the LLM server, the retriever and the rollout settings."""

    workflow: str = Field(
        "c3po",
        description="workflow: direct, standard-rag, c3po, mmoa, gym:direct, gym:cot, gym:rag, gym:react, "
        "gym:search-o1, gym:re2search",
    )
    policy: ModelConfig = Field(
        default_factory=ModelConfig, description="the trainable policy that plays the workflow's roles"
    )
    llm: ModelConfig = Field(
        default_factory=ModelConfig, description="the fixed LLM server that writes answers"
    )
    retriever: RetrieverConfig = Field(
        default_factory=RetrieverConfig,
        description="the corpus: --retriever.index DIR, --retriever.url URL, or the dataset's own paragraphs",
    )
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig, description="decoding, seeds, forks, keep-one-of-N and budgets"
    )
    critic: CriticConfig = Field(
        default_factory=CriticConfig, description="the critic that scores candidates (--rollout.best-of.*)"
    )

    def workflow_config(self) -> WorkflowConfig:
        """The workflow options alone, as the workflow's constructor takes them."""
        return WorkflowConfig(**{name: getattr(self, name) for name in WorkflowConfig.model_fields})


@dataclass
class RunParts:
    """The live objects of a run; `policy` and `llm` are the same object when configured alike."""

    workflow: Workflow
    policy: ChatModel | None
    llm: ChatModel | None
    retriever: Retriever | None
    engine: Engine

    @property
    def shared_model(self) -> bool:
        return self.policy is not None and self.policy is self.llm


def build_workflow(cfg: RunConfig) -> Workflow:
    """The workflow named by `cfg.workflow` (ValueError listing the names if unknown)."""
    from ragteam.workflows.registry import build_workflow as build

    return build(cfg.workflow, cfg.workflow_config())


def build_models(cfg: RunConfig, need_policy: bool = True) -> tuple[ChatModel | None, ChatModel]:
    """(policy, llm): one shared object when both configs are equal, the policy None when not needed."""
    from ragteam.llm.factory import build_chat_model

    llm = build_chat_model(cfg.llm)
    if not need_policy:
        return None, llm
    if cfg.policy == cfg.llm:  # a local model serializes its own calls, so sharing it is safe
        return llm, llm
    return build_chat_model(cfg.policy), llm


def demo_data_path() -> Path | None:
    """The bundled demo question file, if this install has it."""
    path = Path(str(resources.files("ragteam") / "demo" / DEMO_DATA))
    return path if path.is_file() else None


def needs_retriever(cfg: RunConfig) -> bool:
    """Whether the configured workflow may search (as it declares: C-3PO forced to answer directly does not)."""
    return "retriever" in build_workflow(cfg).needs


def build_retriever(cfg: RunConfig, data: str | None = None, fmt: str | None = None) -> Retriever:
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


def build_run(cfg: RunConfig, data: str | None = None, fmt: str | None = None) -> RunParts:
    """Workflow, models, retriever and engine for `cfg`; `data` is the dataset whose paragraphs are the
    default corpus. The workflow is built first, so a wrong name fails before any model loads."""
    from ragteam.rollout.select import build_scorer

    workflow = build_workflow(cfg)
    retriever = build_retriever(cfg, data, fmt) if "retriever" in workflow.needs else None
    policy, llm = build_models(cfg, need_policy="policy" in workflow.needs)
    critic = None
    if cfg.critic.model is not None:
        from ragteam.llm.critic import CriticModel

        critic = CriticModel.from_config(cfg.critic)
    scorer = build_scorer(cfg.rollout, policy, llm, retriever, critic)
    engine = Engine(policy, llm, retriever, cfg.rollout, scorer=scorer)
    return RunParts(workflow=workflow, policy=policy, llm=llm, retriever=retriever, engine=engine)
