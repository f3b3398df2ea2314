"""PNG training curves from a PPO run's `log.jsonl`: rewards, held-out scores, KL, and per-role statistics."""

from __future__ import annotations

import json
from pathlib import Path

# (panel title, how to read one value from a log row, per role?)
PANELS: list[tuple[str, str, bool]] = [
    ("training reward (the credit's, per act; answer F1 / cover-EM)", "reward", False),
    ("held-out score (greedy, %)", "eval", False),
    ("credited reward per role", "reward", True),
    ("KL to reference per role (per token)", "kl", True),
    ("clip fraction per role", "clip_frac", True),
    ("value loss per role", "value_loss", True),
    ("entropy per role (nats/token)", "entropy", True),
    ("response length per role (tokens)", "length", True),
    ("invalid acts per role", "invalid", True),
]


def read_rows(out: str | Path) -> list[dict]:
    path = Path(out) / "log.jsonl"
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def write_curves(out: str | Path, name: str = "curves.png") -> Path | None:
    """Plot `out/log.jsonl` into `out/<name>` (a 3x3 grid); None when there is nothing to plot."""
    rows = read_rows(out)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = curves_figure(rows)
    path = Path(out) / name
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def curves_figure(rows: list[dict]):
    """The 3x3 grid of `PANELS` for a run's log rows (a matplotlib Figure). The iteration axes span the run and
    tick at whole numbers only: an iteration is a count (matplotlib's default put ticks at 1.0, 1.2, ... 2.0,
    and a panel with one point, the held-out score of a run evaluated once, at 1.96, 1.98, ...)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(3, 3, figsize=(15, 11))
    its = [r["iteration"] for r in rows]
    roles = sorted({role for r in rows for role in r.get("roles", {})})
    for ax, (title, key, per_role) in zip(axes.flat, PANELS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(min(its) - 0.5, max(its) + 0.5)  # every panel spans the run, one eval point included
        if key == "reward" and not per_role:
            credited = [(r["iteration"], r["credit"]["act"]) for r in rows if r.get("credit")]
            if credited:
                ax.plot(*zip(*credited), marker="o", label="credit (per act)")
            for metric in ("f1", "cover_em", "em"):
                ax.plot(its, [r["reward"][metric] for r in rows], marker=".", label=metric)
        elif key == "eval":
            ev = [(r["iteration"], r["eval"]) for r in rows if r.get("eval")]
            for metric in ("f1", "cover_em", "em") if ev else ():
                xs = [i for i, _ in ev]
                ys = [e[metric]["mean"] for _, e in ev]
                lo = [e[metric]["ci95"][0] for _, e in ev]
                hi = [e[metric]["ci95"][1] for _, e in ev]
                ax.errorbar(xs, ys, yerr=[[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]],
                            marker="o", capsize=3, label=metric)  # fmt: skip
        else:
            for role in roles:
                pts = [
                    (r["iteration"], r["roles"][role][key])
                    for r in rows
                    if key in r.get("roles", {}).get(role, {})
                ]
                if pts:
                    ax.plot(*zip(*pts), marker=".", label=role)
        if ax.has_data():
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not recorded in this run", ha="center", va="center", transform=ax.transAxes)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
