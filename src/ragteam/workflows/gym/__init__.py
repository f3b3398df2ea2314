"""RAG-Gym: six agent designs (Direct, CoT, RAG, ReAct, Search-o1, Re2Search) on the search-or-answer process.

The workflow loads on first use (module `__getattr__`), so `ragteam.workflows.gym.settings` imports alone: the
profiles read it while the configs the workflow itself imports are being defined. Loading the package
registers RAG-Gym's Fig. 10 ranking prompt as the `llm` scorer's (`ranking.py`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ragteam.workflows.gym import ranking as ranking  # registers the `llm` scorer's prompt

__all__ = ["AGENTS", "GymAgent"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ragteam.workflows.gym.workflow"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
