"""The workflows by command-line name, and the one function that builds them from a WorkflowConfig."""

from __future__ import annotations

from ragteam.protocol import Workflow
from ragteam.workflows import profiles
from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import AGENTS, GymAgent
from ragteam.workflows.mmoa import MMOA

WORKFLOWS: list[str] = ["direct", "standard-rag", "c3po", "mmoa", *(f"gym:{a}" for a in AGENTS)]
"""Every workflow name `build_workflow` knows, in the order commands list them."""


def build_workflow(name: str, cfg: WorkflowConfig | None = None) -> Workflow:
    """The workflow called `name`, configured by `cfg`; ValueError listing the known names otherwise."""
    cfg = with_profile(cfg if cfg is not None else WorkflowConfig(), name)
    if name == "direct":
        return Direct(cfg)
    if name == "standard-rag":
        return StandardRAG(cfg)
    if name == "c3po":
        return C3PO(cfg)
    if name == "mmoa":
        return MMOA(cfg)
    if name.startswith("gym:") and name[len("gym:") :] in AGENTS:
        return GymAgent(cfg, agent=name[len("gym:") :])
    raise ValueError(f"unknown workflow {name!r}; choose one of: {', '.join(WORKFLOWS)}")


def with_profile(cfg: WorkflowConfig, name: str) -> WorkflowConfig:
    """`cfg` with its profile's workflow options for `name` filled in where it sets none. A command's config
    has them filled already (its validator knows the workflow); a bare `WorkflowConfig(profile="paper")`
    built in code gets them here."""
    unset = {
        key: value
        for key, value in profiles.values(cfg.profile, name).items()
        if key in WorkflowConfig.model_fields and key not in cfg.model_fields_set
    }
    return cfg.model_copy(update=unset) if unset else cfg
