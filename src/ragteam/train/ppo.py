"""Multi-agent PPO on episode trees: one policy playing every role of a workflow, with a critic or a group
baseline.

    ragteam train ppo --recipe mmoa --data hotpotqa.jsonl --limit 400 --init runs/sft --out runs/ppo
    ragteam train ppo --recipe mmoa ... --ppo.advantage grpo --rollout.group-size 4   # critic-free

Each iteration runs six named, timed phases, top to bottom in `train_ppo`:

1. rollout     - the engine plays the workflow on this iteration's questions with the current weights,
                 sampling at the recipe's temperature: K episodes per question (`--rollout.group-size`),
                 C-3PO's tree where the recipe forks; every act's prompt ids, completion ids, log-probs;
2. credit      - a registered credit function (`ragteam.credit`: outcome, tree_mc, tree_mean, mmoa,
                 process) turns each tree into one reward per policy node (with `--ppo.process-reward
                 prm`, the gym recipe, each act is first scored by the process reward model
                 `--prm.model`: RAG-Gym's r(s, a)); each credited node of a trained role
                 (`--ppo.train-roles`) becomes a `Sample`;
3. advantages  - one pass without gradients: old log-probs (and values, with a critic) under the current
                 weights, reference log-probs under the frozen start, all at the sampling temperature; the
                 node's reward at its last token, minus beta * KL at every token where the KL goes in the
                 reward (`--ppo.kl-in`: gae, reinforce_pp; the group estimators pay it in the loss); then
                 the registered estimator (`--ppo.advantage`: gae, grpo, drgrpo, rloo, reinforce_pp,
                 tree_grpo, sibling; `train/advantages.py`) with each sample's question group, episode,
                 fork and leaf trajectories, and the normalisation (`--ppo.normalize`: auto, global, role,
                 none);
4. update      - `ppo.epochs` passes of shuffled token-budgeted minibatches: the registered policy loss
                 (`--ppo.loss`) + vf_coef * clipped value loss (with a critic) - ent_coef * entropy, over the
                 trained completion tokens (prompts, and so observations, are never trained); gradient
                 norm clipped and logged; one optimizer step per minibatch;
5. evaluate    - greedy rollouts on held-out questions (`--eval-data`), every `--eval-every` iterations and
                 after the last;
6. checkpoint  - every `--save-every` iterations (`ppo_checkpoint.py`); `--resume` continues after the
                 newest one, losing and repeating no update.

The advantage and update phases live in `ppo_learn.py`; building the run is `ppo_run.py`; the judge's and the process reward model's rewards, put on the trees
before credit, `ppo_rewards.py`; the log row, the statistics the phases measure for it (per-role PPO
statistics, the rollout backend's log-prob drift) and the guards that watch it (entropy, KL and reply length
running away, per role) `ppo_log.py`. Output in `--out`: the final policy (a model folder), its critic
(`OUT/critic/`, when there is one), `log.jsonl`, `runs/` (TensorBoard), `wandb/` (--report-to wandb),
`curves.png`, `checkpoint-N/`, `config.yaml`.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragteam.credit import get_credit
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode
from ragteam.stats.scores import percent_means
from ragteam.train.advantages import get_advantage
from ragteam.train.distributed import (
    gather_shares,
    save_actor_critic,
    share,
)
from ragteam.train.experience import Sample, samples_from_episodes
from ragteam.train.groups import GroupIds, group_ids, informative
from ragteam.train.losses import masked_mean
from ragteam.train.meters import PhaseTimer
from ragteam.train.ppo_checkpoint import load_checkpoint, save_checkpoint
from ragteam.train.ppo_config import PPOConfig, with_recipe
from ragteam.train.ppo_learn import advantages, update  # phases 3 and 4
from ragteam.train.ppo_log import iteration_row, log_iteration, open_scalars
from ragteam.train.ppo_rewards import judge_leaves, score_acts
from ragteam.train.ppo_run import Iteration, Trainer, build
from ragteam.train.sync import SharedModule

__all__ = ["NothingTrained", "PPOConfig", "start", "train_ppo"]

PHASES = ("rollout", "credit", "advantages", "update", "evaluate", "checkpoint")


def start(cfg: PPOConfig) -> Trainer:
    """The run, built, with its checkpoint restored when it resumes and its TensorBoard writer open."""
    trainer = build(cfg)
    if trainer.resume_from is not None:
        load_checkpoint(trainer, trainer.resume_from)
    trainer.scalars = open_scalars(trainer) if trainer.dist.main else None
    return trainer


# ============================================================================ the phases


def iteration_questions(questions: list, iteration: int, per_iteration: int, seed: int) -> list:
    """Iteration i's questions: slice i of an endless stream of seeded shuffles of the training set (one
    shuffle per pass), so the data position is a function of (seed, i) and a resumed run reads on."""
    n = len(questions)
    out = []
    for k in range(iteration * per_iteration, (iteration + 1) * per_iteration):
        epoch, pos = divmod(k, n)
        order = np.random.default_rng([seed, epoch]).permutation(n)
        out.append(questions[int(order[pos])])
    return out


def rollout(trainer: Trainer, iteration: int) -> list[Episode]:
    """Phase 1: play the workflow on this iteration's questions with the current weights."""
    from ragteam.metrics.answer import score_answer

    cfg = trainer.cfg
    push(trainer, iteration)  # a served policy gets the weights after `iteration` updates
    batch = iteration_questions(trainer.questions, iteration, cfg.questions_per_iteration, cfg.seed)
    report = trainer.engine.run(
        trainer.workflow,
        share(batch, trainer.dist),  # under torchrun, this rank's share; the episodes are then gathered
        reward=lambda q, a: score_answer(a, q),
        progress=cfg.progress and trainer.dist.main,
        config=cfg.rollout.model_copy(update={"seed": cfg.seed * 1_000_003 + iteration}),
    )
    return gather_shares(report.episodes, trainer.dist)


