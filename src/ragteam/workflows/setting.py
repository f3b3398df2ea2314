"""One stated value with its source: the unit of the profiles (each workflow's `presets`, stated in its
package: `workflows/<paper>/options.py`; side by side in `workflows/profiles.py`) and the SFT presets
(`train/sft.py`). Its own module, importing nothing, so a workflow package's settings load without the
workflow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias


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

Presets: TypeAlias = dict[str, tuple[Setting, ...]]
"""A workflow's rows of each profile by name (`small`, `paper`): its Workflow class's `presets`."""

CORPUS_SMALL = Setting(
    "corpus",
    "distractor",
    "ragteam: the run's questions' own paragraphs, gold included (HotpotQA's distractor setting)",
)
"""Every workflow's corpus under `small`: each question's gold paragraphs are among what it can retrieve."""


def corpus_paper(source: str) -> Setting:
    """A workflow's corpus under `paper`: the pooled corpus, with where its paper's corpus comes from."""
    return Setting(
        "corpus",
        "pooled",
        f"{source}, no passages handed to the team; offline the pooled paragraphs of the "
        "question file(s) (`pooled+FILE` joins a Wikipedia sample)",
    )


def nested(rows: tuple[Setting, ...]) -> dict[str, Any]:
    """Rows as the nested mapping of a config's values (`rollout.max_depth` -> `{"rollout": {"max_depth"}}`)."""
    out: dict[str, Any] = {}
    for s in rows:
        *parents, last = s.key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = s.value
    return out
