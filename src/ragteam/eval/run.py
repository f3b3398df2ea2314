"""`ragteam eval`: run a workflow over a benchmark file and write traces, metrics, statistics and plots.

Phases: select the questions (offset, limit) -> resume (skip those already in DIR/episodes.jsonl) ->
roll out the rest, streaming each finished episode to the trace -> score every selected question from the
trace (failed ones count 0) -> optional LLM judge -> statistics -> metrics.json, predictions.jsonl,
report.md, plots. DIR/config.yaml holds the resolved config; resuming with a different one is refused.
"""

from __future__ import annotations

import json
from functools import partial
from time import perf_counter
from typing import Any

from pydantic import Field

from ragteam.assemble.build import build_retriever, build_team, build_workflow, needs_retriever
from ragteam.assemble.config import JudgeConfig, TeamConfig
from ragteam.assemble.corpus import choose_corpus, corpus_facts
from ragteam.assemble.folder import TRACE_FILE, open_folder
from ragteam.eval import plots as plots_mod
from ragteam.eval.report import metrics_table, render_report
from ragteam.eval.skipped import write_skipped
from ragteam.llm.prefix_cache import prefill_summary
from ragteam.metrics.rewards import answer_rewards, eval_reward_help, get_reward
from ragteam.protocol import team_name
from ragteam.rollout.distributed import close_engine, spread
from ragteam.rollout.traces import TraceWriter, load_trace
from ragteam.rollout.tree import Episode
from ragteam.stats.episodes import primary_leaf, workflow_stats
from ragteam.stats.scores import aggregate, bootstrap_ci, question_rows
from ragteam.types import Question
from ragteam.workflows.registry import workflow_help


class EvalConfig(TeamConfig):
    """Evaluate one workflow on a benchmark file."""

    workflow: str = Field(..., description=workflow_help())
    data: str = Field(..., description="benchmark file (any reader format of ragteam.data.questions)")
    format: str | None = Field(None, description="reader format of --data (default: detected from the file)")
    out: str = Field(..., description="output folder: episodes.jsonl, metrics.json, report.md, plots, config")
    limit: int | None = Field(None, ge=1, description="evaluate at most this many questions")
    offset: int = Field(0, ge=0, description="skip this many questions first")
    skip_bad: bool = Field(
        False,
        description="skip malformed records of --data instead of stopping (counted in the report, their "
        "lines listed in skipped.jsonl)",
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="optional LLM judge endpoint")
    reward: str | None = Field(
        None,
        description=eval_reward_help(),  # --help reads the registry again: a named team's rewards too
        json_schema_extra={"help_from": "ragteam.metrics.rewards:eval_reward_help"},
    )
    overwrite: bool = Field(False, description="discard the episodes already in --out instead of resuming")
    repair: bool = Field(
        False,
        description="resume from a damaged episodes.jsonl: keep every intact episode, move the bad lines to "
        "episodes.jsonl.torn and run their questions again",
    )
    progress: bool = Field(True, description="show a progress bar")


def failure_reasons(episodes: list[Episode], missing: int) -> dict[str, int]:
    """Failed episodes grouped by the first line of their error; questions without an episode as `missing`."""
    out: dict[str, int] = {}
    for ep in episodes:
        if ep.status == "failed":
            reason = (ep.error or "unknown").strip().splitlines()[0][:160] if ep.error else "unknown"
            out[reason] = out.get(reason, 0) + 1
    if missing:
        out["no episode recorded"] = missing
    return out


