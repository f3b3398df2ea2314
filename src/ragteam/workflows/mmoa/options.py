"""MMOA-RAG's options and presets: `MMOAOptions` (the workflow's `Options`: `--variant`, `--candidates`,
`--fill-from-question`, `--selector-constrained`, the flags of a command that runs `--workflow mmoa`) and its
rows of the `small` and `paper` profiles (`settings.py`, each value with its source) with its corpus under
each, as the workflow's `presets`. Declared here, in the paper's package, so no module outside it names the
workflow to find them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.mmoa import settings
from ragteam.workflows.setting import CORPUS_SMALL, Presets, corpus_paper

PRESETS: Presets = {
    "small": (*settings.SMALL, CORPUS_SMALL),
    "paper": (*settings.PAPER, corpus_paper("MMOA-RAG §5.1.1: candidates retrieved from Wikipedia passages")),
}


class MMOAOptions(WorkflowConfig):
    """MMOA-RAG's options (the workflow's `Options`): its variant, K and the candidate set's filling, the
    Selector's action space."""

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
