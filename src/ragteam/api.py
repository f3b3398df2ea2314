"""The commands as Python functions: evaluate, collect and train with the configs the CLI builds from flags.

    import ragteam

    cfg = ragteam.EvalConfig(workflow="mmoa", data="hotpotqa-dev-500.jsonl", out="runs/mmoa", limit=50)
    metrics = ragteam.evaluate(cfg)                       # what `ragteam eval` writes, and its metrics
    cfg = ragteam.load_config(ragteam.PPOConfig, "ppo.yaml", {"iterations": 2})   # a --config file
    policy = ragteam.train_ppo(cfg)                       # the folder of the trained policy

Each config class is the library's class the command resolves its flags into (`EvalConfig`, `CollectConfig`,
`SFTConfig`, `DPOConfig`, `PRMTrainConfig`, `PPOConfig`; nothing here imports `ragteam.cli`): the same fields, defaults, profiles, recipes
and presets as its flags, resolved the same way (`ragteam.config.resolve`; `load_config` reads the YAML a
`--config` file holds; a config takes the options of the workflow it names: `EvalConfig(workflow="mmoa",
candidates=4, ...)`), and each function
is the one the command runs, without the terminal around it: no exit codes, no messages on Ctrl-C (the
KeyboardInterrupt reaches the caller), errors raised (a ValueError says what is wrong with the input). Like
the command, each points the library caches under `$RAGTEAM_HOME` and runs offline (`setup_caches`) and
refuses an `out` folder holding files it did not write unless `overwrite=True`; and, as quiet as the
command, keeps transformers' deprecation notices about the arguments ragteam passes it off the terminal
(`config.quiet_own_notices`: those messages only; `RAGTEAM_LIBRARY_WARNINGS=1` shows them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragteam.allocator import return_freed_memory
from ragteam.collect.config import CollectConfig
from ragteam.config import load_config, quiet_own_notices, setup_caches
from ragteam.eval.run import EvalConfig
from ragteam.train.dpo import DPOConfig
from ragteam.train.ppo_config import PPOConfig
from ragteam.train.prm import PRMTrainConfig
from ragteam.train.sft import SFTConfig

__all__ = [
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
]

Log = Callable[[str], Any]


def _prepare() -> None:
    """What every function does first, as the command does: caches under $RAGTEAM_HOME, offline, freed
    memory handed back to the system (`allocator.return_freed_memory`), and the library notices ragteam's own
    calls trigger kept off the terminal (`quiet_own_notices`)."""
    setup_caches()
    return_freed_memory()
    quiet_own_notices()


def evaluate(cfg: EvalConfig, log: Log = print) -> dict[str, Any]:
    """`ragteam eval`: run the workflow on the questions, write the run folder (`cfg.out`: episodes,
    metrics, report, plots; resumed when it holds a finished part) and return what metrics.json holds.
    `log` receives the progress lines."""
    from ragteam.eval.run import run_eval

    _prepare()
    return run_eval(cfg, log=log)


def collect(cfg: CollectConfig, log: Log = print) -> dict[str, Any]:
    """`ragteam collect sft|process`: roll out with a teacher, write training rows into `cfg.out` and
    return the summary (summary.json)."""
    from ragteam.collect.run import run_collect

    _prepare()
    return run_collect(cfg, log=log)


def train_sft(cfg: SFTConfig) -> Path:
    """`ragteam train sft`: supervised fine-tuning on SFT rows; returns the output folder (a model, or a LoRA
    adapter with `lora=True`)."""
    from ragteam.train.sft import train_sft as train

    _prepare()
    return train(cfg)


def train_dpo(cfg: DPOConfig) -> Path:
    """`ragteam train dpo`: DPO on ranked pairs; returns the output folder."""
    from ragteam.train.dpo import train_dpo as train

    _prepare()
    return train(cfg)


def train_prm(cfg: PRMTrainConfig) -> Path:
    """`ragteam train prm`: a process reward model on ranked pairs; returns the output folder (load it
    as `prm.model`)."""
    from ragteam.train.prm import train_prm as train

    _prepare()
    return train(cfg)


def train_ppo(cfg: PPOConfig) -> Path:
    """`ragteam train ppo`: multi-agent PPO from a recipe; returns the output folder (the final policy)."""
    from ragteam.train.ppo import train_ppo as train

    _prepare()
    return train(cfg)
