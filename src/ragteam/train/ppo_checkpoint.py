"""PPO checkpoints: `checkpoint-N/` written atomically (weights, optimizer, schedule, KL coefficient, RNG
states, trainer state and the iteration's log row), pruned to `--save-total-limit`, and read back on
`--resume`: every random draw of iteration i derives from (seed, i), so a killed run loses and repeats no
update.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragteam.train.distributed import load_optimizer_state, optimizer_state, save_actor_critic
from ragteam.train.losses import KLController
from ragteam.train.ppo_run import Trainer

__all__ = ["load_checkpoint", "save_checkpoint"]

STATE_KEYS = ("iteration", "generated_tokens", "seconds", "baseline")


def save_checkpoint(trainer: Trainer, iteration: int, row: dict[str, Any] | None = None) -> Path:
    """Phase 6: `checkpoint-<iteration>/`, written under a temporary name and renamed when complete. It
    holds the iteration's log row too: a run killed between the checkpoint and its log line gets the line
    back on resume."""
    final = trainer.out / f"checkpoint-{iteration}"
    tmp = trainer.out / f".checkpoint-{iteration}.tmp"
    if trainer.dist.main:
        shutil.rmtree(tmp, ignore_errors=True)
    save_actor_critic(
        trainer.ac, tmp, trainer.tokenizer, trainer.dist, merged=False
    )  # every torchrun rank calls this...
    optimizer = optimizer_state(trainer.model, trainer.optimizer)
    if not trainer.dist.main:  # ...and rank 0 alone writes
        return final
    torch.save({"optimizer": optimizer, "scheduler": trainer.scheduler.state_dict()}, tmp / "optimizer.pt")
    torch.save(
        {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
        tmp / "rng.pt",
    )
    state = dict(trainer.state, global_step=iteration, iteration=iteration, log_row=row)
    state["kl"] = {"beta": trainer.kl.beta, "steps": trainer.kl.steps, "beta_start": trainer.kl.beta_start}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    _prune_checkpoints(trainer)
    return final


def _prune_checkpoints(trainer: Trainer) -> None:
    from ragteam.train.common import checkpoints

    limit = trainer.cfg.save_total_limit
    if limit is not None:
        for old in checkpoints(trainer.out)[:-limit]:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(trainer: Trainer, folder: Path) -> None:
    """Restore what `save_checkpoint` wrote (the weights are loaded by `build`). The run's own settings win
    over the checkpoint's: the optimizer's and the schedule's saved states carry the learning rates and the
    weight decay they were built with, which `apply_settings` replaces by this run's (announced on stderr),
    so a changed `--ppo.lr` is the one used, as config.yaml records it; a changed `--ppo.kl-beta` is
    applied or refused (`apply_kl_beta`)."""
    opt = torch.load(folder / "optimizer.pt", map_location=trainer.device, weights_only=False)
    load_optimizer_state(trainer.model, trainer.optimizer, opt["optimizer"])
    trainer.scheduler.load_state_dict(opt["scheduler"])
    changed = apply_settings(trainer)
    rng = torch.load(folder / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    kl = state.pop("kl")
    trainer.kl.beta, trainer.kl.steps, trainer.kl.beta_start = kl["beta"], kl["steps"], kl["beta_start"]
    changed += apply_kl_beta(trainer.kl, trainer.cfg.ppo.kl_beta)
    if changed and trainer.dist.main:
        print(f"ppo: resumed with changed settings, applied: {'; '.join(changed)}", file=sys.stderr)
    row = state.pop("log_row", None)
    logged = [
        json.loads(x) for x in (trainer.out / "log.jsonl").read_text(encoding="utf-8").splitlines() if x
    ]
    if row is not None and trainer.dist.main and not any(r.get("step") == row["step"] for r in logged):
        with (trainer.out / "log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    # a checkpoint from before a key existed keeps the fresh run's default for it
    trainer.state |= {k: state[k] for k in STATE_KEYS if k in state}


def apply_settings(trainer: Trainer) -> list[str]:
    """Put this run's learning rates (--ppo.lr, --ppo.critic-lr) and weight decay on the restored optimizer
    and schedule: each group's lr becomes the configured peak times the schedule's factor at the restored
    step, as if the run had been built with it. Returns what changed, as `--ppo.lr 1e-06 -> 2e-06`."""
    opts, sched = trainer.cfg.ppo, trainer.scheduler
    groups = trainer.optimizer.param_groups
    names, peaks = ("--ppo.lr", "--ppo.critic-lr"), (opts.lr, opts.critic_lr)
    changed = [
        f"{name} {old:g} -> {new:g}" for name, old, new in zip(names, sched.base_lrs, peaks) if old != new
    ]
    decay = {float(g.get("weight_decay", 0.0)) for g in groups} - {opts.weight_decay}
    changed += [f"--ppo.weight-decay {old:g} -> {opts.weight_decay:g}" for old in sorted(decay)]
    sched.base_lrs = list(peaks[: len(groups)])
    for group, peak, factor in zip(groups, sched.base_lrs, sched.lr_lambdas):
        group["initial_lr"] = peak
        group["lr"] = peak * factor(sched.last_epoch)
        group["weight_decay"] = opts.weight_decay
    sched._last_lr = [g["lr"] for g in groups]
    return changed


def apply_kl_beta(kl: KLController, beta: float) -> list[str]:
    """A changed --ppo.kl-beta on resume: a fixed or annealed coefficient restarts its schedule from it at
    the restored step (the anneal still ends at --ppo.kl-anneal-to on the last iteration); an adaptive one
    (--ppo.kl-target) has moved away from its initial value by control, so a new initial value has no
    meaning there and is refused. Returns what changed."""
    if beta == kl.beta_start:
        return []
    if kl.target is not None:
        raise ValueError(
            f"--ppo.kl-beta {beta:g} differs from the resumed run's {kl.beta_start:g}, and its beta is adaptive "
            f"(--ppo.kl-target; now {kl.beta:g}): resume with --ppo.kl-beta {kl.beta_start:g}, or start a new run"
        )
    old = kl.beta_start
    kl.beta_start = beta
    kl.beta = kl.current()
    return [f"--ppo.kl-beta {old:g} -> {beta:g}"]
