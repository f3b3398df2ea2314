"""C-3PO: a compact proxy (router, filter, decision maker) between a fixed retriever and a fixed LLM server.

The workflow loads on first use (module `__getattr__`), so `ragteam.workflows.c3po.settings` imports alone: the
profiles read it while the configs the workflow itself imports are being defined. Loading the package
registers C-3PO's tree rollout as `c3po` (`tree.py`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ragteam.workflows.c3po import tree as tree  # registers the `c3po` tree

__all__ = ["C3PO"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ragteam.workflows.c3po.workflow"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
