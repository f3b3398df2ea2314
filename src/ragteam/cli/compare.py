"""`ragteam compare`: run B against run A on the same questions (paired bootstrap and McNemar; for the share of
invalid policy acts per question, the bootstrap and an exact sign test).

ragteam compare runs/eval-sft runs/eval-ppo                       # eval folders (their episodes.jsonl)
ragteam compare runs/eval-sft runs/ppo/eval/iteration-8.jsonl --metrics f1 --json
ragteam compare runs/a runs/b --intersect                         # only the questions both runs answered

Each run is an eval output folder or an episodes .jsonl file (PPO's OUT/eval/iteration-N.jsonl has the same
format). Episodes are paired by question id; runs over different questions are refused unless --intersect.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ragteam.config import Config as BaseConfig

if TYPE_CHECKING:
    from ragteam.rollout.tree import Episode

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"')

    class Config(BaseConfig):
        """Settings of `ragteam compare`."""

        run_a: str = Field(
            ...,
            description="run A (the baseline): an eval output folder or an episodes .jsonl (or .jsonl.gz) file",
            json_schema_extra={"positional": True},
        )
        run_b: str = Field(
            ...,
            description="run B (compared with A): an eval output folder or an episodes .jsonl (or .jsonl.gz) file",
            json_schema_extra={"positional": True},
        )
        metrics: list[str] = Field(
            default_factory=lambda: ["em", "f1", "cover_em"],
            min_length=1,
            description="metrics to compare: em, f1, cover_em, mc_acc, or any registered reward "
            "(ragteam.register_reward; each answer scored with it); McNemar is added for the 0/1 ones: em, "
            "cover_em, mc_acc",
        )
        intersect: bool = Field(
            False,
            description="pair only the questions both runs hold; without it, runs over different questions "
            "are refused",
        )
        resamples: int = Field(
            10000, ge=100, le=1_000_000, description="bootstrap resamples of the per-question differences"
        )
        seed: int = Field(0, description="seed of the bootstrap")
        json: bool = Field(False, description="print the comparison as JSON instead of a Markdown table")


def read_run(path: str | Path) -> list[Episode]:
    """The episodes of a run: `path/episodes.jsonl` for a folder, else the file itself. ValueError naming the
    path when it is missing, holds no episodes or has a bad line."""
    from ragteam.assemble.folder import TRACE_FILE
    from ragteam.rollout.traces import read_episodes

    path = Path(path)
    if path.is_dir():
        if not (path / TRACE_FILE).is_file():
            raise ValueError(
                f"{path}: no {TRACE_FILE} in this folder (give an eval output folder or a .jsonl)"
            )
        path = path / TRACE_FILE
    elif not path.exists():
        raise ValueError(f"{path}: no such file or folder")
    episodes = list(read_episodes(path))  # a bad line: ValueError "FILE:LINE: not an episode record"
    if not episodes:
        raise ValueError(f"{path}: no episodes in this file")
    return episodes


def _p(p: float, resamples: int | None = None) -> str:
    """A p-value for the table; a bootstrap p of 0 means no resample crossed 0: p < 1/resamples."""
    if resamples is not None and p == 0.0:
        return f"<{1 / resamples:.2g}"
    return f"{p:.3g}"


def render(result: dict[str, Any], a: str, b: str) -> str:
    """The comparison as a Markdown table (percent points) and a counts line."""
    from ragteam.eval.report import METRIC_LABELS, table

    rows = []
    for m, r in result["metrics"].items():
        boot = r["bootstrap"]
        lo, hi = boot["ci95"]
        rows.append(
            [
                "invalid acts" if m == "invalid" else METRIC_LABELS.get(m, m),
                f"{r['a']:.1f}",
                f"{r['b']:.1f}",
                f"{boot['mean_diff']:+.1f} [{lo:+.1f}, {hi:+.1f}]",
                _p(boot["p"], result["resamples"]),
                _p(r["mcnemar"]["p"]) if "mcnemar" in r else _p(r["sign"]["p"]) if "sign" in r else "–",
            ]
        )
    header = ["metric", "A", "B", "B-A [95% CI]", "p (bootstrap)", "p (McNemar / sign)"]
    c = result["counts"]
    line = (
        f"{c['questions']} questions, {c['changed']} answers changed, {c['better']} better, {c['worse']} worse "
        f"(by F1); failed: A {c['failed_a']}, B {c['failed_b']}"
    )
    if c["dropped"]:
        line += f"; {c['dropped']} questions held by only one run were dropped (--intersect)"
    needed = [
        f"{METRIC_LABELS.get(m, m)} {r['bootstrap']['n_for_power']:,}"
        for m, r in result["metrics"].items()
        if m != "invalid" and r["bootstrap"]["n_for_power"] is not None
    ]
    if needed:
        line += (
            "\nquestions needed for p < 0.05 with 80 % power at the observed difference (normal approximation): "
            + ", ".join(needed)
        )
    detectable = [
        f"{METRIC_LABELS.get(m, m)} {r['bootstrap']['detectable']:.1f}"
        for m, r in result["metrics"].items()
        if m != "invalid" and r["bootstrap"].get("detectable")  # None or 0: no spread to judge by
    ]
    if detectable:
        line += (
            f"\nsmallest difference {c['questions']} questions detect (p < 0.05, 80 % power, the observed spread): "
            + ", ".join(detectable)
        )
    return f"A: {a}\nB: {b}\n\n{table(header, rows)}\n\n{line}"


def check_metrics(metrics: list[str], runs: dict[str, list[Episode]]) -> None:
    """ValueError naming a run that cannot have `mc_acc` (no multiple-choice question in it). Why: it was
    compared as 0.0 against 0.0, a difference of nothing that looked like a result. em, f1 and cover_em are
    scored from gold answers, which every episode holds. Any other name must be a registered reward
    (`ragteam.metrics.rewards`: a ValueError naming the known ones)."""
    from ragteam.metrics.rewards import get_reward

    for m in metrics:
        if m not in BUILT_IN_METRICS:
            get_reward(m)
    if "mc_acc" not in metrics:
        return
    for name, episodes in runs.items():
        if not any(ep.question.choices for ep in episodes):
            raise ValueError(
                f"{name}: no multiple-choice question in this run, so no mc_acc to compare; "
                "choose --metrics among em, f1, cover_em"
            )


BUILT_IN_METRICS = ("em", "f1", "cover_em", "mc_acc")
"""What compare scores without a reward registry: the answer metrics every episode's gold answers give."""


