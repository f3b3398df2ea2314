"""The configs every entry point assembles a team from: `TeamConfig` (a workflow, its models, retriever and
rollout settings) and `JudgeConfig` (an optional LLM judge endpoint).

`TeamConfig` names the workflow and holds its options (the `WorkflowConfig` fields, flat: `--topk`,
`--variant`, `--strategy`...), the policy and the LLM server (configured independently: `--policy.*`,
`--llm.*`), the retriever (`--retriever.*`), the rollout settings (`--rollout.*`) and the process reward model that scores
keep-one-of-N candidates (`--prm.*`). `ragteam ask`, `eval`, `serve team`, `collect` and `train ppo` extend it
with their own fields; `assemble.build.build_team` turns it into live objects.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Self

from pydantic import Field

from ragteam.config import Config
from ragteam.llm.config import ModelConfig
from ragteam.llm.prm import PRMConfig
from ragteam.precedence import Layer, only_fields
from ragteam.retrieval.config import RetrieverConfig
from ragteam.rollout.config import RolloutConfig
from ragteam.workflows import profiles
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.registry import with_options, workflow_help, workflow_options

CORPUS_HELP = (
    "what to retrieve from (ragteam.assemble.corpus): distractor (the run's questions' own paragraphs, gold "
    "included; --profile small), pooled (every paragraph of the question file(s): the papers' setting, "
    "--profile paper and every train ppo recipe), pooled+FILE[+FILE] (joined with passage or benchmark files, "
    "e.g. a Wikipedia sample), pooled:DIR (every benchmark and corpus file of a folder), an index folder, or "
    "a passage FILE ({id, title, text} / FlashRAG {id, contents}); --retriever.index or --retriever.url "
    "win over a profile's corpus"
)
"""The help of `--corpus`, one option spelled one way on every command that retrieves."""

DEMO_DATA = "hotpotqa-dev-50.jsonl"
"""The bundled demo questions (ragteam/demo/), whose pooled paragraphs are `ask`'s default corpus."""


class ProfiledConfig(WorkflowConfig):
    """A config that names its workflow (a `workflow` field: every command's that runs one) and so takes the
    rows of its profile (`--profile`) that the workflow states, as the layer under the user's values."""

    @classmethod
    def layers(cls, given: dict[str, Any]) -> list[Layer]:
        """The profile's values for the workflow the config names (`given`'s, else the field's default), for
        the fields this class has (`ragteam.config.resolve` puts them under the user's values)."""
        profile = given.get("profile", cls.model_fields["profile"].default)
        workflow = given.get("workflow", cls.model_fields["workflow"].default)
        if profile not in profiles.PROFILES or not isinstance(workflow, str):
            return []  # validation reports the bad value
        return [("profile", only_fields(cls, profiles.values(profile, workflow), _fillable(cls)))]


def _fillable(cls: type[Config]) -> dict[str, Any]:
    """The fields a profile may fill: all of `cls`'s, except workflow options a subclass redefines with
    another default (collect's `--candidates`, which means N candidates there, not MMOA-RAG's K)."""
    base = WorkflowConfig.model_fields
    return {
        name: info
        for name, info in cls.model_fields.items()
        if name not in base or info.default == base[name].default
    }


class TeamConfig(ProfiledConfig):
    """A workflow with its options, the policy, the LLM server, the retriever and the rollout settings."""

    workflow: str = Field("c3po", description=workflow_help())
    policy: ModelConfig = Field(
        default_factory=ModelConfig, description="the trainable policy that plays the workflow's roles"
    )
    llm: ModelConfig = Field(
        default_factory=ModelConfig, description="the fixed LLM server that writes answers"
    )
    retriever: RetrieverConfig = Field(
        default_factory=RetrieverConfig,
        description="the retriever and its index: --retriever.index DIR, --retriever.url URL, or the one "
        "--corpus builds",
    )
    corpus: str = Field("distractor", description=CORPUS_HELP)
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig, description="decoding, seeds, forks, keep-one-of-N and budgets"
    )
    prm: PRMConfig = Field(
        default_factory=PRMConfig,
        description="the process reward model that scores candidates (--rollout.best-of.*)",
    )

    @classmethod
    def for_workflow(cls, name: str) -> type[Self]:
        """This config class with the options team `name` declares of its own (its Workflow's `Options`), as
        flat fields: `EvalConfig.for_workflow("search-r1")(workflow="search-r1", max_turns=2, ...)`, what the
        command builds from `--workflow search-r1 --max-turns 2`."""
        return with_options(cls, name)

    def workflow_config(self) -> WorkflowConfig:
        """The workflow options alone, as the workflow's constructor takes them (its own options class; those
        this config lacks, built without `for_workflow`, at their defaults)."""
        options = workflow_options(self.workflow)
        return options(
            **{name: getattr(self, name) for name in options.model_fields if name in type(self).model_fields}
        )


class JudgeConfig(Config):
    """An OpenAI-compatible endpoint that judges answers; the judge runs only when `base_url` is given."""

    base_url: str | None = Field(None, description="judge server URL, e.g. http://127.0.0.1:8000/v1")
    model: str = Field("default", description="the judge's served model name")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the judge's API key")
    timeout: float = Field(120.0, gt=0, description="seconds per judge request")

    def chat_model(self):
        """The judge's OpenAI-compatible chat model (ValueError when no endpoint is configured)."""
        from ragteam.llm.factory import build_chat_model

        if not self.base_url:
            raise ValueError("the LLM judge needs an endpoint: pass --judge.base-url URL")
        return build_chat_model(
            ModelConfig(
                backend="openai",
                base_url=self.base_url,
                model=self.model,
                api_key_env=self.api_key_env,
                timeout=self.timeout,
            )
        )


def demo_data_path() -> Path | None:
    """The bundled demo question file, if this install has it."""
    path = Path(str(resources.files("ragteam") / "demo" / DEMO_DATA))
    return path if path.is_file() else None
