"""What a PPO run writes as it goes: `checkpoint-N/` written atomically (weights, optimizer, schedule, KL
coefficient, RNG states, run state and the iteration's log row), pruned to `--save-total-limit`, and read
back on `--resume` (every random draw of iteration i derives from (seed, i), so a killed run loses and
repeats no update); and, with `--save-rollouts-every N`, the episodes an update learned from.
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

from ragteam.credit import leaf_reward
from ragteam.metrics.rewards import for_question, get_reward
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode
from ragteam.train.distributed import load_optimizer_state, optimizer_state, save_actor_critic
from ragteam.train.losses import KLController
from ragteam.train.ppo.learner import Learner
from ragteam.train.ppo.run import Run

__all__ = ["apply_kl_beta", "apply_settings", "keep_rollouts", "load_checkpoint", "save_checkpoint"]

STATE_KEYS = ("iteration", "generated_tokens", "seconds", "baseline")


def save_checkpoint(run: Run, iteration: int, row: dict[str, Any] | None = None) -> Path:
    """Phase 6: `checkpoint-<iteration>/`, written under a temporary name and renamed when complete. It
    holds the iteration's log row too: a run killed between the checkpoint and its log line gets the line
    back on resume."""
    final = run.out / f"checkpoint-{iteration}"
    tmp = run.out / f".checkpoint-{iteration}.tmp"
    if run.dist.main:
        shutil.rmtree(tmp, ignore_errors=True)
    learner = run.learner
    save_actor_critic(learner.ac, tmp, learner.tokenizer, run.dist, merged=False)  # every torchrun rank...
    optimizer = optimizer_state(learner.model, learner.optimizer)
    if not run.dist.main:  # ...and rank 0 alone writes
        return final
    torch.save({"optimizer": optimizer, "scheduler": learner.scheduler.state_dict()}, tmp / "optimizer.pt")
    torch.save(
        {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
        tmp / "rng.pt",
    )
    state = dict(run.state, global_step=iteration, iteration=iteration, log_row=row)
    kl = learner.kl
    state["kl"] = {"beta": kl.beta, "steps": kl.steps, "beta_start": kl.beta_start}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    _prune_checkpoints(run)
    return final


def _prune_checkpoints(run: Run) -> None:
    from ragteam.train.run_folder import checkpoints

    limit = run.cfg.save_total_limit
    if limit is not None:
        for old in checkpoints(run.out)[:-limit]:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(run: Run, folder: Path) -> None:
    """Restore what `save_checkpoint` wrote (the weights are loaded by `build`). The run's own settings win
    over the checkpoint's: the optimizer's and the schedule's saved states carry the learning rates and the
    weight decay they were built with, which `apply_settings` replaces by this run's (announced on stderr),
    so a changed `--ppo.lr` is the one used, as config.yaml records it; a changed `--ppo.kl-beta` is
    applied or refused (`apply_kl_beta`)."""
    learner = run.learner
    opt = torch.load(folder / "optimizer.pt", map_location=learner.device, weights_only=False)
    load_optimizer_state(learner.model, learner.optimizer, opt["optimizer"])
    learner.scheduler.load_state_dict(opt["scheduler"])
    changed = apply_settings(learner)
    rng = torch.load(folder / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    kl = state.pop("kl")
    learner.kl.beta, learner.kl.steps, learner.kl.beta_start = kl["beta"], kl["steps"], kl["beta_start"]
    changed += apply_kl_beta(learner.kl, learner.opts.kl_beta)
    if changed and run.dist.main:
        print(f"ppo: resumed with changed settings, applied: {'; '.join(changed)}", file=sys.stderr)
    row = state.pop("log_row", None)
    logged = [json.loads(x) for x in (run.out / "log.jsonl").read_text(encoding="utf-8").splitlines() if x]
    if row is not None and run.dist.main and not any(r.get("step") == row["step"] for r in logged):
        with (run.out / "log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    # a checkpoint from before a key existed keeps the fresh run's default for it
    run.state |= {k: state[k] for k in STATE_KEYS if k in state}


def apply_settings(learner: Learner) -> list[str]:
    """Put this run's learning rates (--ppo.lr, --ppo.value-lr) and weight decay on the restored optimizer
    and schedule: each group's lr becomes the configured peak times the schedule's factor at the restored
    step, as if the run had been built with it. Returns what changed, as `--ppo.lr 1e-06 -> 2e-06`."""
    opts, sched = learner.opts, learner.scheduler
    groups = learner.optimizer.param_groups
    names, peaks = ("--ppo.lr", "--ppo.value-lr"), (opts.lr, opts.value_lr)
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


def keep_rollouts(run: Run, iteration: int, episodes: list[Episode]) -> Path | None:
    """With `--save-rollouts-every N`, the episodes the update of every Nth iteration learns from (rewards,
    judge verdicts and process scores on them) in OUT/rollouts/iteration-N.jsonl, `ragteam eval`'s
    episodes.jsonl format: `ragteam ask --episodes FILE` prints their traces and `ragteam compare` reads them.
    Each scored answer leaf also records the training reward `--ppo.reward` under its name when it is not an
    answer metric the engine recorded already (a user's own reward: what the update learned from is in the
    file, where `ask` shows it). `iteration` is 1-based: iteration-N was played with the weights after N - 1
    updates."""
    every = run.cfg.save_rollouts_every
    if not every or iteration % every or not run.dist.main:
        return None
    name = run.cfg.ppo.reward
    reward = get_reward(name)
    for ep in episodes:
        for leaf in ep.leaves():
            if leaf.rewards and name not in leaf.rewards:  # a failed leaf has none, and is worth 0
                leaf.rewards[name] = leaf_reward(leaf, for_question(reward, ep.question))
    path = run.out / "rollouts" / f"iteration-{iteration}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_episodes(path, episodes)
    return path
