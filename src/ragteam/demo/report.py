"""The demo's report: `report.md` and a self-contained `report.html` (images inlined, traces to unfold).

It reads only what the stages wrote (eval summaries, trace files, training logs), so it can be rebuilt from a
finished `runs/demo` folder at any time.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from ragteam.eval.report import table

TRACES_PER_TEAM = 3


def _pct_ci(summary: dict[str, Any], metric: str) -> str:
    m, ci = summary["metrics"][metric], summary["ci95"][metric]
    return f"{100 * m:.1f} [{100 * ci[0]:.1f}-{100 * ci[1]:.1f}]"


def _invalid(summary: dict[str, Any]) -> str:
    inv = summary["stats"].get("invalid_actions") or {}
    return f"{100 * inv['rate']:.0f} %" if inv.get("acts") else "-"


def results_rows(before: dict[str, dict], after: dict[str, dict]) -> list[list[str]]:
    """One row per (workflow, policy): scores with 95 % bootstrap intervals, invalid acts, seconds."""
    rows = []
    for wf, summary in before.items():
        for label, s in (("untrained", summary), ("trained", after.get(wf))):
            if s is None:
                continue
            rows.append(
                [wf, label, str(s["n"]), *(_pct_ci(s, k) for k in ("em", "f1", "cover_em")), _invalid(s),
                 f"{s.get('seconds', 0):.0f}"]
            )  # fmt: skip
    return rows


RESULT_HEADER = ["workflow", "policy", "n", "EM", "F1", "cover-EM", "invalid acts", "seconds"]


def _plot_c3po(before: dict | None, after: dict | None, out: Path) -> list[Path]:
    """Strategy ratio and depth histogram of C-3PO, untrained next to trained."""
    if before is None:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sides = [("untrained", before)] + ([("trained", after)] if after is not None else [])
    paths = []
    for key, title, xlabel in (
        ("strategy", "C-3PO strategy ratio", "strategy"),
        ("tree_depth", "C-3PO depth t (Fig. 6: acts, LLM calls, the answer)", "depth"),
    ):
        fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=90)
        if key == "strategy":
            names = sorted({n for _, s in sides for n in (s["stats"].get("strategy") or {}).get("ratio", {})})
            values = [[100 * (s["stats"].get("strategy") or {}).get("ratio", {}).get(n, 0) for n in names]
                      for _, s in sides]  # fmt: skip
            ax.set_ylabel("questions (%)")
        else:
            hist = [s["stats"].get(key, s["stats"]["depth"])["histogram"] for _, s in sides]
            names = sorted({n for h in hist for n in h}, key=int)
            values = [[h.get(n, 0) for n in names] for h in hist]
            ax.set_ylabel("questions")
        width = 0.8 / len(sides)
        for i, ((label, _), vals) in enumerate(zip(sides, values)):
            ax.bar([x + i * width for x in range(len(names))], vals, width, label=label)
        ax.set_xticks([x + width * (len(sides) - 1) / 2 for x in range(len(names))], names)
        ax.set_xlabel(xlabel)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"c3po-{key.replace('_', '-')}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _plot_sft(log: list[dict], out: Path) -> Path | None:
    pts = [(r["step"], r["loss"]) for r in log if "loss" in r and "step" in r]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=90)
    ax.plot(*zip(*pts), marker=".")
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are counts: no 1.5
    ax.set_ylabel("loss (assistant tokens)")
    ax.set_title("supervised warm start", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = out / "sft-loss.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _steps(sft: dict[str, Any]) -> int:
    return sum(1 for r in sft.get("log", []) if "loss" in r)


def _traces(before: dict[str, dict], after: dict[str, dict]) -> list[dict[str, Any]]:
    """A few held-out questions per trained team: gold, both answers, both episodes as text."""
    from ragteam.eval.trace_view import format_episode
    from ragteam.rollout.traces import load_trace

    items = []
    for wf, summary in after.items():
        old = load_trace(Path(before[wf]["folder"]) / "episodes.jsonl") if wf in before else {}
        new = load_trace(Path(summary["folder"]) / "episodes.jsonl")
        for qid in list(new)[:TRACES_PER_TEAM]:
            ep = new[qid]
            items.append(
                {
                    "workflow": wf,
                    "question": ep.question.question,
                    "gold": " | ".join(ep.question.golden_answers),
                    "before": old[qid].answer if qid in old else None,
                    "after": ep.answer,
                    "before_trace": format_episode(old[qid], limit=600) if qid in old else "",
                    "after_trace": format_episode(ep, limit=600),
                }
            )
    return items


def _ppo_row_text(log: list[dict]) -> str:
    if not log:
        return ""
    rows = []
    for r in log:
        roles = r.get("roles", {})
        rows.append(
            [str(r["iteration"]), f"{100 * r['reward']['f1']:.1f}",
             *(f"{roles.get(role, {}).get('kl', float('nan')):.3f}" for role in sorted(roles)),
             f"{sum(r.get('seconds', {}).values()):.0f}"]
        )  # fmt: skip
    roles = sorted(log[-1].get("roles", {}))
    return table(["iteration", "reward F1", *(f"KL {role}" for role in roles), "seconds"], rows)


def write_report(
    out: Path,
    settings: dict[str, Any],
    before: dict[str, dict],
    after: dict[str, dict],
    training: dict[str, Any],
    seconds: dict[str, float],
) -> list[Path]:
    """Write summary.md (the table), report.md and report.html into `out`; return their paths."""
    images: list[tuple[str, Path]] = []
    sft = training.get("sft")
    if sft and (p := _plot_sft(sft.get("log", []), out)):
        images.append(("Supervised warm start: loss per step", p))
    ppo = training.get("ppo")
    if ppo:
        from ragteam.train.curves import write_curves

        if p := write_curves(ppo["folder"]):
            images.append(
                ("PPO: reward, held-out score, and per role KL, clip fraction, value loss, entropy", p)
            )
    c3po = _plot_c3po(before.get("c3po"), after.get("c3po"), out)
    images += [("C-3PO: strategy ratio, untrained vs trained", c3po[0]),
               ("C-3PO: depth histogram (as counted in its Fig. 6)", c3po[1])] if c3po else []  # fmt: skip

    results = table(RESULT_HEADER, results_rows(before, after))
    timing = table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in seconds.items()])
    note = (
        f"Demo ({settings['preset']} preset): held-out {settings['held_out']} of the bundled HotpotQA file, "
        f"training on {settings['train']}; policy and LLM {settings['model']}; retriever "
        f"{settings['retriever']} over {settings['passages']} passages. Supervised rows: "
        f"{settings['roles_trained']}; the other teams show what that one shared policy does in their roles. "
        "Scores in %, 95 % bootstrap intervals over the held-out questions."
    )
    (out / "summary.md").write_text(note + "\n\n" + results + "\n", encoding="utf-8")

    traces = _traces(before, after)
    md = ["# ragteam demo report", "", note, "", "## Before and after training", "", results, ""]
    if sft:
        md += ["## Training", "", f"SFT rows: {sft.get('rows', 0)}; steps: {_steps(sft)}.", ""]
    if ppo:
        md += [_ppo_row_text(ppo.get("log", [])), ""]
    md += [f"![{title}]({p.resolve().relative_to(out.resolve())})" if p.resolve().is_relative_to(out.resolve())
           else f"![{title}]({p})" for title, p in images]  # fmt: skip
    md += ["", "## Wall time", "", timing, "", "## Traces", ""]
    for t in traces:
        md += [f"- **{t['workflow']}**: {t['question']} gold: {t['gold']}; untrained: {t['before']!r}; "
               f"trained: {t['after']!r}"]  # fmt: skip
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / "report.html").write_text(
        render_html(note, results_rows(before, after), training, images, timing_rows=seconds, traces=traces),
        encoding="utf-8",
    )
    return [out / "summary.md", out / "report.md", out / "report.html"]


CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f2f2f2}td:first-child,td:nth-child(2){text-align:left}img{max-width:100%;border:1px solid #ddd}
details{margin:.4em 0;border:1px solid #ddd;padding:.3em .6em}summary{cursor:pointer}
pre{white-space:pre-wrap;font-size:12px;background:#fafafa;padding:.5em}.grid{display:flex;gap:1em}
.grid>div{flex:1;min-width:0}figure{margin:1em 0}figcaption{font-size:13px;color:#555}
"""


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(path: Path, title: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(title)}</figcaption></figure>"
    )


