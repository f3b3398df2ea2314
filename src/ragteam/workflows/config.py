"""Settings every workflow reads: retrieval depth, strategy switches, step limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.config import Config


class WorkflowConfig(Config):
    """Options of the workflows; each workflow reads the fields that concern it and ignores the rest."""

    topk: int = Field(5, ge=1, le=100, description="documents retrieved per query")
    variant: Literal["qr-s-g", "s-g", "qr-g"] = Field(
        "qr-s-g",
        description="MMOA-RAG variant: which of Query Rewriter (qr), Selector (s), Generator (g) run",
    )
    candidates: int = Field(
        10, ge=1, le=50, description="MMOA-RAG: size K of the candidate set for the Selector"
    )
    strategy: Literal["auto", "no_retrieval", "retrieval", "planning"] = Field(
        "auto",
        description="C-3PO: force one strategy for every question (fixed-strategy ablation); auto = router",
    )
    max_rounds: int = Field(
        5, ge=1, le=20, description="C-3PO: retrieval-filter rounds in planning mode (not the rollout depth)"
    )
    max_steps: int = Field(
        10, ge=1, le=30, description="RAG-Gym: search-or-answer steps before forcing an answer"
    )
