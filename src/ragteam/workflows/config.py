"""Settings every workflow reads: retrieval depth, strategy switches, step limits, and the profile.

`profile` names a set of defaults per workflow (`ragteam.workflows.profiles`: `small`, the defaults as they
were; `paper`, each paper's stated values). Every command's config (eval, ask, collect, train ppo) derives
from `WorkflowConfig`; the configs that name a workflow (`assemble.config.ProfiledConfig`) give its profile's
values to the one resolver (`ragteam.config.resolve`), under the recipe, the config file and the flags. A
team's own options subclass it (its Workflow's `Options`: `registry.with_options`). This module imports no
workflow and no profile, so the workflows' packages import it without an arrow back up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.config import Config


class WorkflowConfig(Config):
    """Options of the workflows; each workflow reads the fields that concern it and ignores the rest."""

    profile: Literal["small", "paper"] = Field(
        "small",
        description="defaults per workflow: small (sized for a small model on a CPU) or paper (each "
        "paper's stated values: docs/workflows.md); values set explicitly win over the profile",
    )
    topk: int = Field(5, ge=1, le=100, description="documents retrieved per query")
    variant: Literal["qr-s-g", "s-g", "qr-g"] = Field(
        "qr-s-g",
        description="MMOA-RAG variant: which of Query Rewriter (qr), Selector (s), Generator (g) run",
    )
    candidates: int = Field(
        10, ge=1, le=50, description="MMOA-RAG: size K of the candidate set for the Selector"
    )
    fill_from_question: bool = Field(
        True,
        description="MMOA-RAG: also search the question itself and fill the candidate slots the "
        "sub-questions leave free from its hits (the paper: no, the sub-questions' searches only)",
    )
    selector_constrained: bool = Field(
        False,
        description="MMOA-RAG: restrict the Selector's reply to its action space (eq. 5: `Document`, the "
        "candidate numbers 0..K-1 and `,`): a logits mask in process, the server's structured-output field "
        "over HTTP (--policy.structured-output); on under --profile paper and the mmoa recipe",
    )
    strategy: Literal["auto", "no_retrieval", "retrieval", "planning"] = Field(
        "auto",
        description="C-3PO: force one strategy for every question (fixed-strategy ablation, Table 3; a "
        "forced [Retrieval] still lets the proxy write the query); auto = router",
    )
    max_rounds: int = Field(
        5, ge=1, le=20, description="C-3PO: retrieval-filter rounds in planning mode (not the rollout depth)"
    )
    max_steps: int = Field(
        10, ge=1, le=30, description="RAG-Gym: search-or-answer steps (actor acts) per question"
    )
    last_step: Literal["answer", "same"] = Field(
        "answer",
        description="RAG-Gym: the last step's template: answer (answer-only, so every question gets an "
        "answer) or same (the agent's own, as in the paper; a search there ends without an answer)",
    )
    role_caps: bool = Field(
        True,
        description="C-3PO and RAG-Gym: the roles' own short reply caps (C-3PO's router 64 tokens, RAG-Gym's "
        "direct answer 64); off (--profile paper), those acts get --rollout.max-tokens like every other act",
    )
