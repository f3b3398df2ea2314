"""One stated value with its source: the unit of the profiles (`workflows/profiles.py`, each workflow's
`settings.py`) and the SFT presets (`train/sft.py`). Its own module, importing nothing, so a workflow
package's settings load without the workflow (the profiles read them while configs are being defined)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One value of a profile: the dotted config key, its value, and where the value comes from."""

    key: str
    value: Any
    source: str


PACKAGED_ENCODER = "ragteam: the index's encoder, all-MiniLM-L6-v2 (packaged) by default"
"""The source of `retriever.dense_model = None` under the `small` profile, for every workflow."""

LONG_EPISODE = 32768
"""Generated tokens per root-to-leaf path under `paper`: not a paper value; large enough that the depth and
step limits bind first (C-3PO: 13 acts x 2048 tokens plus the LLM's calls; RAG-Gym: 10 x 2048 plus summaries)."""