def push(trainer: Trainer, iteration: int) -> None:
    """The current weights to the rollout backend (rank 0 pushes to a server; every rank then waits).

    Every push also empties the engine's prefix caches (`llm/prefix_cache.py`), whatever the backend: the
    in-process policy is updated by a fused optimizer step, which the cache's weights key does not see, and a
    rollout or evaluation must start from an empty cache so that a resumed run (whose cache starts empty)
    samples exactly what the uninterrupted run sampled (KV read from the cache equals KV recomputed only up
    to float round-off, which can flip a sampled token)."""
    if (
        trainer.dist.main
        or isinstance(trainer.sync, SharedModule)
        or getattr(trainer.sync, "collective", False)
    ):
        trainer.sync.push(trainer.ac.policy, iteration)
    clear = getattr(trainer.engine, "clear_prefix_cache", None)
    if clear is not None:  # every rank: each rolls out on its own engine
        clear()
    trainer.dist.barrier()


def credit(trainer: Trainer, episodes: list[Episode]) -> tuple[list[Sample], dict[str, int]]:
    """Phase 2: one reward per policy node (the recipe's credit function), one Sample per credited node; the
    judge's verdicts and the process reward model's scores are put on the trees first (`ppo_rewards.py`)."""
    if trainer.cfg.ppo.reward == "judge":
        judge_leaves(trainer, episodes)
    if trainer.cfg.ppo.process_reward == "prm":
        score_acts(trainer, episodes)
    fn = get_credit(trainer.cfg.ppo.credit)
    return samples_from_episodes(
        episodes, fn, trainer.cfg.ppo.reward, max_tokens=trainer.cfg.ppo.max_sample_tokens
    )


def trained(
    trainer: Trainer, samples: list[Sample], skipped: dict[str, int]
) -> tuple[list[Sample], GroupIds]:
    """The samples the update trains on and their `group_ids`, the others counted in `skipped`: those of the
    roles `--ppo.train-roles` names (all when empty) and, under a group estimator, those of a group that
    scored alike (`--ppo.skip-uninformative`: their advantage is 0, so scoring and back-propagating them buys
    nothing). The ids are computed once, before the filter: it drops whole question groups (a group that
    scored alike has forks that scored alike), so the kept samples' ids name the same groups and forks."""
    opts = trainer.cfg.ppo
    kept = [s for s in samples if s.role in opts.train_roles] if opts.train_roles else samples
    if len(kept) < len(samples):
        skipped["role_not_trained"] = len(samples) - len(kept)
    ids = group_ids(kept)
    estimator = get_advantage(opts.advantage)
    if opts.skip_uninformative and estimator.groups:
        useful = informative(kept, ids, trees=estimator.forks)
        if not all(useful):
            skipped["uninformative_group"] = len(useful) - sum(useful)
            keep = torch.tensor(useful, dtype=torch.bool)
            kept, ids = [s for s, ok in zip(kept, useful) if ok], ids.select(keep)
    return kept, ids


