"""The one config of `ragteam collect sft|process`, and how it becomes the eval's `TeamConfig`.

Collect runs a workflow like `ragteam eval` does (same `--llm.*`, `--retriever.*`, `--rollout.*`, workflow
flags, `--data`, `--limit/--offset`, resumable `--out`), with three differences: the policy (`--policy.*`) is
the teacher whose replies become rows (default: the packaged SmolLM2, i.e. self-distillation), sampling
defaults to temperature 1, and the fork schedule or keep-one-of-N is set by the command (`--tree`,
`--samples`, `--candidates`, `--ranker`) rather than by `--rollout.forks` / `--rollout.best-of.*`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ragteam.assemble.config import CORPUS_HELP, JudgeConfig, ProfiledConfig, TeamConfig
from ragteam.collect.accept import AcceptRule
from ragteam.depth import tree
from ragteam.llm.config import ModelConfig
from ragteam.llm.prm import PRMConfig
from ragteam.protocol import Workflow
from ragteam.retrieval.config import RetrieverConfig
from ragteam.rollout.config import RolloutConfig, registered_tree
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.registry import build_workflow, workflow_help, workflow_options

DEFAULT_N = 4
"""Candidate actions per act for `collect process` when --candidates is not given."""


class CollectConfig(ProfiledConfig):
    """Collect training rows: SFT by rejection sampling / MMOA-RAG heuristics, or ranked process pairs."""

    what: Literal["sft", "process"] = Field(
        description="sft: SFT rows (rejection sampling from trees; MMOA-RAG's heuristic labels for "
        "--workflow mmoa); process: preference pairs from ranked candidate actions (RAG-Gym)",
        json_schema_extra={"positional": True},
    )
    workflow: str = Field(..., description=workflow_help())
    data: str = Field(..., description="questions file (any reader format of ragteam.data.questions)")
    format: str | None = Field(None, description="reader format of --data (default: detected from the file)")
    out: str = Field(..., description="output folder: sft.jsonl / pairs.jsonl, episodes.jsonl, summary.json")
    limit: int | None = Field(None, ge=1, description="use at most this many questions")
    offset: int = Field(0, ge=0, description="skip this many questions first")
    skip_bad: bool = Field(False, description="skip malformed records of --data instead of stopping")
    overwrite: bool = Field(False, description="discard the episodes already in --out instead of resuming")
    progress: bool = Field(True, description="show a progress bar")

    policy: ModelConfig = Field(
        default_factory=ModelConfig,
        description="the policy sampled, the teacher whose replies become rows (default: the packaged "
        "SmolLM2, the policy itself: self-distillation)",
    )
    llm: ModelConfig = Field(default_factory=ModelConfig, description="the fixed LLM server (as in eval)")
    retriever: RetrieverConfig = Field(
        default_factory=RetrieverConfig,
        description="the retriever and its index: --retriever.index DIR, --retriever.url URL, or the one "
        "--corpus builds",
    )
    corpus: str = Field("distractor", description=CORPUS_HELP)
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(temperature=1.0),
        description="decoding, seeds and budgets (temperature 1 by default here); forks and keep-one-of-N "
        "are set by --tree/--samples/--candidates/--ranker",
    )
    prm: PRMConfig = Field(default_factory=PRMConfig, description="the process reward model of --ranker prm")
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig, description="the judge endpoint of --accept judge"
    )

    accept: str = Field(
        "cover_em",
        description="when an answer is correct: a metric (cover_em, em: value 1), metric>=x (f1>=0.5) or "
        "judge (needs --judge.base-url)",
    )
    samples: int = Field(
        4, ge=1, le=64, description="sft: solutions per question (--tree samples) or rewrites (mmoa)"
    )
    tree: str | None = Field(
        None,
        description="sft: a workflow's own tree rollout, by the workflow's name (c3po = C-3PO's: the router's "
        "three strategies, then 2 samples per act up to depth 4); samples = --samples independent solutions; "
        "default: the workflow's own tree when its package registers one (c3po), else samples",
    )
    candidates: int | None = Field(  # type: ignore[assignment]
        None,
        ge=1,
        le=50,
        description=f"process: N candidate actions per act (default {DEFAULT_N}); sft --workflow mmoa: the "
        "Selector's K candidates (MMOA-RAG's --candidates, default 10)",
    )
    ranker: Literal["llm", "rollout", "prm", "random", "outcome"] = Field(
        "llm",
        description="process: who ranks the candidates (RAG-Gym's Table 4 sources): llm (the LLM server with "
        "Fig. 10's criteria, JSON ranked_indices), rollout (mean reward of Monte Carlo rollouts), prm "
        "(--prm.model), random (seeded uniform scores: the random PRM), outcome (a candidate's own "
        "outcome: its answer's reward when it ends the episode, else 0: data for an outcome reward model)",
    )
    keep_invalid: bool = Field(
        False,
        description="keep replies that did not parse (the workflow fell back): as SFT rows, and as the chosen "
        "side of process pairs; default: drop (a rejected reply that did not parse still makes pairs)",
    )
    relabel_invalid: bool = Field(
        False,
        description="sft: a reply that did not parse becomes a row whose target is the canonical reply of "
        "the action the workflow took instead (roles that declare `write`: C-3PO's); default: drop",
    )
    min_overlap: int = Field(
        1,
        ge=1,
        description="mmoa: a candidate is a Selector label when it shares this many content words with the "
        "question and gold answer (the paper: 1) or contains the gold answer",
    )

    @model_validator(mode="before")
    @classmethod
    def _sampling_default(cls, data: Any) -> Any:
        """Temperature 1 unless given, also when other --rollout.* flags are (they build `rollout` anew)."""
        if isinstance(data, dict) and isinstance(data.get("rollout"), dict):
            data = {**data, "rollout": {"temperature": 1.0, **data["rollout"]}}
        return data

    @field_validator("accept")
    @classmethod
    def _accept(cls, value: str) -> str:
        return str(AcceptRule.parse(value))

    @field_validator("tree")
    @classmethod
    def _tree(cls, value: str | None) -> str | None:
        if value is not None and value != "samples":
            registered_tree(value)  # a ValueError naming the registered trees
        return value

    # ------------------------------------------------------------------ derived settings

    def _declares_labelling(self) -> bool:
        """Whether `collect sft` rolls out a labelling workflow the team declares (`sft_labelling(options)`,
        e.g. MMOA-RAG's heuristic labels) instead of sampling the team's own solutions."""
        if self.what != "sft":
            return False
        # the team is built only to read what it declares
        return hasattr(build_workflow(self.workflow, self._options(labelling=False)), "sft_labelling")

    def _options(self, labelling: bool) -> WorkflowConfig:
        """The workflow's options from this collection's fields. Collect's own `--candidates` (N candidate
        actions of `collect process`) is the team's `candidates` (MMOA-RAG's K) only for a labelling
        rollout's SFT; otherwise the team keeps its default K."""
        options = workflow_options(self.workflow)
        fields = {
            name: getattr(self, name) for name in options.model_fields if name in type(self).model_fields
        }
        if "candidates" in options.model_fields:
            fields["candidates"] = (self.candidates if labelling else None) or options.model_fields[
                "candidates"
            ].default
        return options(**fields)

    def labelling(self, options: WorkflowConfig | None = None) -> Workflow | None:
        """The labelling workflow the team declares for `collect sft`, over `options` (default: this
        collection's workflow options); None when it declares none, and for `collect process`."""
        if not self._declares_labelling():
            return None
        team = build_workflow(self.workflow, self.workflow_config())
        return team.sft_labelling(options if options is not None else self.workflow_config())

    @property
    def mode(self) -> str:
        """`sft` (rejection sampling), `process`, or the `collect_mode` of the team's labelling workflow
        (`mmoa`: MMOA-RAG's heuristic SFT data)."""
        labelling = self.labelling()
        return self.what if labelling is None else labelling.collect_mode

    @property
    def labelled(self) -> bool:
        """Whether rows come from a labelling workflow's heuristics (no answer is accepted or judged)."""
        return self.mode not in ("sft", "process")

    @property
    def tree_kind(self) -> str:
        """`samples`, or the workflow whose registered tree rollout forks (`--tree`; default: the
        workflow's own, when its package registers one)."""
        return self.tree or (self.workflow if tree(self.workflow) is not None else "samples")

    @property
    def n_candidates(self) -> int:
        return self.candidates or DEFAULT_N

    @property
    def teacher_name(self) -> str:
        t = self.policy
        name = t.model if t.backend == "local" else f"{t.base_url}/{t.model}"
        return name + (f"+lora:{t.lora}" if t.lora else "")

    def workflow_config(self) -> WorkflowConfig:
        """The workflow options (its own options class); MMOA-RAG's K is --candidates only for a labelling
        rollout's SFT (`_options`)."""
        return self._options(labelling=self._declares_labelling())

    def resolved_rollout(self) -> RolloutConfig:
        """The rollout settings with the command's forks or keep-one-of-N (ValueError if they clash)."""
        r = self.rollout
        if r.forks:
            raise ValueError(
                "collect sets the fork schedule itself (--tree, --samples, --candidates): "
                "drop --rollout.forks"
            )
        data = r.model_dump()
        if self.mode == "process":
            data["best_of"] = {**data["best_of"], "n": self.n_candidates, "scorer": self.ranker}
            many = self.n_candidates > 1
        elif (labelling := self.labelling()) is not None:
            data["forks"], many = labelling.sft_forks(self.samples)
        elif self.tree_kind != "samples":
            own = registered_tree(self.tree_kind)
            if self.workflow != own.name:
                raise ValueError(
                    f"--tree {own.name} forks {own.about}; workflow {self.workflow!r} has none: "
                    "use --tree samples"
                )
            data.update(own.fields)
            many = True
        else:
            data["forks"] = [self.samples, 1]
            many = self.samples > 1
        if many and r.temperature == 0:
            raise ValueError(
                "collect samples several replies per act: --rollout.temperature 0 would make them identical"
            )
        return RolloutConfig.model_validate(data)

    def run_config(self) -> TeamConfig:
        """The eval's TeamConfig of this collection: the policy sampled is the teacher."""
        return TeamConfig(
            **self.workflow_config().model_dump(),
            workflow=self.workflow,
            policy=self.policy,
            llm=self.llm,
            retriever=self.retriever,
            rollout=self.resolved_rollout(),
            prm=self.prm,
        )
