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
    """One row per eval summary: workflow, n, each metric in percent, failed questions. A registered reward
    that `eval --reward NAME` scored is a column of its own after the built-in metrics, under its name, so
    the reward a user defined is on screen where the answer metrics are."""
    keys = [k for k in METRIC_LABELS if any(k in s["metrics"] for s in summaries)]
    keys += list(dict.fromkeys(k for s in summaries for k in s["metrics"] if k not in METRIC_LABELS))
    header = ["workflow", "n", *(METRIC_LABELS.get(k, k) for k in keys), "failed"]
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


def shows_c3po_depth(stats: dict[str, Any]) -> bool:
    """Whether a run's report has C-3PO's depth t (section and plot): only for the runs whose episodes record
    C-3PO's strategy (its router's choice), the workflow the section describes; another team's depth t is
    still in metrics.json (`tree_depth`), and its acts per question are in every report."""
    return "strategy" in stats and bool(stats.get("tree_depth", {}).get("n"))


def render_report(summary: dict[str, Any], plots: Sequence[str] = ()) -> str:
    """The full `report.md` of one eval: metrics, then each statistics table, then the plots."""
    stats = summary["stats"]
    cfg = summary.get("config", {})
    out = [f"# Evaluation of `{summary['workflow']}`", ""]
    facts = [f"- questions: {summary['n']} (failed: {summary['failed']})"]
    if summary.get("data"):
        facts.append(f"- data: `{summary['data']}` (format {summary.get('format', '?')})")
    needs = summary.get("needs", ("policy", "llm"))  # a metrics.json from before `needs`: both, as then
    for role in ("policy", "llm"):
        if role in needs and isinstance(cfg.get(role), dict):  # not the LLM of a team that calls none
            m = cfg[role]
            where = f" at {m['base_url']}" if m.get("base_url") else ""
            facts.append(f"- {role}: {m.get('backend', '?')} `{m.get('model', '?')}`{where}")
    if summary.get("retriever"):
        facts.append(f"- retriever: {summary['retriever']}")
    if summary.get("corpus"):
        facts.append(f"- corpus: {corpus_line(summary['corpus'])}")
    if "skipped" in summary:
        facts.append(f"- skipped records of the data file: {skipped_line(summary['skipped'])}")
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

    if summary.get("corpus"):
        out += corpus_section(summary["corpus"])
    if "strategy" in stats:
        out += strategy_section(stats["strategy"], stats.get("strategy_excluded"))
    if shows_c3po_depth(stats):
        out += [
            "## Depth (C-3PO's t, Fig. 6)",
            "",
            "Steps from the question (depth 0) to the answer: each policy act, LLM call and the answer "
            "itself adds 1, a search does not (it leads to the filter's state): direct answering 3, a single "
            "pass 4, planning 5 + 2 per retrieval-filter round when the decider ends the loop (4 + 2 per "
            "round at the round limit). The same depth t that C-3PO's fork schedule K(t) and depth limit "
            "read (docs/workflows.md, Depth t). Finished questions only.",
            "",
            _distribution_table(stats["tree_depth"], "depth"),
            "",
        ]
    if stats["depth"]["n"]:
        out += ["## Policy acts per question", "", _distribution_table(stats["depth"], "acts"), ""]
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
    out += truncation_section(stats.get("truncation"))
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


def skipped_line(skipped: dict[str, Any]) -> str:
    """`0`, or how many records were skipped and the file beside the report that lists their lines."""
    n = skipped.get("records", 0)
    if not n:
        return "0"
    return f"{n} (--skip-bad; their line numbers and reasons are in `{skipped.get('file')}`)"


def _share(k: int, n: int) -> str:
    return f"{k} of {n}" + (f" ({_pct(k / n)} %)" if n else "")