def import_teams(*runs: str | Path) -> None:
    """Import the module of the team each run was made by (`team.module` in the run folder's config.yaml: an
    eval folder, or the PPO run above `OUT/rollouts/` and `OUT/eval/` files), so a reward that module registers
    is known to `--metrics` here as it was to the eval that named the team by its module path. Why: a team on
    PYTHONPATH, not installed, registers its reward on import, and compare names no team. A run without a
    config.yaml, a ragteam team or a module no longer importable adds nothing (the unknown-reward error then
    names the known ones)."""
    import importlib

    import yaml

    for run in map(Path, runs):
        for folder in (run,) if run.is_dir() else (run.parent, run.parent.parent):
            config = folder / "config.yaml"
            if not config.is_file():
                continue
            try:
                data = yaml.safe_load(config.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                break
            team = data.get("team") if isinstance(data, dict) else None
            module = team.get("module") if isinstance(team, dict) else None
            if isinstance(module, str) and module:
                try:
                    importlib.import_module(module)
                except ImportError:
                    pass  # gone since the run: a reward it registered is reported unknown below
            break


def run(cfg: Config) -> int:
    from ragteam.stats.paired import compare_runs

    if any(m not in BUILT_IN_METRICS for m in cfg.metrics):
        import_teams(cfg.run_a, cfg.run_b)
    a, b = read_run(cfg.run_a), read_run(cfg.run_b)
    check_metrics(list(cfg.metrics), {cfg.run_a: a, cfg.run_b: b})
    result = compare_runs(a, b, cfg.metrics, intersect=cfg.intersect, n=cfg.resamples, seed=cfg.seed)
    if cfg.json:
        print(json.dumps({"a": cfg.run_a, "b": cfg.run_b, **result}, indent=2))
    else:
        print(render(result, cfg.run_a, cfg.run_b))
    return 0
