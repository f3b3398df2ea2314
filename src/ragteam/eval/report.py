"""Markdown rendering of an eval summary (the dict written as `metrics.json`). Pure string functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

METRIC_LABELS = {"em": "EM", "f1": "F1", "cover_em": "cover-EM", "mc_acc": "MC acc", "judge": "judge"}


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _num(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table; the first column left-aligned, the others right-aligned."""
    align = [":--"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def metrics_table(summaries: Sequence[dict[str, Any]]) -> str:
    """One row per eval summary: workflow, n, each metric in percent, failed questions."""
    keys = [k for k in METRIC_LABELS if any(k in s["metrics"] for s in summaries)]
    header = ["workflow", "n", *(METRIC_LABELS[k] for k in keys), "failed"]
    rows = [
        [
            s["workflow"],
            s["n"],
            *(_pct(s["metrics"][k]) if k in s["metrics"] else "–" for k in keys),
            s["failed"],
        ]
        for s in summaries
    ]
    return table(header, rows)


def _distribution_table(dist: dict[str, Any], label: str) -> str:
    n = sum(dist["histogram"].values())
    rows = [[k, v, _pct(v / n) + " %"] for k, v in dist["histogram"].items()]
    return table([label, "questions", "share"], rows) + f"\n\nmean {_num(dist['mean'])}, max {dist['max']}"


def render_report(summary: dict[str, Any], plots: Sequence[str] = ()) -> str:
    """The full `report.md` of one eval: metrics, then each statistics table, then the plots."""
    stats = summary["stats"]
    cfg = summary.get("config", {})
    out = [f"# Evaluation of `{summary['workflow']}`", ""]
    facts = [f"- questions: {summary['n']} (failed: {summary['failed']})"]
    if summary.get("data"):
        facts.append(f"- data: `{summary['data']}` (format {summary.get('format', '?')})")
    for role in ("policy", "llm"):
        if isinstance(cfg.get(role), dict):
            m = cfg[role]
            where = f" at {m['base_url']}" if m.get("base_url") else ""
            facts.append(f"- {role}: {m.get('backend', '?')} `{m.get('model', '?')}`{where}")
    if summary.get("retriever"):
        facts.append(f"- retriever: {summary['retriever']}")
    if summary.get("judge"):
        j = summary["judge"]
        counts = j.get("counts", {})
        facts.append(
            f"- LLM judge: `{j.get('model', '?')}` at {j.get('endpoint', '?')} (prompt {j.get('prompt', '?')}; "
            f"{counts.get('unparseable', 0)} unreadable verdicts, {counts.get('errors', 0)} failed calls)"
        )
    if "seconds" in summary:
        facts.append(f"- wall time of this invocation: {_num(summary['seconds'], 1)} s")
    out += facts + ["", "## Answer metrics (%)", "", metrics_table([summary]), ""]
    if summary.get("ci95"):
        spans = ", ".join(
            f"{METRIC_LABELS.get(k, k)} {_pct(lo)}–{_pct(hi)}" for k, (lo, hi) in summary["ci95"].items()
        )
        out += [f"95 % bootstrap intervals over questions ({summary['n']} resampled): {spans}.", ""]
    if summary.get("normalization"):
        out += [f"Answers normalized: {summary['normalization']}", ""]
    if summary.get("failures"):
        rows = [[reason.replace("|", "\\|"), count] for reason, count in summary["failures"].items()]
        out += ["## Failed questions (scored 0)", "", table(["reason", "questions"], rows), ""]

    if "strategy" in stats:
        st = stats["strategy"]
        rows = [[s, c, _pct(st["ratio"][s]) + " %"] for s, c in st["counts"].items()]
        out += ["## Strategy", "", table(["strategy", "questions", "share"], rows), ""]
    if stats["depth"]["n"]:
        out += ["## Depth (policy acts per question)", "", _distribution_table(stats["depth"], "depth"), ""]
    if stats["retrieval_rounds"]["n"]:
        out += [
            "## Retrieval rounds per question",
            "",
            _distribution_table(stats["retrieval_rounds"], "rounds"),
            "",
        ]

    inv = stats["invalid_actions"]
    if inv["acts"]:
        rows = [[r, v["acts"], v["invalid"], _pct(v["rate"]) + " %"] for r, v in inv["by_role"].items()]
        rows.append(["**all**", inv["acts"], inv["invalid"], _pct(inv["rate"]) + " %"])
        out += ["## Invalid actions", "", table(["role", "acts", "invalid", "rate"], rows), ""]
        rows = [[role, kind, c] for role, kinds in stats["actions"].items() for kind, c in kinds.items()]
        out += ["## Actions chosen", "", table(["role", "action", "count"], rows), ""]

    if stats.get("penalties"):
        rows = [[r, v["penalized"], _num(v["mean"], 3)] for r, v in stats["penalties"].items()]
        out += [
            "## Per-role penalties",
            "",
            table(["role", "penalized acts", "mean penalty per act"], rows),
            "",
        ]
    info = stats.get("answer_info", {})
    if info.get("counts") or info.get("numeric"):
        out += ["## What the workflow recorded on its answers", ""]
        if info.get("counts"):
            rows = [[k, v, c] for k, values in info["counts"].items() for v, c in values.items()]
            out += [table(["key", "value", "questions"], rows), ""]
        if info.get("numeric"):
            rows = [[k, _num(v["mean"]), _num(v["max"]), v["n"]] for k, v in info["numeric"].items()]
            out += [table(["key", "mean", "max", "questions"], rows), ""]

    per = stats["per_question"]
    rows = [
        [
            who,
            _num(per["calls"][who]),
            _num(per["tokens"][who]["prompt"], 1),
            _num(per["tokens"][who]["completion"], 1),
        ]
        for who in ("policy", "llm")
    ]
    out += [
        "## Model calls and tokens per question",
        "",
        table(["model", "calls", "prompt tokens", "completion tokens"], rows),
        "",
        (
            f"Retrieval: {_num(per['calls']['retrieve'])} calls and {_num(per['calls']['retrieve_queries'])} "
            "queries per question."
        ),
        "",
    ]
    lat = stats["latency_seconds"]
    out += [
        "## Latency per question (s)",
        "",
        table(
            ["mean", "p50", "p90", "max", "total"],
            [[_num(lat[k]) for k in ("mean", "p50", "p90", "max", "total")]],
        ),
        "",
    ]
    if plots:
        out += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(out)
