"""The output folder of a rollout over a question file, shared by `ragteam eval` and `ragteam collect`: the
questions it covers, its resumable trace (`episodes.jsonl`), and the resolved config that a resumption must
match. `train ppo` selects its questions the same way (`read_selected`).

`open_folder` reads and selects the questions (offset, limit), refuses a folder holding files another command
(or a person) wrote unless `--overwrite` (`ragteam.outdir`), creates the folder, drops the trace on
`--overwrite`, refuses to resume under settings that change rollouts, writes `config.yaml`, and returns
which questions still have to run. A trace damaged before its end stops the run with how to recover;
`--repair` keeps its intact episodes and reruns the questions of the bad lines (`rollout.traces`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ragteam.config import save_resolved
from ragteam.data.questions import QuestionSet
from ragteam.outdir import check_out_dir
from ragteam.rollout.traces import finished_ids, load_trace
from ragteam.types import Question

TRACE_FILE = "episodes.jsonl"

RESUME_IGNORED = frozenset(
    {
        "limit",
        "offset",
        "out",
        "overwrite",
        "repair",
        "progress",
        "skip_bad",
        "judge",
        "reward",
        "rollout.max_concurrent",
        "rollout.workers",
        "rollout.ray_address",
        "rollout.worker_cpus",
        "rollout.worker_gpus",
        *(
            f"{m}.{k}"
            for m in ("policy", "llm")
            for k in ("max_batch_size", "threads", "concurrency", "timeout", "retries")
        ),
    }
)
"""Settings that may change between an interrupted run and its resumption (they do not change answers)."""


@dataclass
class TraceFolder:
    """The selected questions, the question file's format, the trace path and the questions still to run."""

    qset: QuestionSet
    selected: list[Question]
    out: Path
    trace: Path
    done: set[str]

    @property
    def todo(self) -> list[Question]:
        return [q for q in self.selected if q.id not in self.done]


def read_selected(
    path: str, fmt: str | None, offset: int, limit: int | None, skip_bad: bool = False
) -> tuple[QuestionSet, list[Question]]:
    """The questions of `path` (its reader `fmt`, or detected) and their slice [offset, offset + limit)."""
    from ragteam.data.questions import read_questions

    qset = read_questions(path, fmt, skip_bad=skip_bad)
    return qset, select_questions(qset.questions, offset, limit)


def select_questions(questions: list[Question], offset: int, limit: int | None) -> list[Question]:
    """questions[offset : offset + limit]; duplicate ids are an error (resuming matches on ids)."""
    chosen = questions[offset : offset + limit if limit is not None else None]
    seen: set[str] = set()
    dupes = [q.id for q in chosen if q.id in seen or seen.add(q.id)]  # type: ignore[func-returns-value]
    if dupes:
        raise ValueError(f"question ids must be unique to evaluate: duplicated {sorted(set(dupes))[:5]}")
    return chosen


def flatten(d: dict[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    """A nested dict as one level of `a.b.c` keys (`sep` joins the names)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + sep, sep))
        else:
            out[key] = v
    return out


def config_differences(
    old: dict[str, Any],
    new: dict[str, Any],
    ignored: Iterable[str] = RESUME_IGNORED,
    old_cwd: str | None = None,
) -> list[str]:
    """Dotted settings that differ between two resolved configs, ignoring those a resumption may change. With
    `old_cwd` (where the old run started), two spellings of one existing file or folder are the same setting:
    `../data/q.jsonl` from one folder and `data/q.jsonl` from its parent do not differ."""
    ignored = tuple(ignored)

    def keep(key: str) -> bool:
        return not any(key == ign or key.startswith(ign + ".") for ign in ignored)

    def same_path(x: Any, y: Any) -> bool:
        if old_cwd is None or not (isinstance(x, str) and isinstance(y, str)) or not x or not y:
            return False
        a, b = (Path(old_cwd) / x).resolve(), Path(y).resolve()
        return a == b and b.exists()

    a, b = flatten(old), flatten(new)
    return sorted(
        k for k in set(a) | set(b) if keep(k) and a.get(k) != b.get(k) and not same_path(a.get(k), b.get(k))
    )


def check_resumable(cfg: BaseModel, out: Path, ignored: Iterable[str] = RESUME_IGNORED) -> None:
    """Refuse to add episodes to a trace recorded under settings that change rollouts."""
    saved = out / "config.yaml"
    if not (out / TRACE_FILE).exists() or not saved.exists():
        return
    try:
        doc = yaml.safe_load(saved.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"{saved}: not valid YAML ({e}); use --overwrite or another --out") from None
    new = cfg.model_dump(mode="json")
    # a key this config lacks reads nowhere now: another workflow's option, which configs of an older ragteam
    # listed for every workflow (`variant` beside `--workflow c3po`)
    old = {k: v for k, v in (doc.get("config") or {}).items() if k in new}
    diff = config_differences(old, new, ignored, old_cwd=doc.get("cwd"))
    if diff:
        a, b = flatten(old), flatten(new)
        shown = ", ".join(f"{k} ({a.get(k)!r} -> {b.get(k)!r})" for k in diff[:6])
        raise ValueError(
            f"{out} holds episodes of another configuration (differs in {shown}); to resume, keep those "
            "settings; otherwise pass --overwrite or choose another --out"
        )


def _team_package(cfg: Any) -> dict | None:
    """The team's package and version for config.yaml (None: ragteam's own team, or a config with none)."""
    from ragteam.workflows.registry import workflow_package

    name = getattr(cfg, "workflow", None)
    return workflow_package(name) if isinstance(name, str) else None


def open_folder(
    cfg: Any, command: str, ignored: Iterable[str] = RESUME_IGNORED, log: Callable[[str], Any] = print
) -> TraceFolder:
    """Prepare `cfg.out` for a rollout over `cfg.data` (see the module docstring)."""
    qset, selected = read_selected(cfg.data, cfg.format, cfg.offset, cfg.limit, skip_bad=cfg.skip_bad)
    if qset.skipped:
        log(f"skipped {qset.skipped} malformed records of {cfg.data}")
    if not selected:
        raise ValueError(
            f"{cfg.data}: no questions at offset {cfg.offset} (the file has {len(qset.questions)})"
        )
    out = Path(cfg.out)
    check_out_dir(
        out, command, cfg.overwrite
    )  # someone else's config, metrics or report: not ours to replace
    out.mkdir(parents=True, exist_ok=True)
    trace = out / TRACE_FILE
    if cfg.overwrite and trace.exists():
        trace.unlink()
    check_resumable(cfg, out, ignored)
    save_resolved(cfg, out, command, team=_team_package(cfg))
    # a damaged trace stops here with how to recover; with --repair its intact episodes are kept
    done = finished_ids(load_trace(trace, drop_bad=getattr(cfg, "repair", False))) & {q.id for q in selected}
    folder = TraceFolder(qset, selected, out, trace, done)
    if done:
        log(
            f"resuming: {len(done)} of {len(selected)} questions already in {trace}, {len(folder.todo)} to run"
        )
    return folder
