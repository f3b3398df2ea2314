"""Paired comparison of two runs on the same questions: is B better than A, or is the gap noise?

Two runs' means with separate bootstrap intervals (the eval report) overlap long after a paired test can
tell them apart: most of a run's variance is in which questions are hard, and that variance is shared when
both runs answer the same questions. Pairing by question id removes it, so these functions work on the
per-question differences: a paired bootstrap of the mean difference (any metric) and McNemar's exact test
(0/1 metrics: only the questions where exactly one run is right carry evidence). Behaviour is paired too: the
invalid-act rate (replies the parser could not read over all policy acts, pooled, as report.md gives it), its
interval from resampling the paired questions, and an exact sign test over the questions whose share of
invalid acts changed; training that teaches a format shows there first. A
difference short of significance comes with the number of paired questions that would detect it
(`questions_for_power`): no effect and too few questions read the same in a p-value alone.

Pure functions; numpy only (the binomial tail is exact, with `math.comb`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ragteam.rollout.tree import Episode
from ragteam.stats.episodes import invalid_acts, primary_leaf
from ragteam.stats.scores import episode_scores

PAIRED_METRICS = ("em", "f1", "cover_em")
BINARY_METRICS = frozenset({"em", "cover_em", "mc_acc"})
"""Metrics that are 0 or 1 per question: McNemar applies to them."""

RESAMPLES = 10000
SEED = 0
_ZERO = 1e-12  # a mean difference this small is 0 (float sums of F1 values are not exact)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], n: int = RESAMPLES, seed: int = SEED) -> dict:
    """Mean of b - a over paired values (same questions, same order), its 95 % percentile interval, and a
    two-sided bootstrap p-value.

    The per-question differences are resampled with replacement `n` times (seeded, so a report is
    reproducible). p is twice the share of resampled means that are 0 or of the other sign than the observed
    mean, capped at 1: how often the data, redrawn, would not show the direction observed. p = 1 when the
    observed mean difference is 0 (every difference 0, or gains and losses cancelling). p = 0 means no
    resample crossed 0: read it as p < 1/n, not as certainty.
    """
    if len(a) != len(b):
        raise ValueError(f"paired values must have the same length (got {len(a)} and {len(b)})")
    if len(a) == 0:
        raise ValueError("no paired values to compare")
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    observed = float(d.mean())
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)  # one row of questions per resample
    lo, hi, p = _interval_and_p(observed, means)
    sd = float(d.std(ddof=1)) if len(d) > 1 else 0.0
    return {
        "n": len(d),
        "mean_diff": observed,
        "ci95": [float(lo), float(hi)],
        "p": p,
        "resamples": n,
        "sd_diff": sd,
        "n_for_power": questions_for_power(observed, sd),
        "detectable": detectable_effect(sd, len(d)),
    }


def _interval_and_p(observed: float, resampled: np.ndarray) -> tuple[float, float, float]:
    """The percentile 95 % interval of the resampled differences, and the two-sided bootstrap p: twice the share
    of resamples on the far side of 0 from the observed difference (1 when nothing was observed)."""
    lo, hi = np.quantile(resampled, [0.025, 0.975])
    if abs(observed) <= _ZERO:
        return float(lo), float(hi), 1.0
    crossed = resampled <= _ZERO if observed > 0 else resampled >= -_ZERO
    return float(lo), float(hi), min(1.0, 2.0 * float(crossed.mean()))


Z_ALPHA, Z_POWER = 1.959964, 0.841621  # two-sided 5 % level; 80 % power


def questions_for_power(mean_diff: float, sd_diff: float) -> int | None:
    """Paired questions needed for a two-sided test at the 5 % level to detect `mean_diff` with 80 % power,
    given the per-question differences' standard deviation (normal approximation: n = ((z_0.975 + z_0.8) sd /
    mean)^2). The question a result short of significance raises: is it no effect, or too few questions?
    None when the observed difference is 0 (no effect to power for)."""
    if abs(mean_diff) <= _ZERO:
        return None
    return max(2, math.ceil(((Z_ALPHA + Z_POWER) * sd_diff / abs(mean_diff)) ** 2))


def detectable_effect(sd_diff: float, n: int) -> float | None:
    """The smallest mean difference `n` paired questions detect at the 5 % level with 80 % power, given the
    per-question differences' standard deviation: (z_0.975 + z_0.8) sd / sqrt(n), `questions_for_power`
    solved for the effect. What a pre-registered plan states before its run (with the sd of an earlier run),
    and what a null result after it rules out. None for fewer than 2 questions."""
    if n < 2:
        return None
    return (Z_ALPHA + Z_POWER) * sd_diff / math.sqrt(n)


def binomial_cdf_half(k: int, n: int) -> float:
    """P[X <= k] for X ~ Binomial(n, 1/2), exact: sum of C(n, i) for i <= k, over 2^n."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """McNemar's exact test on paired right/wrong outcomes (same questions, same order).

    Only discordant pairs count: n10 (a right, b wrong) and n01 (a wrong, b right). Under "no difference"
    each discordant pair goes either way with probability 1/2, so the two-sided p-value is
    min(1, 2 * P[X <= min(n01, n10)]) with X ~ Binomial(n01 + n10, 1/2); p = 1 without discordant pairs.
    Exact rather than the chi-square approximation, which is poor for the few discordant pairs of a small eval.
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must have the same length (got {len(a)} and {len(b)})")
    n10 = sum(1 for x, y in zip(a, b) if x and not y)
    n01 = sum(1 for x, y in zip(a, b) if y and not x)
    discordant = n01 + n10
    p = 1.0 if discordant == 0 else min(1.0, 2.0 * binomial_cdf_half(min(n01, n10), discordant))
    return {"n01": n01, "n10": n10, "discordant": discordant, "p": p}


