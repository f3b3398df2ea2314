"""PPO's log: one row per iteration (`log.jsonl`, TensorBoard, W&B, a line on stderr), built from what the
iteration's phases produced, and the guards that watch it: a role whose entropy, KL or reply length runs
away from where the run started gets a warning in the row and on the terminal, and a run whose every
iteration trained no act ends as an error (`nothing_trained`). The statistics the learner measures on the way
are `stats.py`'s.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from ragteam.assemble.folder import flatten
from ragteam.credit import leaf_reward
from ragteam.metrics.rewards import for_question, get_reward
from ragteam.rollout.tree import Episode
from ragteam.train.experience import Sample
from ragteam.train.ppo.learner import Experience
from ragteam.train.ppo.run import Iteration, Run
from ragteam.train.report import Scalars, start_wandb

__all__ = [
    "NothingTrained",
    "act_counts",
    "act_warnings",
    "credit_means",
    "earlier_acts",
    "iteration_line",
    "iteration_row",
    "log_iteration",
    "nothing_trained",
    "open_scalars",
    "rollout_stats",
    "runaway",
]

# A role "runs away" when, against its baseline, its entropy per token at least doubles (and rises by 1 nat),
# its reply at least doubles (and grows by 8 tokens), or its KL to the reference passes 0.5 nats per token: the
# signatures of the diverged MMOA-RAG run (entropy 1.4 -> 3.3, replies 5 -> 20 tokens). The baseline is the
# median of the role's first BASELINE_ITERATIONS iterations (of those before, while fewer are known): each
# iteration measures other questions, and with the first iteration alone as the baseline the entropy warning
# fired twice in a stable run (Generator 1.12 -> 2.26 nats, KL 0.01-0.03; docs/results.md).
ENTROPY_FACTOR, ENTROPY_RISE = 2.0, 1.0
LENGTH_FACTOR, LENGTH_RISE = 2.0, 8.0
KL_LIMIT = 0.5
BASELINE_ITERATIONS = 3

# Why an act may be left out of the update on purpose: its question group scored alike (its advantage is 0,
# `--ppo.skip-uninformative`) or its role is not trained (`--ppo.train-roles`). Any other reason (too_long,
# no_credit, no_token_ids, empty_completion) is an act the run meant to train and could not: more than
# LOST_SHARE of the acts is a warning (issue 29), and so is more than SKIPPED_SHARE left out for any reason but
# an untrained role, or an iteration that trains nothing at all.
DELIBERATE = ("uninformative_group", "role_not_trained")
LOST_SHARE = 0.01
SKIPPED_SHARE = 0.10


def rollout_stats(
    episodes: list[Episode], exp: Experience | None, samples: list[Sample], reward: str
) -> dict[str, Any]:
    """Training-batch statistics: answer rewards over leaves (the answer metrics, and the run's registered
    reward `--ppo.reward` when it is none of them), and per role: credited reward, KL to the reference (of
    the samples trained), response length, invalid and cut rates, action kinds (C-3PO's router: its strategy
    ratio); and the question groups."""
    kl_of: dict[tuple[str, int], float] = {}
    if exp is not None:
        for i, s in enumerate(exp.samples):
            m = exp.mask[i]
            kl_of[(s.episode, s.node)] = float(exp.kl[i][m].sum() / m.sum().clamp_min(1))
    leaves = [lf for ep in episodes for lf in ep.leaves()]
    row: dict[str, Any] = {"episodes": len(episodes), "leaves": len(leaves), "samples": len(samples)}
    metrics = ("em", "f1", "cover_em") + (("judge",) if any("judge" in lf.rewards for lf in leaves) else ())
    row["reward"] = {
        m: float(np.mean([lf.rewards.get(m, 0.0) for lf in leaves])) if leaves else 0.0 for m in metrics
    }
    if reward not in row["reward"]:
        fn = get_reward(reward)
        worth = [leaf_reward(lf, for_question(fn, ep.question)) for ep in episodes for lf in ep.leaves()]
        row["reward"][reward] = float(np.mean(worth)) if worth else 0.0
    roles: dict[str, dict[str, Any]] = {}
    for s in samples:
        r = roles.setdefault(
            s.role, {"n": 0, "reward": 0.0, "length": 0.0, "invalid": 0.0, "cut": 0.0, "kinds": {}}
        )
        r["n"] += 1
        r["reward"] += s.reward
        r["length"] += len(s.completion_ids)
        r["invalid"] += s.invalid
        r["cut"] += s.cut
        r["kinds"][s.kind] = r["kinds"].get(s.kind, 0) + 1
        if (s.episode, s.node) in kl_of:
            r["kl"] = r.get("kl", 0.0) + kl_of[(s.episode, s.node)]
            r["trained"] = r.get("trained", 0) + 1
    for r in roles.values():
        n = r.pop("n")
        for key in ("reward", "length", "invalid", "cut"):
            r[key] /= n
        if "kl" in r:
            r["kl"] /= r["trained"]
        r["n"] = n
    row["roles"] = roles
    row["groups"] = group_stats(samples)
    return row


def act_counts(trained: int, skipped: dict[str, int]) -> dict[str, Any]:
    """An iteration's acts: how many there were (`total`), how many the update trained, and the others by
    reason, most frequent first (the row's `acts`)."""
    reasons = dict(sorted(((k, v) for k, v in skipped.items() if v), key=lambda kv: (-kv[1], kv[0])))
    return {"total": trained + sum(reasons.values()), "trained": trained, "skipped": reasons}


def act_summary(acts: dict[str, Any]) -> str:
    """`trained 11/24 acts (uninformative_group 12, too_long 1)`: the terminal line's account of the acts."""
    text = f"trained {acts['trained']}/{acts['total']} acts"
    if acts["skipped"]:
        text += " (" + ", ".join(f"{k} {v}" for k, v in acts["skipped"].items()) + ")"
    return text


def act_warnings(acts: dict[str, Any]) -> list[str]:
    """Warnings about the acts an iteration left out: none trained; more than `LOST_SHARE` lost to a limit or a
    missing credit (`too_long`, `no_credit`, ...); more than `SKIPPED_SHARE` of the trainable acts (those of
    the trained roles) left out for any reason. An untrained role's acts are left out as asked, never a
    warning; an iteration with no act at all (every episode failed before its first act) is one."""
    total, skipped = acts["total"], acts["skipped"]
    if acts["trained"] == 0:
        why = ", ".join(f"{k} {v}" for k, v in skipped.items()) or "no act was played"
        return [f"trained 0 of {total} acts ({why}): this iteration did not change the policy"]
    out = []
    lost = {k: v for k, v in skipped.items() if k not in DELIBERATE}
    if sum(lost.values()) > LOST_SHARE * total:
        what = ", ".join(f"{k} {v}" for k, v in lost.items())
        out.append(f"{sum(lost.values())} of {total} acts could not be trained ({what})" + _lost_hint(lost))
    trainable = total - skipped.get("role_not_trained", 0)
    left_out = trainable - acts["trained"]
    if left_out > SKIPPED_SHARE * trainable and not (out and left_out == sum(lost.values())):
        out.append(
            f"{left_out} of {trainable} trainable acts left out of the update "
            f"({', '.join(f'{k} {v}' for k, v in skipped.items() if k != 'role_not_trained')})"
        )
    return out


def _lost_hint(lost: dict[str, int]) -> str:
    """What to change for the most common reasons an act cannot be trained."""
    if "too_long" in lost:
        return ": raise --ppo.max-sample-tokens (prompt + reply) or shorten the prompts"
    if "no_token_ids" in lost:
        return ": the rollout backend returned no token ids (serve the policy with `ragteam serve llm`)"
    return ""


def credit_means(samples: list[Sample]) -> dict[str, float]:
    """The training reward as the credit function (`--ppo.credit`) defined it: the mean credited reward per
    act, and per episode (each episode's acts averaged first, so a 10-act episode weighs as a 1-act one).
    This is what the update learns from, where `reward` holds the answer's metrics."""
    if not samples:
        return {}
    episodes: dict[str, list[float]] = {}
    for s in samples:
        episodes.setdefault(s.episode, []).append(s.reward)
    return {
        "act": float(np.mean([s.reward for s in samples])),
        "episode": float(np.mean([np.mean(v) for v in episodes.values()])),
    }


def group_stats(samples: list[Sample]) -> dict[str, Any]:
    """How many question groups (samples of one question and role) there were, and the share whose rewards
    differ: a group whose samples all scored alike gives a group baseline nothing to learn from."""
    groups: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        groups.setdefault((s.group, s.role), []).append(s.reward)
    multi = [v for v in groups.values() if len(v) > 1]
    informative = sum(1 for v in multi if max(v) > min(v))
    return {"n": len(groups), "multi": len(multi), "informative": informative / len(multi) if multi else 0.0}


def runaway(run: Run, row: dict[str, Any]) -> list[str]:
    """Warnings for the roles whose entropy, reply length or KL ran away from their baseline: the median of
    their values in the first `BASELINE_ITERATIONS` iterations they acted in, or of those before this one
    while fewer are known (kept in `run.state["baseline"]`, so a resumed run compares with the same
    start)."""
    base = run.state.setdefault("baseline", {})
    out = []
    for role, r in row.get("roles", {}).items():
        known = base[role] = _first_values(base.get(role, {}))
        start = {k: float(np.median(v)) for k, v in known.items() if v}
        ent, ent0 = r.get("entropy"), start.get("entropy")
        if ent is not None and ent0 is not None and ent >= max(ENTROPY_FACTOR * ent0, ent0 + ENTROPY_RISE):
            out.append(f"{role}: entropy {ent0:.2f} -> {ent:.2f} nats/token")
        n, n0 = r.get("length"), start.get("length")
        if n is not None and n0 is not None and n >= max(LENGTH_FACTOR * n0, n0 + LENGTH_RISE):
            out.append(f"{role}: replies {n0:.1f} -> {n:.1f} tokens")
        if r.get("kl", 0.0) > KL_LIMIT:
            out.append(f"{role}: KL to the reference {r['kl']:.2f} nats/token")
        for k in ("entropy", "length"):
            if k in r and len(known.setdefault(k, [])) < BASELINE_ITERATIONS:
                known[k].append(r[k])
    return out


def _first_values(known: dict[str, Any]) -> dict[str, list[float]]:
    """A role's baseline values by statistic; a checkpoint written before the median kept one number, its
    first iteration's, which stays its whole baseline."""
    return {k: v if isinstance(v, list) else [v] * BASELINE_ITERATIONS for k, v in known.items()}


def iteration_row(run: Run, step: Iteration) -> dict[str, Any]:
    """The log row of one iteration: rollout statistics, PPO statistics (overall and per role), schedule."""
    overall, per_role = step.meters.means()
    row: dict[str, Any] = {"step": step.index + 1, "iteration": step.index + 1, "time": round(time.time(), 3)}
    row |= rollout_stats(step.episodes, step.exp, step.samples, run.cfg.ppo.reward)
    for role, stats in per_role.items():
        row["roles"].setdefault(role, {}).update(stats)
    acts = act_counts(len(step.trained), step.skipped)
    row |= {
        "acts": acts,
        "credit": credit_means(step.samples),
        "skipped": step.skipped,
        "generated_tokens": step.generated,
        "generated_tokens_total": run.state["generated_tokens"],
        "prefill": step.prefill,  # prompt, prefilled and cached tokens by in-process model
        "kl_mean": step.kl_mean,
        "kl_beta": run.learner.kl.beta,
        "logprob_drift": step.exp.drift if step.exp is not None else None,
        "lr": step.lrs[0],
        "value_lr": step.lrs[1] if len(step.lrs) > 1 else None,
        "train": overall,
    }
    row["warnings"] = act_warnings(acts) + runaway(run, row)
    if step.eval:
        row["eval"] = step.eval
    return row


def open_scalars(run: Run) -> Scalars | None:
    """Where each row's numbers go besides log.jsonl: TensorBoard in OUT/runs (unless --no-tensorboard or not
    installed) and the W&B run of --report-to wandb (continued on --resume); None when neither."""
    from ragteam.train.trl_args import tensorboard_available

    writer = wandb = None
    if run.cfg.tensorboard and tensorboard_available():
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run.out / "runs"))
    if run.cfg.report_to == "wandb":
        config = run.cfg.model_dump(mode="json")
        wandb = start_wandb(run.out, config, resume=run.resume_from is not None)
    return Scalars(writer, wandb) if writer is not None or wandb is not None else None


