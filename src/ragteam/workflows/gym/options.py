"""RAG-Gym's options and presets: `GymOptions` (every agent's `Options`: `--max-steps`, `--last-step`,
`--history-at`, `--role-caps`, the flags of a command that runs `--workflow gym:AGENT`) and its rows of the
`small` and `paper` profiles (`settings.py`, each value with its source) with its corpus under each, as the
workflow's `presets`. Declared here, in the paper's package, so no module outside it names the workflow to
find them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.workflows.config import RoleCaps
from ragteam.workflows.gym import settings
from ragteam.workflows.gym.prompts import HistoryAt
from ragteam.workflows.setting import CORPUS_SMALL, Presets, corpus_paper

PRESETS: Presets = {
    "small": (*settings.SMALL, CORPUS_SMALL),
    "paper": (*settings.PAPER, corpus_paper("RAG-Gym Appendix E.1: Wikipedia")),
}


class GymOptions(RoleCaps):
    """RAG-Gym's options (every agent's `Options`): the step limit, the last step's template, where the
    history stands, the roles' caps."""

    max_steps: int = Field(
        10, ge=1, le=30, description="RAG-Gym: search-or-answer steps (actor acts) per question"
    )
    last_step: Literal["answer", "same"] = Field(
        "answer",
        description="RAG-Gym: the last step's template: answer (answer-only, so every question gets an "
        "answer) or same (the agent's own, as in the paper; a search there ends without an answer)",
    )
    history_at: HistoryAt = Field(
        "start",
        description="RAG-Gym: where the actor's prompt shows the information-seeking history: start "
        "(Figure 9's order: history, then question and instructions) or end (after the question and "
        "instructions, so each step's prompt extends the previous step's and a prefix cache prefills only "
        "the new entry; a departure from the paper's template)",
    )