def evaluate(trainer: Trainer) -> dict[str, Any]:
    """Phase 5: greedy rollouts on the held-out questions; mean EM / F1 / cover-EM with 95% intervals. The
    episodes go to OUT/eval/iteration-N.jsonl, in the format of `ragteam eval`'s episodes.jsonl."""
    from ragteam.metrics.answer import score_answer
    from ragteam.stats.episodes import invalid_action_stats, strategy_stats

    if not trainer.eval_questions:
        return {}
    push(trainer, trainer.state["iteration"])
    greedy = trainer.cfg.rollout.model_copy(
        update={"temperature": 0.0, "forks": [], "group_size": 1, "seed": trainer.cfg.seed}
    )
    t0 = time.perf_counter()
    report = trainer.engine.run(
        trainer.workflow,
        share(trainer.eval_questions, trainer.dist),
        reward=lambda q, a: score_answer(a, q),
        progress=trainer.cfg.progress and trainer.dist.main,
        config=greedy,
    )
    episodes = gather_shares(report.episodes, trainer.dist)
    trace = trainer.out / "eval" / f"iteration-{trainer.state['iteration']}.jsonl"  # for paired comparisons
    if trainer.dist.main:
        trace.parent.mkdir(parents=True, exist_ok=True)
        write_episodes(trace, episodes)
    out: dict[str, Any] = {"questions": len(episodes), "seconds": round(time.perf_counter() - t0, 1)}
    out["trace"] = str(trace.relative_to(trainer.out))
    out |= percent_means(episodes)
    out["invalid"] = invalid_action_stats(episodes)
    strategy = strategy_stats(episodes)
    if strategy:
        out["strategy"] = strategy
    return out


# ============================================================================ the loop


class NothingTrained(ValueError):
    """Every iteration of a run left every act out of the update: the saved policy is its initial weights.
    A ValueError, so the command ends with `ragteam: error: ...` and exit status 1, not "saved"."""


def nothing_trained(acts: list[dict[str, Any]]) -> str | None:
    """The error of a run whose every iteration (`acts`: each iteration's `act_counts`, a resumed run's earlier
    ones included) trained no act, with the reasons summed over the run; None when one did, or when there is
    no iteration."""
    if not acts or any(a["trained"] for a in acts):
        return None
    reasons: dict[str, int] = {}
    for a in acts:
        for k, v in a["skipped"].items():
            reasons[k] = reasons.get(k, 0) + v
    why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])) or "no acts"
    hint = {
        "uninformative_group": "every group scored alike: raise --rollout.group-size or the temperature, "
        "or start from a policy that sometimes succeeds",
        "too_long": "raise --ppo.max-sample-tokens",
    }
    top = max(reasons, key=reasons.get) if reasons else ""
    return (
        f"train ppo: no iteration trained any act ({len(acts)} iterations, {sum(a['total'] for a in acts)} "
        f"acts: {why}); the policy in the output folder is the initial one"
        + (f"; {hint[top]}" if top in hint else "")
    )


def earlier_acts(trainer: Trainer) -> list[dict[str, Any]]:
    """The act counts of the iterations a resumed run did before (its log.jsonl rows up to the checkpoint), so
    that `nothing_trained` judges the whole run; a row written before rows counted acts says how many samples
    it trained. [] for a fresh run."""
    path = trainer.out / "log.jsonl"
    if trainer.resume_from is None or not path.is_file():
        return []
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [
        r.get("acts") or {"total": r.get("samples", 0), "trained": r.get("samples", 0), "skipped": {}}
        for r in rows
    ]


def keep_rollouts(trainer: Trainer, iteration: int, episodes: list[Episode]) -> Path | None:
    """With `--save-rollouts-every N`, the episodes the update of every Nth iteration learns from (rewards,
    judge verdicts and process scores on them) in OUT/rollouts/iteration-N.jsonl, `ragteam eval`'s
    episodes.jsonl format: `ragteam ask --episodes FILE` prints their traces and `ragteam compare` reads them.
    `iteration` is 1-based: iteration-N was played with the weights after N - 1 updates."""
    every = trainer.cfg.save_rollouts_every
    if not every or iteration % every or not trainer.dist.main:
        return None
    path = trainer.out / "rollouts" / f"iteration-{iteration}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_episodes(path, episodes)
    return path


