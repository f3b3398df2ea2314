"""MMOA-RAG: Query Rewriter, Selector and Generator as cooperating policy roles around a fixed retriever.

The workflow loads on first use (module `__getattr__`), so `ragteam.workflows.mmoa.settings` imports alone: the
profiles read it while the configs the workflow itself imports are being defined.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["MMOA"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ragteam.workflows.mmoa.workflow"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
