"""Profiles: named sets of defaults per workflow, so a run can follow a paper's settings with one flag.

    ragteam eval --workflow c3po --profile paper ...      # C-3PO's own settings (Table 7, released code)
    ragteam eval --workflow c3po ...                       # `small`: sized for a small model on a CPU

Why: the field defaults of the configs are sized for SmolLM2-135M on a laptop (5 documents, 256-token acts,
5 planning rounds). Read beside the papers, those settings shift the findings, so `paper` declares each
paper's stated values in one table, each with its source; `small` declares the defaults as they were, so
results made before profiles existed still hold (the default profile is `small`).

A profile only fills what the user left unset: field defaults < profile < recipe (`train ppo --recipe`) <
`--config FILE` < flags, merged by the one resolver (`ragteam.config.resolve`; the profile's layer is
`WorkflowConfig.layers`), which records each value's source in the run's config.yaml. Where a small model cannot hold a paper's value
(a 2048-token act in a short context, 32 documents in one prompt), the engine's fitting policy cuts the
prompt or the reply (`ragteam.rollout.fit`) and the eval report counts how often (`stats["truncation"]`).

Keys are dotted paths into the run config: `topk`, `rollout.max_depth`, `retriever.fusion`. Workflows are
grouped by family: `c3po`, `mmoa`, `gym` (every `gym:*` agent) and `baseline` (`direct`, `standard-rag`).
Each paper's rows are stated in its workflow's package (`workflows/<family>/settings.py`, beside the
constants the workflow itself reads); this module puts them side by side and applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ragteam.workflows.c3po import settings as c3po
from ragteam.workflows.gym import settings as gym
from ragteam.workflows.mmoa import settings as mmoa
from ragteam.workflows.setting import Setting

# ---------------------------------------------------------------------------------------------- the table

BASELINE_SMALL: tuple[Setting, ...] = (
    Setting("topk", 5, "ragteam: as the workflows of this profile"),
    Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per answer"),
)

BASELINE_PAPER: tuple[Setting, ...] = (
    Setting(
        "topk", c3po.TOPK, "C-3PO's retrieval depth, so the standard-RAG baseline sees as many documents"
    ),
    Setting(
        "rollout.llm_max_tokens",
        c3po.MAX_LEN,
        "C-3PO Table 7's 2048, as the c3po LLM calls under this profile, so the baselines answer alike",
    ),
)
"""The baselines (`direct`, `standard-rag`) have no paper of their own: they follow C-3PO's."""

CORPUS_SMALL = Setting(
    "corpus",
    "distractor",
    "ragteam: the run's questions' own paragraphs, gold included (HotpotQA's distractor setting)",
)
"""Every workflow's corpus under `small`: each question's gold paragraphs are among what it can retrieve."""

CORPUS_SOURCES = {
    "c3po": "C-3PO §6.1: the 2018 Wikipedia dump",
    "mmoa": "MMOA-RAG §5.1.1: candidates retrieved from Wikipedia passages",
    "gym": "RAG-Gym Appendix E.1: Wikipedia",
    "baseline": "C-3PO's (§6.1: the 2018 Wikipedia dump), as the baselines follow it",
}


def _corpus_paper(fam: str) -> Setting:
    return Setting(
        "corpus",
        "pooled",
        f"{CORPUS_SOURCES[fam]}, no passages handed to the team; offline the pooled paragraphs of the "
        "question file(s) (`pooled+FILE` joins a Wikipedia sample)",
    )


SMALL: dict[str, tuple[Setting, ...]] = {
    "c3po": (*c3po.SMALL, CORPUS_SMALL),
    "mmoa": (*mmoa.SMALL, CORPUS_SMALL),
    "gym": (*gym.SMALL, CORPUS_SMALL),
    "baseline": (*BASELINE_SMALL, CORPUS_SMALL),
}
"""The defaults as they were before profiles: what every config field defaults to."""

PAPER: dict[str, tuple[Setting, ...]] = {
    "c3po": (*c3po.PAPER, _corpus_paper("c3po")),
    "mmoa": (*mmoa.PAPER, _corpus_paper("mmoa")),
    "gym": (*gym.PAPER, _corpus_paper("gym")),
    "baseline": (*BASELINE_PAPER, _corpus_paper("baseline")),
}
"""Each paper's stated values (docs/workflows.md lists them with their sources), from its workflow's package."""

PROFILES: dict[str, dict[str, tuple[Setting, ...]]] = {"small": SMALL, "paper": PAPER}
"""Every profile by name; `small` is the default."""

DEFAULT_PROFILE = "small"


# ---------------------------------------------------------------------------------------------- lookup


def family(workflow: str) -> str | None:
    """The profile table a workflow reads: c3po, mmoa, gym (any `gym:*`) or baseline (`direct`,
    `standard-rag`); None for a team from outside the package (its own defaults hold under every profile)."""
    if workflow.startswith("gym:"):
        return "gym"
    if workflow in ("c3po", "mmoa"):
        return workflow
    return "baseline" if workflow in ("direct", "standard-rag") else None


def settings(profile: str, workflow: str) -> tuple[Setting, ...]:
    """The settings `profile` declares for `workflow`; ValueError naming the profiles when unknown."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    fam = family(workflow)
    return PROFILES[profile].get(fam, ()) if fam is not None else ()


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
    out: dict[str, Any] = {}
    for s in rows:
        *parents, last = s.key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = s.value
    return out


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
