"""The options every workflow reads (`WorkflowConfig`: the profile, the retrieval depth), the base of each
workflow's own options class.

A workflow declares its options as its Workflow class's `Options`, a subclass of `WorkflowConfig` in its own
package (`workflows/<paper>/options.py`: C-3PO's `strategy` and `max_rounds`, MMOA-RAG's `variant` and
`candidates`, RAG-Gym's `max_steps` and `last_step`; a team from outside the package the same way). A command
takes the options of the workflow it runs, flat, as its flags (`registry.with_options`); no command carries
another workflow's. `profile` names a set of defaults per workflow (`ragteam.workflows.profiles`: `small`, the
defaults as they were; `paper`, each paper's stated values), given to the one resolver
(`ragteam.config.resolve`) under the recipe, the config file and the flags. This module imports no workflow
and no profile, so the workflows' packages import it without an arrow back up.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import Field

from ragteam.config import Config


class WorkflowConfig(Config):
    """The options every workflow reads: the base of each workflow's own options class (its `Options`:
    C-3PO's `strategy`, MMOA-RAG's `candidates`, RAG-Gym's `max_steps` live in their packages' options.py)."""

    profile: Literal["small", "paper"] = Field(
        "small",
        description="defaults per workflow: small (sized for a small model on a CPU) or paper (each "
        "paper's stated values: docs/workflows.md); values set explicitly win over the profile",
    )
    topk: int = Field(5, ge=1, le=100, description="documents retrieved per query")

    @classmethod
    def of(cls: type[Opts], cfg: Any = None) -> Opts:
        """`cfg` as this options class: itself when it already is one; else the fields of `cfg` (another
        options class, e.g. a plain WorkflowConfig(topk=3)) this class declares, the rest at their defaults.
        Every workflow's constructor and `registry.build_workflow` take their options through it, so a team
        built directly with the shared base gets its own defaults, not an AttributeError."""
        if isinstance(cfg, cls):
            return cfg
        given = cfg.model_dump(exclude_unset=True) if cfg is not None else {}
        return cls(**{k: v for k, v in given.items() if k in cls.model_fields})


Opts = TypeVar("Opts", bound=WorkflowConfig)


class RoleCaps(WorkflowConfig):
    """The switch of the roles' own reply caps, for the workflows whose roles have them (C-3PO, RAG-Gym)."""

    role_caps: bool = Field(
        True,
        description="C-3PO and RAG-Gym: the roles' own short reply caps (C-3PO's router 64 tokens, RAG-Gym's "
        "direct answer 64); off (--profile paper), those acts get --rollout.max-tokens like every other act",
    )
