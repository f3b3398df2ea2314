"""The configs every entry point assembles a team from: `TeamConfig` (a workflow, its models, retriever and
rollout settings) and `JudgeConfig` (an optional LLM judge endpoint).

`TeamConfig` names the workflow and holds its options, flat: those every workflow reads (`WorkflowConfig`:
`--profile`, `--topk`) and those of the workflow it names (its Workflow's `Options`: `--variant` for mmoa,
`--strategy` for c3po; `ProfiledConfig.for_values`), the policy and the LLM server (configured independently: `--policy.*`,
`--llm.*`), the retriever (`--retriever.*`), the rollout settings (`--rollout.*`) and the process reward model that scores
keep-one-of-N candidates (`--prm.*`). `ragteam ask`, `eval`, `serve team`, `collect` and `train ppo` extend it
with their own fields; `assemble.build.build_team` turns it into live objects.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Self

from pydantic import Field

from ragteam.config import LAYERED, Config
from ragteam.llm.config import ModelConfig
from ragteam.llm.prm import PRMConfig
from ragteam.precedence import Layer, layered, only_fields
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
    """A config that names its workflow (a `workflow` field: every command's that runs one), holds the options
    that workflow declares and takes the rows of its profile (`--profile`) that the workflow states, as the
    layer under the user's values.

    The class follows the workflow: `TeamConfig(workflow="mmoa", candidates=4)`, `PPOConfig(recipe="mmoa")`
    and `resolve(EvalConfig, ...)` build `cls.for_workflow(name)` (the class with MMOA-RAG's `MMOAOptions`
    fields), for the workflow named by the arguments, the file, the flags or the recipe; another workflow's
    options are unknown keys there."""

    def __new__(cls, *args: Any, **data: Any) -> Self:
        """An instance of the class of the workflow the arguments name (`for_values`), then validated by it."""
        return super().__new__(cls._class_for(data) if data else cls)

    @classmethod
    def _class_for(cls, data: dict[str, Any]) -> type[Self]:
        """The class of the workflow `data` names, itself or through its layers (`PPOConfig`'s recipe)."""
        try:
            return cls.for_values(layered(cls, [("code", data)])[0])
        except ValueError:  # a recipe that does not read: validating reports it
            return cls

    @classmethod
    def for_values(cls, values: dict[str, Any]) -> type[Self]:
        """This class with the options of the workflow `values` names (its default otherwise); `cls` when
        `values` names none that reads (validation reports it) or `cls` holds a workflow's options already."""
        field = cls.model_fields.get("workflow")
        workflow = values.get("workflow", field.default if field is not None else None)
        return cls.for_workflow(workflow) if isinstance(workflow, str) else cls

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        """`obj` validated by the class of the workflow it names (`for_values`): what `resolve` calls."""
        target = cls._class_for(obj) if isinstance(obj, dict) else cls
        if target is cls:
            return super().model_validate(obj, **kwargs)
        context = kwargs.pop("context", None) or {}
        if context.get(LAYERED) is cls:  # `resolve` merged the layers already, for this workflow's fields
            context = {**context, LAYERED: target}
        return target.model_validate(obj, context=context, **kwargs)

    @classmethod
    def for_workflow(cls, name: str) -> type[Self]:
        """This config class with the options team `name` declares (its Workflow's `Options`), as flat fields:
        what the command builds from `--workflow mmoa`, so `--candidates` is one of its flags."""
        return with_options(cls, name)

    @classmethod
    def layers(cls, given: dict[str, Any]) -> list[Layer]:
        """The profile's values for the workflow the config names (`given`'s, else the field's default), for
        the fields this class has (`ragteam.config.resolve` puts them under the user's values)."""
        profile = given.get("profile", cls.model_fields["profile"].default)
        workflow = given.get("workflow", cls.model_fields["workflow"].default)
        if profile not in profiles.PROFILES or not isinstance(workflow, str):
            return []  # validation reports the bad value
        target = cls.for_values(given)  # the fields of the workflow's options are filled too
        fillable = _fillable(target, workflow_options(workflow))
        return [("profile", only_fields(target, profiles.values(profile, workflow), fillable))]

    def workflow_config(self) -> WorkflowConfig:
        """The workflow options alone, as the workflow's constructor takes them (its own options class; those
        this config lacks at their defaults)."""
        options = workflow_options(self.workflow)
        return options(
            **{name: getattr(self, name) for name in options.model_fields if name in type(self).model_fields}
        )


def _fillable(cls: type[Config], options: type[WorkflowConfig]) -> dict[str, Any]:
    """The fields a profile may fill: all of `cls`'s, except workflow options `cls` redefines with another
    default (collect's `--candidates`, N candidate actions there, over MMOA-RAG's K)."""
    own = options.model_fields
    return {
        name: info
        for name, info in cls.model_fields.items()
        if name not in own or info.default == own[name].default
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
