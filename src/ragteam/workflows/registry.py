"""The workflows by command-line name, and the one function that builds them from a WorkflowConfig."""

from __future__ import annotations

from ragteam.protocol import Workflow
from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import AGENTS, GymAgent
from ragteam.workflows.mmoa import MMOA

WORKFLOWS: list[str] = ["direct", "standard-rag", "c3po", "mmoa", *(f"gym:{a}" for a in AGENTS)]
"""Every workflow name `build_workflow` knows, in the order commands list them."""


def build_workflow(name: str, cfg: WorkflowConfig | None = None) -> Workflow:
    """The workflow called `name`, configured by `cfg`; ValueError listing the known names otherwise."""
    cfg = cfg if cfg is not None else WorkflowConfig()
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
