"""PPO's loop, CleanRL-style: one function, its iteration's phases named and timed top to bottom. Building the
run is `run.py`'s, the learning phases the `Learner`'s, the others `phases.py`'s; checkpoints and the log are
written by `checkpoint.py` and `log.py` (the package docstring describes each phase).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ragteam.train.distributed import save_actor_critic
from ragteam.train.losses import masked_mean
from ragteam.train.meters import PhaseTimer
from ragteam.train.ppo.checkpoint import keep_rollouts, load_checkpoint, save_checkpoint
from ragteam.train.ppo.log import (
    NothingTrained,
    earlier_acts,
    iteration_row,
    log_iteration,
    nothing_trained,
    open_scalars,
)
from ragteam.train.ppo.phases import credit_samples, held_out, play, trained_samples
from ragteam.train.ppo.run import Iteration, Run, build
from ragteam.train.ppo_config import PPOConfig

__all__ = ["PHASES", "budget_spent", "start", "train_ppo"]

PHASES = ("rollout", "credit", "advantages", "update", "evaluate", "checkpoint")


def start(cfg: PPOConfig) -> Run:
    """The run, built, with its checkpoint restored when it resumes and its TensorBoard writer open."""
    run = build(cfg)
    if run.resume_from is not None:
        load_checkpoint(run, run.resume_from)
    run.scalars = open_scalars(run) if run.dist.main else None
    return run


def budget_spent(cfg: PPOConfig, state: dict[str, Any]) -> str | None:
    """Which budget the run has spent ("token", "time"), if any: checked after each rollout, so the run ends
    with that iteration's update, evaluation and checkpoint. The time budget counts the wall time up to the
    end of this rollout, so a run passes it by at most one update, evaluation and checkpoint: leave that much
    room under a hard limit."""
    if cfg.budget_tokens is not None and state["generated_tokens"] >= cfg.budget_tokens:
        return f"token ({cfg.budget_tokens})"
    if cfg.budget_seconds is not None and state["seconds"] >= cfg.budget_seconds:
        return f"time ({cfg.budget_seconds:g} s)"
    return None


def train_ppo(cfg: PPOConfig) -> Path:
    """Run (or resume) PPO as configured; returns the output folder holding the final policy (and value
    model).

    Raises `NothingTrained` (after writing the log, curves and policy, for inspection) when every iteration
    of the run (a resumed run's earlier ones included) left every act out of the update: a run that learned
    nothing does not end as a success."""
    from ragteam.train.curves import write_curves

    run = start(cfg)
    learner = run.learner
    started = time.perf_counter()
    acts = earlier_acts(run)  # each iteration's act_counts: a run that trained nothing is an error
    for it in range(run.state["iteration"], cfg.iterations):
        timer = PhaseTimer()
        step = Iteration(it, learner.lrs())  # the update steps them

        with timer("rollout"):
            step.episodes = play(run, it)
            step.prefill = dict(getattr(run.engine, "prefill", {}))  # before held_out() runs the engine
            step.generated = sum(
                len(n.completion.completion_ids or [])
                for ep in step.episodes for n in ep.policy_nodes() if n.completion is not None
            )  # fmt: skip
            run.state["generated_tokens"] += step.generated
        run.state["seconds"] += time.perf_counter() - started  # training wall time, resumes included
        started = time.perf_counter()
        spent = budget_spent(cfg, run.state)
        last = it + 1 == cfg.iterations or spent is not None

        with timer("credit"):
            step.samples, step.skipped = credit_samples(run, step.episodes)
            step.trained, ids = trained_samples(run, step.samples, step.skipped)
        keep_rollouts(run, it + 1, step.episodes)

        if step.trained:
            with timer("advantages"):
                step.exp = learner.score(step.trained, ids)

            with timer("update"):
                step.meters = learner.update(step.exp, it)
            step.kl_mean = float(masked_mean(step.exp.kl, step.exp.mask))
        else:
            learner.skip_update()
        run.state["iteration"] = it + 1  # updates done

        with timer("evaluate"):
            due = bool(cfg.eval_every) and (it + 1) % cfg.eval_every == 0
            step.eval = held_out(run) if due or last else {}

        row = iteration_row(run, step)  # its kl_beta: the beta this iteration ran at
        learner.end_iteration(step.kl_mean)  # the next one's, which the checkpoint keeps
        with timer("checkpoint"):
            if (it + 1) % cfg.save_every == 0 or last:
                save_checkpoint(run, it + 1, row)
        row["seconds"] = {k: round(v, 2) for k, v in timer.seconds.items()}
        acts.append(row["acts"])
        if run.dist.main:
            log_iteration(run, row)
        if spent is not None:
            if run.dist.main:
                print(f"ppo: {spent} budget spent after {it + 1} iterations", file=sys.stderr)
            break

    save_actor_critic(learner.ac, run.out, learner.tokenizer, run.dist)
    if run.dist.main:
        write_curves(run.out)
    run.dist.barrier()  # the output is complete when any rank returns
    close = getattr(run.engine, "close", None)  # Ray rollout workers (--rollout.workers)
    if close is not None:
        close()
    if run.scalars is not None:
        run.scalars.close()
    error = nothing_trained(acts)
    if error is not None:
        raise NothingTrained(error)  # the CLI prints it as `ragteam: error: ...` and exits with status 1
    return run.out
