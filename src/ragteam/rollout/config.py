"""Settings of the rollout engine: decoding, the fork schedule, keep-one-of-N, and the per-episode budget.

The fork schedule is data: a list of `ForkRule`s, the first rule matching a policy act (by role and by the
depth t of the state it is taken in) says how it forks. Depth is counted by the workflow's `DepthRule`
(`depth.py`): policy acts for most workflows, C-3PO's steps for `c3po` (the question is depth 0; each
proxy act, LLM call and the answer leaf one step deeper). An act taken at depth t records its node at t + 1.
C-3PO's tree rollout (section 5.1 and Table 7 of the paper) is

    forks:
      - {role: router, forced: [{text: "[No Retrieval]"}, {text: "[Retrieval]", sample: true},
                                {text: "[Planning]"}]}                  # t = 0: the deterministic stage
      - {depth_from: 1, depth_to: 4, k: 2}     # eq. 2: K(t) = 2 for t <= 4
      - {k: 1}                                 #        K(t) = 1 for t > 4
    max_depth: 13                              # Table 7: no node deeper than 13, the answer leaf included

and `forks: [2, 1]` is shorthand for "k=2 at depth 0, then 1" (the last value repeats). A workflow's name is
shorthand for the tree its package registered (`depth.register_tree`): `forks: c3po` is the schedule above,
stated in `workflows/c3po/settings.py`; this module names no workflow.

A forced prefix is one mechanism wherever it comes from: a rule's `forced` entries (the tree's strategies)
or an act's own `Act.prefix` (C-3PO's `--strategy retrieval`: `[Retrieval]`, then the policy's query). Both
reach the policy as `ChatRequest.prefix`; an act that carries its own prefix ignores a rule's forced ones.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ragteam.config import Config
from ragteam.depth import Tree, tree


class Forced(Config):
    """A forced start of the policy's reply: `text`, then (with `sample`) the policy's own continuation."""

    text: str = Field(..., min_length=1, description="the forced assistant prefix, e.g. [Retrieval]")
    sample: bool = Field(False, description="sample a continuation after the prefix (else the reply ends)")


class ForkRule(Config):
    """How a policy act forks: into `k` samples, or into one child per forced prefix."""

    role: str | None = Field(None, description="the role this rule applies to (None: any role)")
    depth_from: int = Field(
        0, ge=0, description="applies to acts taken at depth t >= this (t: the depth of the act's state)"
    )
    depth_to: int | None = Field(None, ge=0, description="... and t <= this (inclusive; None: no end)")
    k: int = Field(1, ge=1, description="samples to draw, each continued as a child path")
    forced: list[Forced] = Field(
        default_factory=list, description="one child per forced prefix (overrides k)"
    )

    def matches(self, role: str, depth: int) -> bool:
        if self.role is not None and self.role != role:
            return False
        return depth >= self.depth_from and (self.depth_to is None or depth <= self.depth_to)

    @property
    def width(self) -> int:
        return len(self.forced) or self.k


class BestOf(Config):
    """Keep one of N: sample `n` candidates for an act, score them, continue only the best.

    All `n` are recorded as sibling nodes with their `score`; the kept one has `chosen=True`.
    """

    n: int = Field(1, ge=1, description="candidates per act (1: off)")
    roles: list[str] = Field(default_factory=list, description="roles it applies to (empty: every role)")
    scorer: Literal["prm", "llm", "rollout", "random", "outcome"] = Field(
        "prm",
        description="prm: a trained process reward model scores each candidate; llm: the LLM server ranks "
        "them with RAG-Gym's Fig. 10 criteria (JSON ranked_indices); rollout: Monte Carlo rollouts from each "
        "candidate, mean reward; random: a seeded uniform score (Table 4's random PRM); outcome: the "
        "candidate's own outcome, its answer's reward against the gold answers when it ends the episode, "
        "else 0 (Table 4's ORM source; reads the gold answers)",
    )
    rollouts: int = Field(2, ge=1, description="rollout scorer: rollouts per candidate")
    metric: str = Field(
        "f1", description="rollout and outcome scorers: the reward metric (averaged over rollouts)"
    )

    def applies(self, role: str) -> bool:
        return self.n > 1 and (not self.roles or role in self.roles)


class RolloutConfig(Config):
    """How the engine samples, forks and bounds episodes. Picklable; holds no live objects."""

    temperature: float = Field(0.0, ge=0.0, le=5.0, description="policy sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="policy nucleus sampling mass")
    max_tokens: int = Field(256, ge=1, description="policy tokens per act, unless the act sets its own")
    max_prompt_tokens: int | None = Field(
        None,
        ge=64,
        description="policy prompts longer than this are cut by the fitting policy (documents dropped "
        "first; C-3PO's Table 7: 4096); none: only the model's context bounds them",
    )
    seed: int | None = Field(
        0,
        description="base seed; each request gets a seed derived from it, its question and its tree position",
    )
    llm_temperature: float = Field(0.0, ge=0.0, le=5.0, description="LLM-server sampling temperature")
    llm_max_tokens: int = Field(
        128, ge=1, description="LLM-server tokens per call, unless the call sets its own"
    )
    forks: list[ForkRule] = Field(
        default_factory=list,
        description="fork schedule: the first rule matching an act's role and depth says how it forks "
        "(none: one sample); a list of numbers is shorthand for k by depth, the last repeating; "
        "`c3po` is C-3PO's tree (router's three strategies, then K(t)=2 for t <= 4)",
    )
    best_of: BestOf = Field(default_factory=BestOf, description="keep one of N candidates per act")
    group_size: int = Field(
        1,
        ge=1,
        description="independent episodes (or trees) per question, for group baselines (grpo, rloo, tree): "
        "each is its own episode, `<id>#<k>`, with metadata.group the question's id",
    )
    max_depth: int = Field(
        16,
        ge=1,
        description="deepest node of a path, as the workflow counts depth: policy acts (c3po: C-3PO's steps, "
        "acts, LLM calls and the answer leaf; an act runs only if the path can still end within it)",
    )
    max_nodes: int = Field(512, ge=1, description="nodes per episode tree; once reached, no more forking")
    max_tokens_per_episode: int = Field(
        16384, ge=1, description="generated tokens (policy and LLM) on one root-to-leaf path"
    )
    max_concurrent: int = Field(32, ge=1, description="episodes in flight at once")
    prefix_cache_mb: float = Field(
        512,
        ge=0,
        description="in-process models (policy, LLM): MB of prompt-prefix KV kept in a radix tree, so each "
        "prompt prefills only what no earlier prompt shares (group members, templates, later turns); "
        "least recently used first out; emptied when the weights change; 0: off (llm/prefix_cache.py)",
    )
    workers: int = Field(
        1,
        ge=1,
        description="Ray actors sharing the questions, each with its own engine, models and retriever "
        "(1: this process); results equal one process's (rollout/distributed.py)",
    )
    ray_address: str | None = Field(
        None, description="Ray cluster to run the workers on (auto, ray://host:10001; none: a local Ray)"
    )
    worker_cpus: float = Field(1.0, gt=0, description="Ray CPUs (and torch threads) per rollout worker")
    worker_gpus: float = Field(0.0, ge=0, description="Ray GPUs per rollout worker")

    @field_validator("forks", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        """`[2, 1]` -> k=2 at depth 0, k=1 from depth 1 on; a workflow's name (`c3po`) -> the fork rules of
        the tree its package registered (`registered_tree`)."""
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]  # from the command line
        if isinstance(value, str) and not value.isdigit():
            return registered_tree(value).fields["forks"]
        if isinstance(value, list) and value and all(isinstance(v, str) and v.isdigit() for v in value):
            value = [int(v) for v in value]  # from the command line
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            if any(v < 1 for v in value):
                raise ValueError(f"fork widths must be >= 1, got {value}")
            last = len(value) - 1
            return [
                {"depth_from": d, "depth_to": None if d == last else d, "k": v} for d, v in enumerate(value)
            ]
        return value

    @model_validator(mode="after")
    def _check(self) -> RolloutConfig:
        if self.best_of.n > 1 and self.best_of.scorer == "rollout" and self.temperature == 0:
            raise ValueError("best_of.scorer=rollout needs temperature > 0 (greedy rollouts are all alike)")
        return self

    def fork_at(self, role: str, depth: int) -> ForkRule | None:
        """The rule for an act of `role` taken at depth `depth` (the depth of the path's last node, as the
        workflow counts it; None: no fork)."""
        return next((rule for rule in self.forks if rule.matches(role, depth)), None)


def registered_tree(name: str) -> Tree:
    """The tree rollout workflow `name`'s package registered (`ragteam.depth.register_tree`); ValueError
    naming the known ones otherwise. The built-in teams register theirs as the workflow registry loads them;
    an outside team's registers when its module is imported."""
    import ragteam.workflows.registry  # noqa: F401  (loads the built-in teams, which register their trees)

    found = tree(name)
    if found is None:
        from ragteam.depth import TREES

        raise ValueError(
            f"no tree rollout is registered for workflow {name!r}: known trees are {sorted(TREES)}"
        )
    return found