def corpus_line(c: dict[str, Any]) -> str:
    """One line: the corpus' name, its size and whether it holds the run's gold paragraphs."""
    line = c.get("name", c.get("kind", "?"))
    if "passages" in c:
        line += f"; {c['passages']:,} passages"
    gold = c.get("gold")
    if gold and gold.get("questions"):
        line += f"; gold paragraphs present for {_share(gold['all_present'], gold['questions'])} questions"
    elif gold is not None:
        line += "; gold paragraphs: unknown (no question names them)"
    elif c.get("kind") not in (None, "none"):
        line += "; size and gold paragraphs unknown (a remote service)"
    return line


def corpus_section(c: dict[str, Any]) -> list[str]:
    """The corpus: what it is, its size, gold presence, recall@k of the questions, what the workflow found."""
    out = ["## Corpus", "", f"- {corpus_line(c)}"]
    if c.get("source"):
        out.append(f"- built from: {c['source']}")
    if c.get("index"):
        out.append(f"- index folder: `{c['index']}`")
    r = c.get("recall_at_k")
    if r:
        k = r["k"]
        out.append(
            f"- retrieval with the question as query, over the {r['questions']} questions with gold ids: "
            f"recall@{k} (every gold paragraph in the top {k}) {_pct(r['recall'])} %, "
            f"support recall@{k} (fraction found) {_pct(r['support_recall'])} %"
        )
    w = c.get("workflow_recall")
    if w:
        out.append(
            f"- the workflow's own searches (path to the answer, {w['questions']} finished questions with "
            f"gold ids): every gold paragraph retrieved for {_pct(w['recall'])} %, fraction found "
            f"{_pct(w['support_recall'])} %"
        )
    out.append("")
    if c.get("pool_sources"):
        rows = [
            [
                f"`{src['path']}`",
                src["kind"],
                src.get("format", ""),
                src.get("passages", 0),
                src.get("new", 0),
                (src.get("note") or "").replace("|", "\\|")[:120],
            ]
            for src in c["pool_sources"]
        ]
        out += [table(["file", "read as", "format", "passages", "new after dedup", "note"], rows), ""]
    return out


def strategy_section(st: dict[str, Any], excluded: dict[str, Any] | None) -> list[str]:
    """The strategy ratio over valid router acts, and the acts left out of it, by reason."""
    out = ["## Strategy", ""]
    if st["n"]:
        rows = [[s, c, _pct(st["ratio"][s]) + " %"] for s, c in st["counts"].items()]
        out += [table(["strategy", "questions", "share of valid choices"], rows), ""]
    else:
        out += ["No router act was valid: there is no strategy ratio to report.", ""]
    if excluded:
        left = []
        labels = {
            "invalid": "malformed router act (the fallback strategy was taken)",
            "forced": "strategy forced (--strategy or a forced prefix)",
            "no_act": "stopped before the router acted",
        }
        for reason, label in labels.items():
            part = excluded.get(reason, {})
            if part.get("n"):
                took = ", ".join(f"{k} {v}" for k, v in part["took"].items())
                left.append(f"- {label}: {part['n']} ({took})")
        if left:
            head = f"Shares are over the {st['n']} questions whose router act was valid. " if st["n"] else ""
            out += [
                head + "Left out of the ratio:",
                "",
                *left,
                "",
                "Invalid acts of every role are in *Invalid actions* below.",
                "",
            ]
    return out


def truncation_section(t: dict[str, Any] | None) -> list[str]:
    """Calls whose prompt was cut to fit, or whose reply reached its max tokens (nothing when none was)."""
    if not t or not any(v["prompt_cut"] or v["reply_cut"] for v in t["totals"].values()):
        return []
    rows = [
        [
            who,
            role,
            r["calls"],
            r["prompt_cut"],
            r["reply_cut"],
            r["reply_cut_invalid"] if who == "policy" else "–",
        ]
        for who, roles in t["by_role"].items()
        for role, r in roles.items()
    ]
    header = [
        "model",
        "role",
        "calls",
        "prompts cut to fit",
        "replies cut at max tokens",
        "cut and fell back",
    ]
    return ["## Cut to fit (prompts and replies)", "", table(header, rows), ""]