def _judge(
    cfg: JudgeConfig, questions: list[Question], episodes: dict[str, Episode]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Judge verdicts (1/0) of the answered questions by id, and the judge's settings and counts."""
    from ragteam.metrics.judge import LLMJudge

    model = cfg.chat_model()
    todo = [q for q in questions if q.id in episodes and episodes[q.id].status != "failed"]
    judge = LLMJudge(model)
    verdicts = judge.judge(todo, [episodes[q.id].answer for q in todo])
    info = {"endpoint": cfg.base_url, **judge.settings(), "counts": dict(judge.stats)}
    return {q.id: float(v) for q, v in zip(todo, verdicts)}, info


def add_reward(
    summary: dict[str, Any], rows: list[dict[str, Any]], episodes: dict[str, Episode], name: str
) -> None:
    """`--reward NAME`: every question's row gets the registered reward of its answer leaf (0 when it failed
    or has none; a failed or truncated leaf without metrics is 0 too, as in training), and the summary its
    mean and 95 % interval beside EM / F1 / cover-EM."""
    from ragteam.credit import leaf_reward

    if rows and all(name in row for row in rows):
        return  # a metric the rows hold already (f1, em, cover_em; judge with --judge.base-url)
    reward = get_reward(name)
    for row in rows:
        ep = episodes.get(row["id"])
        leaf = primary_leaf(ep) if ep is not None and not row["failed"] else None
        try:
            row[name] = 0.0 if leaf is None else leaf_reward(leaf, lambda lf, q=ep.question: reward(lf, q))
        except KeyError as e:  # a metric the leaves do not record (judge without --judge.base-url)
            raise ValueError(f"--reward {name}: question {row['id']}: {e.args[0]}") from None
    values = [row[name] for row in rows]
    summary["metrics"][name] = sum(values) / len(values) if values else 0.0
    summary["ci95"][name] = list(bootstrap_ci(values))


def run_eval(cfg: EvalConfig, log=print) -> dict[str, Any]:
    """Run (or resume) the eval described by `cfg`; write every output into `cfg.out`; return the summary."""
    from ragteam.metrics.answer import NORMALIZATION, score_answer

    t0 = perf_counter()
    if cfg.reward is not None:
        get_reward(cfg.reward)  # an unknown name fails before any rollout
    run = open_folder(cfg, "eval", log=log)
    qset, selected, out, trace, todo = run.qset, run.selected, run.out, run.trace, run.todo

    skipped = write_skipped(qset, out)
    build_cfg, corpus = choose_corpus(
        cfg, cfg.data, qset.format, needs_retriever(cfg), progress=cfg.progress, questions=selected
    )
    retriever_name = None
    retriever = None
    calls: dict[str, int] = {}
    if todo:
        # in this process, or on Ray actors that each build the run (--rollout.workers, rollout/distributed.py)
        parts = spread(partial(build_team, build_cfg, data=cfg.data, fmt=qset.format), build_cfg.rollout)
        retriever = parts.retriever
        retriever_name = getattr(retriever, "name", None) or getattr(parts.engine, "retriever_name", None)
        with TraceWriter(trace) as writer:
            parts.engine.run(
                parts.workflow,
                todo,
                reward=answer_rewards,
                on_episode=writer.write,
                progress=cfg.progress,
            )
        calls = dict(parts.engine.calls)
        close_engine(parts.engine)

    recorded = load_trace(trace)
    episodes = {q.id: recorded[q.id] for q in selected if q.id in recorded}
    judged, judge_info = _judge(cfg.judge, selected, episodes) if cfg.judge.base_url else (None, None)
    rows = question_rows(selected, episodes, score=score_answer, judge=judged)
    team = build_workflow(cfg)  # cheap: no model is built
    name = team_name(team, cfg.workflow)  # its class's name
    summary: dict[str, Any] = {"workflow": name, **aggregate(rows)}
    if cfg.reward is not None:
        add_reward(summary, rows, episodes, cfg.reward)
    summary["stats"] = workflow_stats([episodes[q.id] for q in selected if q.id in episodes])
    if judge_info is not None:
        summary["judge"] = judge_info
    summary["failures"] = failure_reasons(list(episodes.values()), len(selected) - len(episodes))
    summary["corpus"] = corpus_facts(
        corpus,
        selected,
        list(episodes.values()),
        k=cfg.topk,
        retriever=lambda: retriever or build_retriever(build_cfg, cfg.data, qset.format),
    )
    summary["skipped"] = skipped
    summary.update(
        normalization=NORMALIZATION,
        data=str(cfg.data),
        format=qset.format,
        offset=cfg.offset,
        retriever=retriever_name,
        needs=sorted(team.needs),  # the parts the team calls: report.md names only those models
        engine_calls=calls,
        prefix_cache=prefill_summary(calls),  # prompt / prefilled / cached tokens by in-process model
        seconds=perf_counter() - t0,
        config=cfg.model_dump(mode="json"),
    )
    with open(out / "predictions.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (out / "metrics.json").write_text(
        json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    names = plots_mod.write_plots(summary["stats"], out)
    (out / "report.md").write_text(render_report(summary, plots=names), encoding="utf-8")
    log(metrics_table([summary]))
    log(
        f"wrote {out}/: {TRACE_FILE}, metrics.json, predictions.jsonl, report.md, config.yaml"
        + "".join(f", {n}" for n in names)
    )
    return summary
