"""The phases of a PPO iteration that feed the learner: play the workflow (`play`, after `push_weights`), turn
the trees into samples (`credit_samples`), keep those the update trains on (`trained_samples`), and score the
policy on held-out questions (`held_out`). The learning phases are the learner's (`Learner.score`,
`Learner.update`); the loop that runs them all is `loop.py`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ragteam.credit import get_credit
from ragteam.metrics.rewards import answer_rewards, get_reward
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode
from ragteam.stats.scores import percent_means
from ragteam.train.advantages import get_advantage
from ragteam.train.distributed import gather_shares, share
from ragteam.train.experience import Sample, samples_from_episodes
from ragteam.train.groups import GroupIds, group_ids, informative
from ragteam.train.ppo.run import Run
from ragteam.train.ppo.tree_scores import judge_leaves, score_acts

__all__ = ["credit_samples", "held_out", "iteration_questions", "play", "push_weights", "trained_samples"]


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


def play(run: Run, iteration: int) -> list[Episode]:
    """Phase 1: play the workflow on this iteration's questions with the current weights."""
    cfg = run.cfg
    push_weights(run, iteration)  # a served policy gets the weights after `iteration` updates
    batch = iteration_questions(run.questions, iteration, cfg.questions_per_iteration, cfg.seed)
    report = run.engine.run(
        run.workflow,
        share(batch, run.dist),  # under torchrun, this rank's share; the episodes are then gathered
        reward=answer_rewards,
        progress=cfg.progress and run.dist.main,
        config=cfg.rollout.model_copy(update={"seed": cfg.seed * 1_000_003 + iteration}),
    )
    return gather_shares(report.episodes, run.dist)


def push_weights(run: Run, iteration: int) -> None:
    """The current weights to the rollout backend (rank 0 pushes to a server; every rank then waits).

    Every push also empties the engine's prefix caches (`llm/prefix_cache.py`), whatever the backend: the
    in-process policy is updated by a fused optimizer step, which the cache's weights key does not see, and a
    rollout or evaluation must start from an empty cache so that a resumed run (whose cache starts empty)
    samples exactly what the uninterrupted run sampled (KV read from the cache equals KV recomputed only up
    to float round-off, which can flip a sampled token)."""
    if run.dist.main or run.sync.every_rank:
        run.sync.push(run.learner.ac.policy, iteration)
    clear = getattr(run.engine, "clear_prefix_cache", None)
    if clear is not None:  # every rank: each rolls out on its own engine
        clear()
    run.dist.barrier()


def credit_samples(run: Run, episodes: list[Episode]) -> tuple[list[Sample], dict[str, int]]:
    """Phase 2: one reward per policy node (the recipe's credit function over the leaves' `--ppo.reward`),
    one Sample per credited node; the judge's verdicts and the process reward model's scores are put on the
    trees first (`tree_scores.py`)."""
    opts = run.cfg.ppo
    if opts.reward == "judge":
        judge_leaves(run, episodes)
    if opts.process_reward == "prm":
        score_acts(run, episodes)
    return samples_from_episodes(
        episodes, get_credit(opts.credit), get_reward(opts.reward), max_tokens=opts.max_sample_tokens
    )


def trained_samples(
    run: Run, samples: list[Sample], skipped: dict[str, int]
) -> tuple[list[Sample], GroupIds]:
    """The samples the update trains on and their `group_ids`, the others counted in `skipped`: those of the
    roles `--ppo.train-roles` names (all when empty) and, under a group estimator, those of a group that
    scored alike (`--ppo.skip-uninformative`: their advantage is 0, so scoring and back-propagating them buys
    nothing). The ids are computed once, before the filter: it drops whole question groups (a group that
    scored alike has forks that scored alike), so the kept samples' ids name the same groups and forks."""
    opts = run.cfg.ppo
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


def held_out(run: Run) -> dict[str, Any]:
    """Phase 5: greedy rollouts on the held-out questions; mean EM / F1 / cover-EM with 95% intervals. The
    episodes go to OUT/eval/iteration-N.jsonl, in the format of `ragteam eval`'s episodes.jsonl."""
    from ragteam.stats.episodes import invalid_action_stats, strategy_stats

    if not run.eval_questions:
        return {}
    push_weights(run, run.state["iteration"])
    greedy = run.cfg.rollout.model_copy(
        update={"temperature": 0.0, "forks": [], "group_size": 1, "seed": run.cfg.seed}
    )
    t0 = time.perf_counter()
    report = run.engine.run(
        run.workflow,
        share(run.eval_questions, run.dist),
        reward=answer_rewards,
        progress=run.cfg.progress and run.dist.main,
        config=greedy,
    )
    episodes = gather_shares(report.episodes, run.dist)
    trace = run.out / "eval" / f"iteration-{run.state['iteration']}.jsonl"  # for paired comparisons
    if run.dist.main:
        trace.parent.mkdir(parents=True, exist_ok=True)
        write_episodes(trace, episodes)
    out: dict[str, Any] = {"questions": len(episodes), "seconds": round(time.perf_counter() - t0, 1)}
    out["trace"] = str(trace.relative_to(run.out))
    out |= percent_means(episodes)
    out["invalid"] = invalid_action_stats(episodes)
    strategy = strategy_stats(episodes)
    if strategy:
        out["strategy"] = strategy
    return out
