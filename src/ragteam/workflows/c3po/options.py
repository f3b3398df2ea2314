"""C-3PO's options and presets: `C3POOptions` (the workflow's `Options`: `--strategy`, `--max-rounds`,
`--role-caps`, the flags of a command that runs `--workflow c3po`) and its rows of the `small` and `paper`
profiles (`settings.py`, each value with its source) with its corpus under each, as the workflow's
`presets`. Declared here, in the paper's package, so no module outside it names the workflow to find them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.workflows.c3po import settings
from ragteam.workflows.config import RoleCaps
from ragteam.workflows.setting import CORPUS_SMALL, Presets, corpus_paper

PRESETS: Presets = {
    "small": (*settings.SMALL, CORPUS_SMALL),
    "paper": (*settings.PAPER, corpus_paper("C-3PO §6.1: the 2018 Wikipedia dump")),
}


class C3POOptions(RoleCaps):
    """C-3PO's options (the workflow's `Options`): a forced strategy, the planning rounds, the roles' caps."""

    strategy: Literal["auto", "no_retrieval", "retrieval", "planning"] = Field(
        "auto",
        description="C-3PO: force one strategy for every question (fixed-strategy ablation, Table 3; a "
        "forced [Retrieval] still lets the proxy write the query); auto = router",
    )
    max_rounds: int = Field(
        5, ge=1, le=20, description="C-3PO: retrieval-filter rounds in planning mode (not the rollout depth)"
    )