def sign_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """The exact two-sided sign test on paired values (same questions, same order): `down` questions where b
    is below a, `up` where above, ties dropped; p = min(1, 2 * P[X <= min(down, up)]), X ~ Binomial(down + up,
    1/2) (McNemar's test is this test on 0/1 values); p = 1 without a change."""
    if len(a) != len(b):
        raise ValueError(f"paired values must have the same length (got {len(a)} and {len(b)})")
    down = sum(1 for x, y in zip(a, b) if y < x)
    up = sum(1 for x, y in zip(a, b) if y > x)
    p = 1.0 if down + up == 0 else min(1.0, 2.0 * binomial_cdf_half(min(down, up), down + up))
    return {"down": down, "up": up, "p": p}


def pooled_bootstrap(
    a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]], n: int = RESAMPLES, seed: int = SEED
) -> dict:
    """Difference b - a of two pooled rates over paired questions, in percent points: each question holds
    (count, total) per run (invalid acts, policy acts), a run's rate is sum(count) / sum(total) (the rate
    report.md shows, `stats.episodes.invalid_rate`). Questions are resampled with replacement `n` times
    (seeded), both runs' pairs together, and each resample's rates recomputed (a ratio estimator: a question
    with more acts weighs more, in the interval as in the rate); p as in `paired_bootstrap`."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired counts must be non-empty and of one length (got {len(a)} and {len(b)})")
    ka, na = (np.asarray(x, dtype=np.float64) for x in zip(*a))
    kb, nb = (np.asarray(x, dtype=np.float64) for x in zip(*b))

    def rate(k: np.ndarray, m: np.ndarray) -> np.ndarray:
        total = m.sum(axis=-1)
        return 100.0 * np.divide(k.sum(axis=-1), total, out=np.zeros_like(total), where=total > 0)

    observed = float(rate(kb, nb) - rate(ka, na))
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n, len(a)))
    lo, hi, p = _interval_and_p(observed, rate(kb[idx], nb[idx]) - rate(ka[idx], na[idx]))
    return {"n": len(a), "mean_diff": observed, "ci95": [float(lo), float(hi)], "p": p, "resamples": n}


def invalid_share(ep: Episode) -> float | None:
    """Percent of the episode's policy acts whose reply did not parse (`action.valid` False); None when it has
    no policy act (a workflow with nothing to train)."""
    acts = ep.policy_nodes()
    if not acts:
        return None
    bad = sum(1 for n in acts if n.action is not None and not n.action.valid)
    return 100.0 * bad / len(acts)


def _pooled(counts: Sequence[tuple[int, int]]) -> float:
    total = sum(n for _, n in counts)
    return 100.0 * sum(k for k, _ in counts) / total if total else 0.0


def _by_id(episodes: Iterable[Episode]) -> dict[str, Episode]:
    """Episodes by question id, in first-seen order; a later record of a question replaces the earlier one
    (as when an eval trace is resumed)."""
    out: dict[str, Episode] = {}
    for ep in episodes:
        out[ep.question.id] = ep
    return out


def _ids(ids: Sequence[str], shown: int = 10) -> str:
    return ", ".join(ids[:shown]) + (f", ... ({len(ids)} in all)" if len(ids) > shown else "")


def pair_episodes(
    a_episodes: Iterable[Episode], b_episodes: Iterable[Episode], intersect: bool = False
) -> tuple[list[tuple[Episode, Episode]], int]:
    """(A's episode, B's episode) per question id in A's order, and how many questions were dropped.

    Runs over different questions cannot be compared question by question: without `intersect` that is a
    ValueError naming the ids only one run has; with it, only the shared questions are paired. The same id
    with another question text is always an error (two datasets numbering their questions alike).
    """
    a, b = _by_id(a_episodes), _by_id(b_episodes)
    only_a = [q for q in a if q not in b]
    only_b = [q for q in b if q not in a]
    if (only_a or only_b) and not intersect:
        parts = [f"{len(x)} only in {name} ({_ids(x)})" for name, x in (("A", only_a), ("B", only_b)) if x]
        raise ValueError(
            f"the two runs do not cover the same questions: {'; '.join(parts)}; pass --intersect "
            f"(intersect=True) to compare the {len(a) - len(only_a)} shared questions only"
        )
    shared = [q for q in a if q in b]
    differ = [q for q in shared if a[q].question.question != b[q].question.question]
    if differ:
        raise ValueError(f"the same question ids hold different questions in the two runs: {_ids(differ)}")
    if not shared:
        raise ValueError("the two runs share no question")
    return [(a[q], b[q]) for q in shared], len(only_a) + len(only_b)


def _row(ep: Episode, rewards: Sequence[str] = ()) -> dict[str, Any]:
    """One episode's metric values x100, normalized answer and whether it failed. A failed or answerless
    episode scores 0 with answer "" (as in the eval report); scores missing on the leaf are recomputed
    from its answer, as `ragteam eval` does. `rewards`: registered rewards (`ragteam.metrics.rewards`) scored
    on the answer leaf too, as `ragteam eval --reward` scores them."""
    from ragteam.credit import leaf_reward
    from ragteam.metrics.answer import normalize_answer, score_answer
    from ragteam.metrics.rewards import for_question, get_reward

    scores = episode_scores(ep, score=score_answer)
    row: dict[str, Any] = {k: 100.0 * float(v) for k, v in (scores or {}).items()}
    leaf = primary_leaf(ep) if scores is not None else None
    for name in rewards:
        if leaf is not None and name not in row:
            row[name] = 100.0 * leaf_reward(leaf, for_question(get_reward(name), ep.question))
    row["failed"] = scores is None
    row["answer"] = "" if scores is None else normalize_answer(ep.answer)
    row["invalid"] = invalid_share(ep)
    row["invalid_acts"] = invalid_acts(ep)  # (invalid, acts): the pooled rate's parts
    return row


def compare_runs(
    a_episodes: Iterable[Episode],
    b_episodes: Iterable[Episode],
    metrics: Sequence[str] = PAIRED_METRICS,
    intersect: bool = False,
    n: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """Run B against run A on the questions they share (see `pair_episodes`).

    Per metric: A's and B's means (x100, like the eval reports), the paired bootstrap of B - A (x100) and,
    for 0/1 metrics, McNemar. When either run has policy acts, `invalid`: the per-question percent of
    invalid acts, with the bootstrap and the sign test. Counts: questions paired, dropped (with `intersect`), answers changed (the
    normalized predictions differ), better and worse (by F1), failed episodes per run.
    """
    pairs, dropped = pair_episodes(a_episodes, b_episodes, intersect)
    rewards = [m for m in metrics if m not in (*PAIRED_METRICS, "mc_acc")]
    ra, rb = [_row(x, rewards) for x, _ in pairs], [_row(y, rewards) for _, y in pairs]

    def values(rows: list[dict[str, Any]], metric: str) -> list[float]:
        return [r.get(metric, 0.0) for r in rows]

    out: dict[str, Any] = {}
    for m in metrics:
        va, vb = values(ra, m), values(rb, m)
        out[m] = {
            "a": float(np.mean(va)),
            "b": float(np.mean(vb)),
            "bootstrap": paired_bootstrap(va, vb, n, seed),
        }
        if m in BINARY_METRICS:
            out[m]["mcnemar"] = mcnemar([v >= 50.0 for v in va], [v >= 50.0 for v in vb])
    if any(r["invalid"] is not None for r in ra + rb):  # policy acts to judge: their invalid rate, paired
        ca, cb = [r["invalid_acts"] for r in ra], [r["invalid_acts"] for r in rb]
        out["invalid"] = {  # the pooled rate of report.md (stats.episodes.invalid_rate), in percent
            "a": _pooled(ca),
            "b": _pooled(cb),
            "bootstrap": pooled_bootstrap(ca, cb, n, seed),
            "sign": sign_test([r["invalid"] or 0.0 for r in ra], [r["invalid"] or 0.0 for r in rb]),
        }
    fa, fb = values(ra, "f1"), values(rb, "f1")
    counts = {
        "questions": len(pairs),
        "dropped": dropped,
        "changed": sum(1 for x, y in zip(ra, rb) if x["answer"] != y["answer"]),
        "better": sum(1 for x, y in zip(fa, fb) if y > x),
        "worse": sum(1 for x, y in zip(fa, fb) if y < x),
        "failed_a": sum(1 for r in ra if r["failed"]),
        "failed_b": sum(1 for r in rb if r["failed"]),
    }
    return {"counts": counts, "metrics": out, "resamples": n, "seed": seed}
