"""Answer metrics of a run: per-question scores and their means over the evaluated questions.

Pure functions. A question's scores are the rewards the engine recorded on its episode's primary leaf
(`score_answer` of the final answer), recomputed with `score` when the leaf carries none. A question whose
episode failed, reached no answer or is missing scores 0 on every metric and is counted in `failed`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ragteam.rollout.tree import Episode
from ragteam.stats.episodes import primary_leaf
from ragteam.types import Question

ANSWER_METRICS = ("em", "f1", "cover_em")
"""Metrics reported for every question; `mc_acc` is added for multiple-choice questions."""

ScoreFn = Callable[[str, Question], dict[str, float]]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def episode_scores(ep: Episode | None, score: ScoreFn | None = None) -> dict[str, float] | None:
    """Scores of one episode's final answer, or None if it failed / has no answer / is missing."""
    if ep is None or ep.status == "failed":
        return None
    leaf = primary_leaf(ep)
    if leaf is None:
        return None
    if leaf.rewards:
        return dict(leaf.rewards)
    if score is not None:
        return score(leaf.answer or "", ep.question)
    return None


def question_rows(
    questions: Sequence[Question],
    episodes: Mapping[str, Episode],
    score: ScoreFn | None = None,
    judge: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """One row per question: id, prediction, gold answers, `failed`, and every metric (0 when failed)."""
    rows = []
    for q in questions:
        ep = episodes.get(q.id)
        scores = episode_scores(ep, score)
        failed = scores is None
        row: dict[str, Any] = {
            "id": q.id,
            "question": q.question,
            "golden_answers": list(q.golden_answers),
            "prediction": ep.answer if ep is not None and not failed else "",
            "failed": failed,
        }
        for key in ANSWER_METRICS:
            row[key] = 0.0 if failed else float(scores.get(key, 0.0))
        if q.choices is not None or (scores is not None and "mc_acc" in scores):
            row["mc_acc"] = 0.0 if failed else float(scores.get("mc_acc", 0.0))
        if judge is not None:
            row["judge"] = 0.0 if failed else float(judge.get(q.id, 0.0))
        rows.append(row)
    return rows


def bootstrap_ci(
    values: Sequence[float],
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (questions resampled with replacement).

    Seeded, so a report is reproducible; (0, 0) for no values. With 50 questions an F1 of 10 % typically
    spans several points either way: compare workflows on more questions before reading small gaps.
    """
    if len(values) == 0:
        return 0.0, 0.0
    x = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    tail = (1.0 - level) / 2
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(lo), float(hi)


def percent_means(episodes: Sequence[Episode], metrics: Sequence[str] = ANSWER_METRICS) -> dict[str, Any]:
    """`{metric: {"mean", "ci95"}}` in percent over the episodes' recorded scores (`episode_scores`), an
    episode that failed or reached no answer scoring 0 as in `question_rows`: the held-out numbers PPO logs
    after its greedy rollouts, with no question list to join on."""
    scores = [episode_scores(ep) or {} for ep in episodes]
    out: dict[str, Any] = {}
    for metric in metrics:
        values = [100.0 * s.get(metric, 0.0) for s in scores]
        lo, hi = bootstrap_ci(values)
        out[metric] = {"mean": float(np.mean(values)) if values else 0.0, "ci95": [lo, hi]}
    return out


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means of each metric over the rows that have it, their 95 % bootstrap intervals (`ci95`), the number
    of failed questions, and counts."""
    metrics: dict[str, float] = {}
    ci95: dict[str, list[float]] = {}
    for key in (*ANSWER_METRICS, "mc_acc", "judge"):
        values = [r[key] for r in rows if key in r]
        if values or key in ANSWER_METRICS:
            metrics[key] = sum(values) / len(values) if values else 0.0
            ci95[key] = list(bootstrap_ci(values))
    out: dict[str, Any] = {
        "n": len(rows),
        "metrics": metrics,
        "ci95": ci95,
        "failed": sum(1 for r in rows if r["failed"]),
    }
    if any("mc_acc" in r for r in rows):
        out["n_multiple_choice"] = sum(1 for r in rows if "mc_acc" in r)
    return out
