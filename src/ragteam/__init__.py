"""ragteam: train small teams of language-model agents between any retriever and any LLM.

The public API, for a team of your own in one file (docs/extend.md) and for runs driven from Python:

- writing a workflow: `Workflow` (subclass it: `roles`, `run(question)` a generator), `Role` (a declared
  part: template, parser, limits), the requests a workflow yields (`Act` for the trainable policy, `AskLLM`
  for the fixed LLM, `Retrieve`) and the results it receives (`Acted`, the LLM's text, `list[list[Hit]]`),
  `Answer` (what it returns), `BudgetExceeded`, `Constraint`, and the data types (`Question`, `Doc`, `Hit`,
  `Message`, `Action`); `WorkflowConfig` is what a workflow's constructor receives;
- extending by name: `register_workflow` (or the `ragteam.workflows` entry-point group, or
  `--workflow package.module:ClassName`), `build_workflow`, `register_credit` and `get_credit` (credit functions,
  `ragteam.credit`: a credit of your own may build on a registered one), `register_reward` and `get_reward`
  (what an answer is worth, `ragteam.metrics.rewards`: `--ppo.reward NAME`, `eval --reward NAME`), `register_advantage` and `register_policy_loss` (PPO's estimators and losses,
  `ragteam.train.advantages` / `ragteam.train.losses`);
- running: `evaluate`, `collect`, `train_sft`, `train_dpo`, `train_prm`, `train_ppo` with the commands'
  own configs (`EvalConfig`, `CollectConfig`, `SFTConfig`, `DPOConfig`, `PRMTrainConfig`, `PPOConfig`;
  `load_config` reads a `--config` YAML file), see `ragteam.api`.

Every name is imported on first use (module `__getattr__`), so `import ragteam` stays light: torch is
imported only by the names that need it (`register_advantage`, `register_policy_loss`) or by a run. The names
are listed once, in `_HOMES` (`__all__` is read from it); the README's list is checked against it.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_HOMES: dict[str, tuple[str, ...]] = {
    "ragteam.protocol": (
        "Act",
        "Acted",
        "Answer",
        "AskLLM",
        "BudgetExceeded",
        "Constraint",
        "EpisodeGenerator",
        "Request",
        "ResultOf",
        "Retrieve",
        "Role",
        "Workflow",
    ),
    "ragteam.types": ("Action", "Doc", "Hit", "Message", "Question"),
    "ragteam.workflows.config": ("WorkflowConfig",),
    "ragteam.workflows.registry": (
        "WorkflowFactory",
        "build_workflow",
        "register_workflow",
        "workflow_names",
    ),
    "ragteam.credit": ("get_credit", "register_credit"),
    "ragteam.metrics.rewards": ("get_reward", "register_reward"),
    "ragteam.train.advantages": ("register_advantage",),
    "ragteam.train.losses": ("register_policy_loss",),
    "ragteam.api": (
        "CollectConfig",
        "DPOConfig",
        "EvalConfig",
        "PPOConfig",
        "PRMTrainConfig",
        "SFTConfig",
        "collect",
        "evaluate",
        "load_config",
        "train_dpo",
        "train_ppo",
        "train_prm",
        "train_sft",
    ),
}
"""The public names, listed once: each under the module it is imported from the first time it is read."""

_EXPORTS = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name from its module the first time it is read (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragteam' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