def render_html(
    note: str,
    rows: list[list[str]],
    training: dict[str, Any],
    images: list[tuple[str, Path]],
    timing_rows: dict[str, float],
    traces: list[dict[str, Any]],
) -> str:
    """One HTML page, no external files: tables, inlined PNGs, and traces in <details> elements."""
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ragteam demo report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>ragteam demo report</h1>",
        f"<p>{esc(note)}</p>",
        "<h2>Before and after training</h2>",
        _html_table(RESULT_HEADER, rows),
    ]
    ppo_log = (training.get("ppo") or {}).get("log", [])
    if training:
        parts.append("<h2>Training</h2>")
        sft = training.get("sft") or {}
        parts.append(f"<p>SFT rows: {sft.get('rows', 0)}; SFT steps: {_steps(sft)}; "
                     f"PPO iterations: {len(ppo_log)}.</p>")  # fmt: skip
    parts += [_img(p, title) for title, p in images]
    parts.append("<h2>Wall time</h2>")
    parts.append(_html_table(["stage", "seconds"], [[k, f"{v:.0f}"] for k, v in timing_rows.items()]))
    if traces:
        parts.append("<h2>Traces</h2>")
    for t in traces:
        parts.append(
            f"<details><summary><b>{esc(t['workflow'])}</b>: {esc(t['question'])} "
            f"<i>gold</i>: {esc(t['gold'])} · <i>untrained</i>: {esc(str(t['before']))} · "
            f"<i>trained</i>: {esc(str(t['after']))}</summary><div class='grid'>"
            f"<div><h4>untrained</h4><pre>{esc(t['before_trace'])}</pre></div>"
            f"<div><h4>trained</h4><pre>{esc(t['after_trace'])}</pre></div></div></details>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)
