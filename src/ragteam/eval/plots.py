"""PNG plots of an eval's statistics (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragteam.eval.report import shows_c3po_depth


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_strategy(strategy: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Bar chart of the share of questions per strategy (C-3PO's strategy ratio)."""
    plt = _pyplot()
    names = list(strategy["ratio"])
    shares = [100 * strategy["ratio"][s] for s in names]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    bars = ax.bar(names, shares, color="#4C72B0")
    for bar, s in zip(bars, names):
        ax.annotate(
            str(strategy["counts"][s]),
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("questions (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title or f"strategy ratio (n={strategy['n']})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def plot_histogram(dist: dict[str, Any], path: str | Path, xlabel: str, title: str = "") -> Path:
    """Histogram of an integer distribution (`stats.distribution`), one bar per value, gaps shown as 0."""
    plt = _pyplot()
    hist = {int(k): v for k, v in dist["histogram"].items()}
    xs = list(range(min(hist, default=0), max(hist, default=0) + 1))
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
    ax.bar(xs, [hist.get(x, 0) for x in xs], color="#55A868")
    ax.set_xticks(xs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("questions")
    ax.set_title(title or f"{xlabel} (mean {dist['mean']:.2f}, n={dist['n']})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def write_plots(stats: dict[str, Any], out_dir: str | Path) -> list[str]:
    """Write the plots that apply to these statistics into `out_dir`; return their file names."""
    out = Path(out_dir)
    names = []
    if "strategy" in stats:
        plot_strategy(stats["strategy"], out / "strategy.png")
        names.append("strategy.png")
    if shows_c3po_depth(stats):  # C-3PO's depth t (Fig. 6): each act, LLM call and the answer on the path
        plot_histogram(stats["tree_depth"], out / "depth.png", "depth t (C-3PO Fig. 6)")
        names.append("depth.png")
    if stats["depth"]["n"]:
        plot_histogram(stats["depth"], out / "policy-acts.png", "policy acts per question")
        names.append("policy-acts.png")
    return names
