"""Profiles: named sets of defaults per workflow, so a run can follow a paper's settings with one flag.

    ragteam eval --workflow c3po --profile paper ...      # C-3PO's own settings (Table 7, released code)
    ragteam eval --workflow c3po ...                       # `small`: sized for a small model on a CPU

Why: the field defaults of the configs are sized for SmolLM2-135M on a laptop (5 documents, 256-token acts,
5 planning rounds). Read beside the papers, those settings shift the findings, so `paper` declares each
paper's stated values in one table, each with its source; `small` declares the defaults as they were, so
results made before profiles existed still hold (the default profile is `small`).

A profile only fills what the user left unset: field defaults < profile < recipe (`train ppo --recipe`) <
`--config FILE` < flags. Values it filled are not marked as set on the config, so a recipe applied later
still wins over them (`ragteam.train.ppo_config.with_recipe`). Where a small model cannot hold a paper's value
(a 2048-token act in a short context, 32 documents in one prompt), the engine's fitting policy cuts the
prompt or the reply (`ragteam.rollout.fit`) and the eval report counts how often (`stats["truncation"]`).

Keys are dotted paths into the run config: `topk`, `rollout.max_depth`, `retriever.fusion`. Workflows are
grouped by family: `c3po`, `mmoa`, `gym` (every `gym:*` agent) and `baseline` (`direct`, `standard-rag`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Setting:
    """One value of a profile: the dotted config key, its value, and where the value comes from."""

    key: str
    value: Any
    source: str


# ---------------------------------------------------------------------------------------------- the table

_LONG_EPISODE = 32768
"""Generated tokens per root-to-leaf path under `paper`: not a paper value; large enough that the depth and
step limits bind first (C-3PO: 13 acts x 2048 tokens plus the LLM's calls; RAG-Gym: 10 x 2048 plus summaries)."""

_MINILM = "ragteam: the index's encoder, all-MiniLM-L6-v2 (packaged) by default"

SMALL: dict[str, tuple[Setting, ...]] = {
    "c3po": (
        Setting("topk", 5, "ragteam: a short prompt for a small proxy"),
        Setting("max_rounds", 5, "ragteam: planning rounds bounded below the depth limit"),
        Setting("rollout.max_depth", 16, "ragteam: the engine's default depth limit"),
        Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act"),
        Setting("role_caps", True, "ragteam: the router's own cap of 64 tokens (a tag and a short query)"),
        Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per call (roadmap, answer)"),
        Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
        Setting("rollout.max_tokens_per_episode", 16384, "ragteam: the engine's default"),
        Setting("retriever.dense_model", None, _MINILM),
    ),
    "mmoa": (
        Setting("candidates", 10, "MMOA-RAG §5.1.3: K = 10"),
        Setting("fill_from_question", True, "ragteam: free slots filled from the question's own hits"),
        Setting("selector_constrained", False, "ragteam: the Selector writes free text, its parser reads it"),
        Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act (the roles cap their own)"),
        Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
        Setting("retriever.dense_model", None, _MINILM),
    ),
    "gym": (
        Setting("topk", 5, "ragteam: a short history for a small actor"),
        Setting("max_steps", 10, "RAG-Gym Appendix F: at most 10 iterations"),
        Setting("last_step", "answer", "ragteam: the last step may only answer (answer-only template)"),
        Setting("retriever.fusion", "convex", "ragteam: the hybrid retriever's default fusion"),
        Setting("retriever.dense_weight", 0.4, "ragteam: the hybrid retriever's default weight"),
        Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act"),
        Setting("role_caps", True, "ragteam: the direct agent's own cap of 64 tokens"),
        Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per summary"),
        Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
        Setting("rollout.max_tokens_per_episode", 16384, "ragteam: the engine's default"),
        Setting("retriever.dense_model", None, _MINILM),
    ),
    "baseline": (
        Setting("topk", 5, "ragteam: as the workflows of this profile"),
        Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per answer"),
    ),
}
"""The defaults as they were before profiles: what every config field defaults to."""

PAPER: dict[str, tuple[Setting, ...]] = {
    "c3po": (
        Setting(
            "topk",
            10,
            "C-3PO authors' released code (Chen-GX/C-3PO arguments.py: retrieve_top_k = max_documents = 10)",
        ),
        Setting(
            "max_rounds",
            13,
            "C-3PO A.4 Algorithm 1: planning loops until [LLM], bounded only by the depth limit (13 never binds)",
        ),
        Setting("rollout.max_depth", 13, "C-3PO §6.1 (implementation details) and Table 7: maximal depth 13"),
        Setting("rollout.max_tokens", 2048, "C-3PO Table 7: generate max len 2048"),
        Setting(
            "role_caps",
            False,
            "C-3PO Table 7: generate max len 2048 for every act, the router's included (no 64-token cap)",
        ),
        Setting(
            "rollout.llm_max_tokens",
            2048,
            "C-3PO Table 7: generate max len 2048, for the LLM's roadmap and answer too (no silent cut)",
        ),
        Setting("rollout.max_prompt_tokens", 4096, "C-3PO Table 7: prompt max len 4096"),
        Setting(
            "rollout.max_tokens_per_episode", _LONG_EPISODE, "ragteam: never binds before the depth limit"
        ),
        Setting(
            "retriever.dense_model",
            None,
            "C-3PO §6.1, A.2: contriever-msmarco (not packaged; offline the index's encoder, all-MiniLM-L6-v2 "
            "by default). The paper's: `--retriever.dense-model DIR --retriever.pooling mean "
            "--no-retriever.normalize` on a contriever-msmarco folder (or `ragteam index --dense.model DIR "
            "--dense.pooling mean --no-dense.normalize`)",
        ),
    ),
    "mmoa": (
        Setting("candidates", 10, "MMOA-RAG §5.1.3: K = 10"),
        Setting(
            "fill_from_question",
            False,
            "MMOA-RAG §5.1.3: the K candidates come from the sub-questions' searches (2 -> top 5 of each)",
        ),
        Setting(
            "selector_constrained",
            True,
            "MMOA-RAG §4.2.2 eq. 5: the Selector's action space is `Document`, the ids 0..K-1 and `,`",
        ),
        Setting("rollout.max_tokens", 256, "not stated; the roles cap their own (rewriter 128, others 64)"),
        Setting("rollout.max_prompt_tokens", None, "not stated"),
        Setting(
            "retriever.dense_model",
            None,
            "MMOA-RAG §5.1.3: Contriever (not packaged; offline the index's encoder, all-MiniLM-L6-v2 by "
            "default). The paper's: `--retriever.dense-model DIR --retriever.pooling mean "
            "--no-retriever.normalize` on a Contriever folder (contriever-msmarco, as C-3PO)",
        ),
    ),
    "gym": (
        Setting("topk", 32, "RAG-Gym Appendix E.1: 32 documents per search query"),
        Setting("max_steps", 10, "RAG-Gym Appendix F (Table 5): at most 10 iterations per question"),
        Setting(
            "last_step",
            "same",
            "RAG-Gym Appendix E.3, Algorithm 1: every step is the agent's own; no last-step template",
        ),
        Setting("retriever.fusion", "rrf", "RAG-Gym Appendix E.1: BM25 and dense merged by reciprocal rank"),
        Setting("retriever.dense_weight", 0.5, "RAG-Gym Appendix E.1: plain RRF, both lists weighted alike"),
        Setting(
            "llm.backend",
            "local",
            "RAG-Gym Appendix E.2: the summarizer is the untuned base model (only the actor is tuned)",
        ),
        Setting("llm.model", "smollm2", "RAG-Gym Appendix E.2: the untuned base model (ragteam's: SmolLM2)"),
        Setting("rollout.max_tokens", 2048, "not stated; C-3PO's Table 7 value, room for the three sections"),
        Setting(
            "role_caps",
            False,
            "not stated; the direct agent's answer gets rollout.max_tokens like the others",
        ),
        Setting(
            "rollout.llm_max_tokens",
            2048,
            "not stated; C-3PO's Table 7 value, so a summary (Fig. 8) is not cut",
        ),
        Setting("rollout.max_prompt_tokens", None, "not stated (Llama-3.1-8B, 128k context: no cut)"),
        Setting(
            "rollout.max_tokens_per_episode", _LONG_EPISODE, "ragteam: never binds before the step limit"
        ),
        Setting(
            "retriever.dense_model",
            None,
            "RAG-Gym E.1: BGE-Base beside BM25 (not packaged; offline the index's encoder, all-MiniLM-L6-v2 by "
            "default). The paper's: `--retriever.dense-model DIR` on a bge-base-en(-v1.5) sentence-transformers "
            "folder (cls pooling, normalised, read from it) with `--retriever.query-prefix 'Represent this "
            "sentence for searching relevant passages: '`",
        ),
    ),
    "baseline": (
        Setting("topk", 10, "C-3PO's retrieval depth, so the standard-RAG baseline sees as many documents"),
        Setting(
            "rollout.llm_max_tokens",
            2048,
            "C-3PO Table 7's 2048, as the c3po LLM calls under this profile, so the baselines answer alike",
        ),
    ),
}
"""Each paper's stated values (docs/workflows.md lists them with their sources)."""

PROFILES: dict[str, dict[str, tuple[Setting, ...]]] = {"small": SMALL, "paper": PAPER}
"""Every profile by name; `small` is the default."""

DEFAULT_PROFILE = "small"


# ---------------------------------------------------------------------------------------------- lookup


def family(workflow: str) -> str:
    """The profile table a workflow reads: c3po, mmoa, gym (any `gym:*`) or baseline."""
    if workflow.startswith("gym:"):
        return "gym"
    if workflow in ("c3po", "mmoa"):
        return workflow
    return "baseline"


def settings(profile: str, workflow: str) -> tuple[Setting, ...]:
    """The settings `profile` declares for `workflow`; ValueError naming the profiles when unknown."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of: {', '.join(PROFILES)}")
    return PROFILES[profile].get(family(workflow), ())


def values(profile: str, workflow: str) -> dict[str, Any]:
    """The profile's values for `workflow` as a nested dict (`{"rollout": {"max_depth": 13}, ...}`)."""
    out: dict[str, Any] = {}
    for s in settings(profile, workflow):
        *parents, last = s.key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = s.value
    return out


# ---------------------------------------------------------------------------------------------- applying


def fill(data: dict[str, Any], defaults: dict[str, Any], fields: dict[str, Any]) -> tuple[dict, list[str]]:
    """`data` with `defaults` filled in where it sets nothing, and the dotted keys that were filled.

    `fields` is the model's `model_fields`: keys the model lacks are skipped. A nested dict is merged into
    the user's dict for that group; a group given as a model object is explicit and left as it is."""
    out = dict(data)
    filled: list[str] = []
    for key, value in defaults.items():
        if key not in fields:
            continue
        if isinstance(value, dict):
            given = out.get(key)
            if isinstance(given, BaseModel):
                continue
            sub_fields = _sub_fields(fields[key])
            mine, sub = fill(given if isinstance(given, dict) else {}, value, sub_fields)
            if sub:
                out[key] = mine
                filled += [f"{key}.{s}" for s in sub]
        elif key not in out:
            out[key] = value
            filled.append(key)
    return out, filled


def _sub_fields(info: Any) -> dict[str, Any]:
    annotation = getattr(info, "annotation", None)
    return (
        annotation.model_fields if isinstance(annotation, type) and issubclass(annotation, BaseModel) else {}
    )


def unmark(model: BaseModel, filled: list[str]) -> None:
    """Forget that `filled` keys were set on `model`, so `exclude_unset` dumps leave them out (a group the
    profile created whole is forgotten too)."""
    groups: dict[str, list[str]] = {}
    for key in filled:
        head, _, rest = key.partition(".")
        if rest:
            groups.setdefault(head, []).append(rest)
        else:
            model.__pydantic_fields_set__.discard(head)
    for head, rests in groups.items():
        sub = getattr(model, head, None)
        if not isinstance(sub, BaseModel):
            continue
        unmark(sub, rests)
        if not sub.model_fields_set:
            model.__pydantic_fields_set__.discard(head)


def apply_profile(
    cls: type[BaseModel], data: Any, fields: dict[str, Any] | None = None, workflow_field: str = "workflow"
) -> tuple[Any, list[str]]:
    """`data` (a config's raw input) with the profile's values for its workflow filled in, and the keys
    filled; `fields` limits the keys it may fill (default: all of `cls`'s). Anything but a dict (a model
    being re-validated or assigned) passes through unchanged."""
    if not isinstance(data, dict) or workflow_field not in cls.model_fields:
        return data, []
    profile = data.get("profile", cls.model_fields["profile"].default)
    workflow = data.get(workflow_field, cls.model_fields[workflow_field].default)
    if profile not in PROFILES or not isinstance(workflow, str):
        return data, []  # validation reports the bad value
    return fill(data, values(profile, workflow), fields if fields is not None else cls.model_fields)


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
