"""`ragteam collect`: roll out a workflow with a teacher, then turn the recorded trees into training rows.

Phases: select the questions (offset, limit) -> resume (skip those already in DIR/episodes.jsonl; a resumed
run must keep the settings that change rollouts) -> roll out the rest, streaming each finished tree to the
trace -> (judge the answers, for --accept judge) -> rows from every selected question's tree -> write
DIR/sft.jsonl or DIR/pairs.jsonl, DIR/summary.json, and print a short table. Rows are always rebuilt from
the whole trace, so a resumed run, or a rerun with another --accept, gives the rows of all its questions.

| mode    | command                          | rollout                            | rows                  |
|---------|----------------------------------|------------------------------------|-----------------------|
| sft     | collect sft --workflow c3po|...  | C-3PO tree, or --samples solutions | kept nodes (`sft.py`) |
| mmoa    | collect sft --workflow mmoa      | --samples rewrites + retrieval     | heuristic (`mmoa.py`) |
| process | collect process --workflow gym:* | keep-one-of-N, N = --candidates    | pairs (`process.py`), |
|         |                                  |                                    | chosen actions as SFT |

The rollout is the workflow's own answer, not a branch on its name: the tree is the one its package
registered (`--tree`), and a team that declares a labelling workflow (`sft_labelling`: MMOA-RAG's) has that
rolled out instead, its rows made by the function `LABELLED_ROWS` holds for its `collect_mode`.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from time import perf_counter
from typing import Any

from ragteam.assemble.build import needs_retriever
from ragteam.assemble.corpus import choose_corpus
from ragteam.assemble.folder import RESUME_IGNORED as RUN_IGNORED
from ragteam.assemble.folder import TRACE_FILE, open_folder
from ragteam.collect.accept import AcceptRule, Verdicts, judge_answers
from ragteam.collect.config import CollectConfig
from ragteam.collect.mmoa import mmoa_rows
from ragteam.collect.process import process_pairs
from ragteam.collect.rows import write_rows
from ragteam.collect.sft import sft_rows, tree_counts
from ragteam.rollout.distributed import close_engine, spread
from ragteam.rollout.traces import TraceWriter, load_trace
from ragteam.rollout.tree import Episode

SFT_FILE = "sft.jsonl"
PAIRS_FILE = "pairs.jsonl"
SUMMARY_FILE = "summary.json"

RESUME_IGNORED = RUN_IGNORED | {"accept", "keep_invalid", "relabel_invalid", "min_overlap"}
"""Settings that only change how rows are made from the trees, so a resumed run may change them (on top of
eval's: limit, offset, out, progress, batch sizes...)."""


# ---------------------------------------------------------------------------------------------- phases


def build_collection(cfg: CollectConfig, data: str, fmt: str):
    """(workflow, engine) of the collection: `build_team` with the teacher as the policy, or, for a team that
    declares a labelling workflow (MMOA-RAG's SFT data), that workflow's engine over the teacher and the
    retriever alone."""
    from ragteam.assemble.build import build_engine, build_retriever, build_team

    run_cfg = cfg.run_config()
    workflow = cfg.labelling(run_cfg.workflow_config())
    if workflow is None:
        parts = build_team(run_cfg, data=data, fmt=fmt)
        return parts.workflow, parts.engine
    from ragteam.llm.factory import build_chat_model

    retriever = build_retriever(run_cfg, data, fmt)
    teacher = build_chat_model(cfg.policy) if "policy" in workflow.needs else None
    return workflow, build_engine(run_cfg, teacher, None, retriever)


def validate(cfg: CollectConfig) -> None:
    """Fail before any model loads: a known workflow with policy roles, consistent rollout settings."""
    from ragteam.assemble.build import build_workflow

    run_cfg = cfg.run_config()  # raises on clashing fork / temperature settings
    workflow = build_workflow(run_cfg)
    if not workflow.roles:
        raise ValueError(f"workflow {cfg.workflow!r} has no policy role: there is nothing to collect for it")
    if cfg.mode == "process" and cfg.ranker == "prm" and not cfg.prm.model:
        raise ValueError("--ranker prm needs a process reward model: pass --prm.model DIR")
    if cfg.labelled and cfg.mode not in LABELLED_ROWS:
        raise ValueError(
            f"collect makes no rows of labelling mode {cfg.mode!r}: known {sorted(LABELLED_ROWS)}"
        )
    if AcceptRule.parse(cfg.accept).needs_judge and not cfg.labelled and not cfg.judge.base_url:
        raise ValueError("--accept judge needs a judge endpoint: pass --judge.base-url URL")


# ---------------------------------------------------------------------------------------------- rows


def collect_sft(cfg: CollectConfig, episodes: list[Episode], verdicts: Verdicts | None) -> tuple[list, dict]:
    """Rejection sampling: rows of the kept nodes of every tree, and the counts for the summary."""
    rule = AcceptRule.parse(cfg.accept)
    from ragteam.assemble.build import build_workflow

    roles = build_workflow(cfg.run_config()).roles
    writers = {role.name: role.write for role in roles if role.write is not None}
    rows: list = []
    dropped: Counter = Counter()
    sampled: Counter = Counter()
    leaves = correct = accepted = 0
    for ep in episodes:
        accept = rule.predicate(ep, verdicts)
        got, why = sft_rows(
            ep,
            accept,
            value=lambda leaf, ep=ep: rule.value(ep, leaf, verdicts),
            teacher=cfg.teacher_name,
            keep_invalid=cfg.keep_invalid,
            relabel=writers if cfg.relabel_invalid else None,
        )
        rows += got
        dropped.update(why)
        tc = tree_counts(ep, accept)
        sampled.update(tc["policy_nodes"])
        leaves += tc["leaves"]
        correct += tc["correct_leaves"]
        accepted += tc["correct_leaves"] > 0
    stats = {
        "leaves": leaves,
        "correct_leaves": correct,
        "kept_paths": correct,
        "accepted_questions": accepted,
        "rows": len(rows),
        "rows_per_role": dict(Counter(r.role for r in rows)),
        "sampled_per_role": dict(sampled),
        "dropped": dict(dropped),
    }
    return rows, stats


def collect_mmoa(cfg: CollectConfig, episodes: list[Episode]) -> tuple[list, dict]:
    """MMOA-RAG's warm-start rows of every question, and its settings and counts for the summary."""
    rows: list = []
    counts: Counter = Counter()
    for ep in episodes:
        got, c = mmoa_rows(ep, variant=cfg.variant, min_overlap=cfg.min_overlap, teacher=cfg.teacher_name)
        rows += got
        counts.update(c)
    with_support = counts.pop("with_supporting_ids", 0)
    recall_sum = counts.pop("baseline_recall_sum", 0.0)
    stats = {
        "samples": cfg.samples,
        "variant": cfg.variant,
        "k": cfg.workflow_config().candidates,
        "rewrites": counts.pop("rewrites", 0),
        "rewrites_kept": counts.pop("rewrites_kept", 0),
        "questions_with_supporting_ids": with_support,
        "mean_baseline_recall": recall_sum / with_support if with_support else None,
        "accepted_questions": len({r.question_id for r in rows}),
        "rows": len(rows),
        "rows_per_role": dict(Counter(r.role for r in rows)),
        "dropped": dict(counts),
    }
    return rows, stats


LABELLED_ROWS = {"mmoa": collect_mmoa}
"""The rows of each labelling workflow's episodes, by its `collect_mode`."""


def collect_process(
    cfg: CollectConfig, episodes: list[Episode], verdicts: Verdicts | None
) -> tuple[list, list, dict]:
    """Ranked pairs on correct trajectories, the chosen actions of those trajectories as SFT rows, counts."""
    rule = AcceptRule.parse(cfg.accept)
    pairs: list = []
    chosen_rows: list = []
    counts: Counter = Counter()
    accepted = 0
    for ep in episodes:
        accept = rule.predicate(ep, verdicts)
        got, c = process_pairs(ep, accept, keep_invalid=cfg.keep_invalid)
        pairs += got
        counts.update(c)
        rows, _ = sft_rows(
            ep, accept, source="process_chosen", teacher=cfg.teacher_name, keep_invalid=cfg.keep_invalid
        )
        chosen_rows += rows
        accepted += tree_counts(ep, accept)["correct_leaves"] > 0
    stats = {
        "accepted_questions": accepted,
        "groups": counts.pop("groups", 0),
        "groups_on_correct_paths": counts.pop("groups_on_correct_paths", 0),
        "pairs": len(pairs),
        "pairs_per_role": dict(Counter(p.role for p in pairs)),
        "sft_rows": len(chosen_rows),
        "skipped": dict(counts),
    }
    return pairs, chosen_rows, stats


# ---------------------------------------------------------------------------------------------- report


def summary_table(summary: dict[str, Any]) -> str:
    """A short plain-text table of a collection's summary."""
    keys = [
        "questions",
        "episodes",
        "failed_episodes",
        "leaves",
        "correct_leaves",
        "kept_paths",
        "accepted_questions",
        "acceptance_rate",
        "rewrites",
        "rewrites_kept",
        "groups_on_correct_paths",
        "pairs",
        "rows",
        "sft_rows",
        "seconds",
    ]
    lines = [f"collect {summary['command']} · {summary['workflow']} · accept {summary['accept']}"]
    for k in keys:
        if k in summary and summary[k] is not None:
            v = summary[k]
            lines.append(f"  {k:<24} {v:.3f}" if isinstance(v, float) else f"  {k:<24} {v}")
    roles = sorted({*summary.get("sampled_per_role", {}), *summary.get("rows_per_role", {})})
    roles += sorted(set(summary.get("pairs_per_role", {})) - set(roles))
    if roles:
        lines.append(f"  {'role':<12} {'sampled':>8} {'rows':>8} {'pairs':>8}")
        for role in roles:
            cells = [
                summary.get(f, {}).get(role, "-")
                for f in ("sampled_per_role", "rows_per_role", "pairs_per_role")
            ]
            lines.append(f"  {role:<12} " + " ".join(f"{str(c):>8}" for c in cells))
    return "\n".join(lines)


def _empty_note(summary: dict[str, Any]) -> str | None:
    """Why nothing was written, when nothing was (so an empty file is not a mystery)."""
    if summary["mode"] == "process" and not summary["pairs"]:
        return (
            f"no pairs written: {summary['accepted_questions']} of {summary['questions']} questions passed "
            f"--accept {summary['accept']}; candidates skipped on their paths: {summary['skipped'] or 'none'}"
        )
    if summary["mode"] == "sft" and not summary["rows"]:
        return (
            f"no rows written: {summary['correct_leaves']} of {summary['leaves']} leaves passed --accept "
            f"{summary['accept']}; kept nodes dropped: {summary['dropped'] or 'none'}"
        )
    if summary["mode"] in LABELLED_ROWS and not summary["rows"]:
        return f"no rows written: {summary['dropped'] or 'no usable episode'}"
    return None


# ---------------------------------------------------------------------------------------------- command


def _team_name(cfg: CollectConfig) -> str:
    """The collected team's one name (`protocol.team_name`: its class's, else --workflow)."""
    from ragteam.assemble.build import build_workflow
    from ragteam.protocol import team_name

    return team_name(build_workflow(cfg.run_config()), cfg.workflow)


def run_collect(cfg: CollectConfig, log=print) -> dict[str, Any]:
    """Run (or resume) the collection `cfg` describes; write every output into `cfg.out`; the summary."""
    from ragteam.metrics.rewards import answer_rewards

    t0 = perf_counter()
    validate(cfg)
    run = open_folder(cfg, f"collect {cfg.what}", RESUME_IGNORED, log)
    qset, selected, out, trace, todo = run.qset, run.selected, run.out, run.trace, run.todo
    calls: dict[str, int] = {}
    ranking: dict[str, int] = {}  # the ranker's tallies (malformed LLM rankings...), when it runs here
    # the corpus (--corpus): its index built once here, then opened by every builder of the collection
    built, corpus = choose_corpus(
        cfg, cfg.data, qset.format, needs_retriever(cfg.run_config()), cfg.progress, questions=selected
    )
    if todo:
        # in this process, or on Ray actors that each build it (--rollout.workers, rollout/distributed.py)
        workflow, engine = spread(
            partial(build_collection, built, cfg.data, qset.format), cfg.run_config().rollout
        )
        reward = None if cfg.labelled else answer_rewards
        with TraceWriter(trace) as writer:
            engine.run(workflow, todo, reward=reward, on_episode=writer.write, progress=cfg.progress)
        calls = dict(engine.calls)
        ranking = dict(getattr(getattr(engine, "scorer", None), "counts", None) or {})
        close_engine(engine)

    recorded = load_trace(trace)
    episodes = [recorded[q.id] for q in selected if q.id in recorded]
    rule = AcceptRule.parse(cfg.accept)
    verdicts, judge_info = None, None
    if rule.needs_judge and not cfg.labelled:
        verdicts, judge_info = judge_answers(cfg.judge, episodes)

    summary: dict[str, Any] = {
        "command": cfg.what,
        "mode": cfg.mode,
        "workflow": _team_name(cfg),
        "accept": f"({cfg.mode} heuristics)" if cfg.labelled else str(rule),
        "teacher": cfg.teacher_name,
        "corpus": corpus.name,
        "questions": len(selected),
        "episodes": len(episodes),
        "failed_episodes": sum(1 for ep in episodes if ep.status == "failed"),
    }
    files = [TRACE_FILE]
    if cfg.mode == "sft":
        rows, stats = collect_sft(cfg, episodes, verdicts)
        write_rows(out / SFT_FILE, rows)
        files.append(SFT_FILE)
        summary.update(tree=cfg.tree_kind, samples=cfg.samples if cfg.tree_kind == "samples" else None)
    elif cfg.labelled:
        rows, stats = LABELLED_ROWS[cfg.mode](cfg, episodes)
        write_rows(out / SFT_FILE, rows)
        files.append(SFT_FILE)
    else:
        pairs, rows, stats = collect_process(cfg, episodes, verdicts)
        write_rows(out / PAIRS_FILE, pairs)
        write_rows(out / SFT_FILE, rows)
        files += [PAIRS_FILE, SFT_FILE]
        summary.update(candidates=cfg.n_candidates, ranker=cfg.ranker)
        if ranking:  # this run's calls (not those of a resumed run's earlier episodes, nor Ray workers')
            summary["ranking"] = ranking
    summary.update(stats)
    summary["acceptance_rate"] = summary["accepted_questions"] / len(selected)
    if judge_info is not None:
        summary["judge"] = judge_info
    summary.update(
        data=str(cfg.data),
        format=qset.format,
        offset=cfg.offset,
        engine_calls=calls,
        rollout=cfg.resolved_rollout().model_dump(mode="json"),
        files=[*files, SUMMARY_FILE, "config.yaml"],
        seconds=perf_counter() - t0,
    )
    (out / SUMMARY_FILE).write_text(
        json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    log(summary_table(summary))
    note = _empty_note(summary)
    if note:
        log(note)
    log(f"wrote {out}/: " + ", ".join(summary["files"]))
    return summary
