"""Search-R1's own option: how many turns may search (`--max-turns`), declared by the team, not by ragteam.

A team's options class subclasses `ragteam.WorkflowConfig` (the options every workflow reads: `--topk`,
`--profile`) and names it as its Workflow's `Options`; every command that runs the team then takes its fields
as flags (`ragteam eval --workflow search-r1 --max-turns 2`, listed by `--help`), recipes and config files
take them as keys (`max_turns: 4`), and Python passes them to the command's config as the built-in workflows'
(`ragteam.EvalConfig(workflow="search-r1", max_turns=2, ...)`)."""

from __future__ import annotations

from pydantic import Field

from ragteam import WorkflowConfig


class SearchR1Options(WorkflowConfig):
    """The options of Search-R1's agent."""

    max_turns: int = Field(
        10,
        ge=0,
        le=64,
        description="Search-R1: turns that may search before the last, answer-only turn (its recipe: 4, the "
        "paper's action budget)",
    )
