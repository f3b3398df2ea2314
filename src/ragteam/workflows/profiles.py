"""Profiles: named sets of defaults per workflow, so a run can follow a paper's settings with one flag.

    ragteam eval --workflow c3po --profile paper ...      # C-3PO's own settings (Table 7, released code)
    ragteam eval --workflow c3po ...                       # `small`: sized for a small model on a CPU

Why: the field defaults of the configs are sized for SmolLM2-135M on a laptop (5 documents, 256-token acts,
5 planning rounds). Read beside the papers, those settings shift the findings, so `paper` declares each
paper's stated values in one table, each with its source; `small` declares the defaults as they were, so
results made before profiles existed still hold (the default profile is `small`).

A profile only fills what the user left unset: field defaults < profile < recipe (`train ppo --recipe`) <
`--config FILE` < flags, merged by the one resolver (`ragteam.config.resolve`; the profile's layer is
`assemble.config.ProfiledConfig.layers`), which records each value's source in the run's config.yaml.
Where a small model cannot hold a paper's value
(a 2048-token act in a short context, 32 documents in one prompt), the engine's fitting policy cuts the
prompt or the reply (`ragteam.rollout.fit`) and the eval report counts how often (`stats["truncation"]`).

Keys are dotted paths into the run config: `topk`, `rollout.max_depth`, `retriever.fusion`. Each workflow
states its own rows as its Workflow class's `presets` (`workflows/<paper>/options.py`, from the paper's
`settings.py`, beside the constants the workflow itself reads; the baselines follow C-3PO's), found by name
through the registry (`registry.workflow_presets`), so a team from outside the package states its own the same
way. This module looks them up and lays the built-in ones side by side (`SMALL`, `PAPER`, the docs table).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ragteam.workflows.baselines import StandardRAG
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.gym import GymAgent
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.registry import workflow_presets
from ragteam.workflows.setting import Setting, nested

PROFILES = ("small", "paper")
"""Every profile by name; `small` is the default."""

DEFAULT_PROFILE = "small"

_BUILT_IN = {"c3po": C3PO, "mmoa": MMOA, "gym": GymAgent, "baseline": StandardRAG}

SMALL: dict[str, tuple[Setting, ...]] = {fam: cls.presets["small"] for fam, cls in _BUILT_IN.items()}
"""The built-in workflows' `small` rows side by side (every `gym:*` agent shares gym's, `direct` the
baselines'): the defaults as they were before profiles, what every config field defaults to."""

PAPER: dict[str, tuple[Setting, ...]] = {fam: cls.presets["paper"] for fam, cls in _BUILT_IN.items()}
"""The built-in workflows' `paper` rows side by side (docs/workflows.md lists them with their sources)."""


def settings(profile: str, workflow: str) -> tuple[Setting, ...]:
    """The settings `profile` declares for `workflow` (its `presets`); ValueError naming the profiles when
    unknown; none for a team that states none (its own defaults hold under every profile)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    return workflow_presets(workflow).get(profile, ())


def values(profile: str, workflow: str, keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The profile's values for `workflow` as a nested dict (`{"rollout": {"max_depth": 13}, ...}`); with
    `keys` (dotted), those alone (a recipe's `paper:` list), KeyError naming a key the profile lacks."""
    rows = settings(profile, workflow)
    if keys is not None:
        by_key = {s.key: s for s in rows}
        missing = [k for k in keys if k not in by_key]
        if missing:
            raise KeyError(f"profile {profile!r} states no {', '.join(missing)} for {workflow!r}")
        rows = tuple(by_key[k] for k in keys)
    return nested(rows)


def markdown_table() -> str:
    """Every setting of every profile as the Markdown table in docs/workflows.md (a test keeps them equal)."""
    lines = ["| workflows | setting | small | paper | source of the paper value |", "|---|---|---|---|---|"]
    for fam in PAPER:
        small = {s.key: s.value for s in SMALL.get(fam, ())}
        for s in PAPER[fam]:
            shown = "–" if s.key not in small else _shown(small[s.key])
            lines.append(f"| {fam} | `{s.key}` | {shown} | {_shown(s.value)} | {s.source} |")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