def iteration_line(row: dict[str, Any], credit: str, reward: str) -> str:
    """An iteration's terminal line: the acts trained (and why the others were not), the training reward as
    the credit function `credit` gave it out of the answers' reward `reward` (both named, as the user chose
    them: `--ppo.reward` is often the user's own), the answer's metrics, KL, the losses, held-out F1, phase
    seconds."""
    r, t, c = row["reward"], row.get("train", {}), row.get("credit") or {}
    ev = row.get("eval") or {}
    parts = [f"ppo it {row['iteration']}: {act_summary(row['acts'])}"]
    if c:
        parts.append(f"reward ({reward}, {credit} credit) {c['act']:.3f}/act {c['episode']:.3f}/episode")
    parts += [
        f"answer f1 {r['f1']:.3f} cover_em {r['cover_em']:.3f}",
        f"kl {row.get('kl_mean', 0):.4f} beta {row['kl_beta']:.3f}",
        f"pg {t.get('policy_loss', 0):.4f} vf {t.get('value_loss', 0):.4f} clip {t.get('clip_frac', 0):.3f}",
    ]
    if ev:
        parts.append(f"eval f1 {ev['f1']['mean']:.1f}")
    policy = (row.get("prefill") or {}).get("policy")
    if policy and policy["prompt_tokens"]:
        parts.append(f"prefilled {policy['prefilled']:.2f} of {policy['prompt_tokens']} prompt tokens")
    parts.append(" ".join(f"{k} {v:.0f}s" for k, v in row.get("seconds", {}).items()))
    return " | ".join(parts)


def log_iteration(run: Run, row: dict[str, Any]) -> None:
    with (run.out / "log.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    if run.scalars is not None:
        values = {k: v for k, v in flatten(row, sep="/").items() if k not in ("step", "iteration", "time")}
        run.scalars.log(values, row["step"])
    print(iteration_line(row, run.cfg.ppo.credit, run.cfg.ppo.reward), file=sys.stderr, flush=True)
    for warning in row.get("warnings", []):
        print(f"ppo it {row['iteration']}: WARNING {warning}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ a run that trained nothing


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


def earlier_acts(run: Run) -> list[dict[str, Any]]:
    """The act counts of the iterations a resumed run did before (its log.jsonl rows up to the checkpoint), so
    that `nothing_trained` judges the whole run; a row written before rows counted acts says how many samples
    it trained. [] for a fresh run."""
    path = run.out / "log.jsonl"
    if run.resume_from is None or not path.is_file():
        return []
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [
        r.get("acts") or {"total": r.get("samples", 0), "trained": r.get("samples", 0), "skipped": {}}
        for r in rows
    ]