def budget_spent(cfg: PPOConfig, state: dict[str, Any]) -> str | None:
    """Which budget the run has spent ("token", "time"), if any: checked after each rollout, so the run ends
    with that iteration's update, evaluation and checkpoint. The time budget counts the wall time up to the end
    of this rollout, so a run passes it by at most one update, evaluation and checkpoint: leave that much
    room under a hard limit."""
    if cfg.budget_tokens is not None and state["generated_tokens"] >= cfg.budget_tokens:
        return f"token ({cfg.budget_tokens})"
    if cfg.budget_seconds is not None and state["seconds"] >= cfg.budget_seconds:
        return f"time ({cfg.budget_seconds:g} s)"
    return None


def train_ppo(cfg: PPOConfig) -> Path:
    """Run (or resume) PPO as configured; returns the output folder holding the final policy (and critic).

    Raises `NothingTrained` (after writing the log, curves and policy, for inspection) when every iteration
    of the run (a resumed run's earlier ones included) left every act out of the update: a run that learned
    nothing does not end as a success."""
    from ragteam.train.curves import write_curves

    cfg = with_recipe(cfg)
    trainer = start(cfg)
    started = time.perf_counter()
    acts = earlier_acts(trainer)  # each iteration's act_counts: a run that trained nothing is an error
    for it in range(trainer.state["iteration"], cfg.iterations):
        timer = PhaseTimer()
        step = Iteration(it, tuple(g["lr"] for g in trainer.optimizer.param_groups))  # the update steps them

        with timer("rollout"):
            step.episodes = rollout(trainer, it)
            step.prefill = dict(getattr(trainer.engine, "prefill", {}))  # before evaluate() runs the engine
            step.generated = sum(
                len(n.completion.completion_ids or [])
                for ep in step.episodes for n in ep.policy_nodes() if n.completion is not None
            )  # fmt: skip
            trainer.state["generated_tokens"] += step.generated
        trainer.state["seconds"] += time.perf_counter() - started  # training wall time, resumes included
        started = time.perf_counter()
        spent = budget_spent(cfg, trainer.state)
        last = it + 1 == cfg.iterations or spent is not None

        with timer("credit"):
            step.samples, step.skipped = credit(trainer, step.episodes)
            step.trained, ids = trained(trainer, step.samples, step.skipped)
        keep_rollouts(trainer, it + 1, step.episodes)

        if step.trained:
            with timer("advantages"):
                step.exp = advantages(trainer, step.trained, ids)

            with timer("update"):
                step.meters = update(trainer, step.exp, it)
            step.kl_mean = float(masked_mean(step.exp.kl, step.exp.mask))
        else:
            with warnings.catch_warnings():  # "scheduler stepped before optimizer": intended here
                warnings.simplefilter("ignore", UserWarning)
                trainer.scheduler.step()  # every act skipped: nothing to learn, the schedule still advances
        trainer.state["iteration"] = it + 1  # updates done

        with timer("evaluate"):
            due = bool(cfg.eval_every) and (it + 1) % cfg.eval_every == 0
            step.eval = evaluate(trainer) if due or last else {}

        row = iteration_row(trainer, step)  # its kl_beta: the beta this iteration ran at
        trainer.kl.update(step.kl_mean, 1)  # the next one's, which the checkpoint keeps
        with timer("checkpoint"):
            if (it + 1) % cfg.save_every == 0 or last:
                save_checkpoint(trainer, it + 1, row)
        row["seconds"] = {k: round(v, 2) for k, v in timer.seconds.items()}
        acts.append(row["acts"])
        if trainer.dist.main:
            log_iteration(trainer, row)
        if spent is not None:
            if trainer.dist.main:
                print(f"ppo: {spent} budget spent after {it + 1} iterations", file=sys.stderr)
            break

    save_actor_critic(trainer.ac, trainer.out, trainer.tokenizer, trainer.dist)
    if trainer.dist.main:
        write_curves(trainer.out)
    trainer.dist.barrier()  # the output is complete when any rank returns
    close = getattr(trainer.engine, "close", None)  # Ray rollout workers (--rollout.workers)
    if close is not None:
        close()
    if trainer.scalars is not None:
        trainer.scalars.close()
    error = nothing_trained(acts)
    if error is not None:
        raise NothingTrained(error)  # the CLI prints it as `ragteam: error: ...` and exits with status 1
    return trainer.out
