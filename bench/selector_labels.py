"""MMOA-RAG's heuristic Selector labels, measured: how many of the K candidates the paper's rule keeps per
question, how often it keeps all K, and how the labels stand against the gold paragraphs (issue 29 item 7).

Why: with the gold paragraphs always among a question's candidates (the distractor corpus), the rule kept all
5 candidates for 396 of 400 questions, leaving the Selector little to learn. This reads `collect sft
--workflow mmoa` folders (no model: the `s-g` labels are heuristic) and prints one row per folder.

    D=../shared/data/hotpotqa-dev-500.jsonl
    for c in distractor pooled pooled+../shared/data/wiki18-sample-1000.jsonl; do
      ragteam collect sft --workflow mmoa --variant s-g --candidates 5 --data $D --limit 400 \\
        --retriever.kind bm25 --corpus $c --out runs/labels/$c; done
    python bench/selector_labels.py runs/labels/*/
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any


def kept_ids(target: str) -> list[int]:
    """The candidate numbers of a Selector target `Document0,Document3`."""
    return [int(part.strip().removeprefix("Document")) for part in target.split(",") if part.strip()]


def label_stats(folder: str | Path) -> dict[str, Any]:
    """The Selector labels of one collect folder: per question kept count, the all-K share, the gold
    paragraphs among the candidates and among the kept ones (ids are content ids, as supporting_ids)."""
    from ragteam.rollout.traces import load_trace

    folder = Path(folder)
    episodes = load_trace(folder / "episodes.jsonl")
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    k = int(summary.get("k") or 0)
    kept_hist: Counter[int] = Counter()
    gold_in, gold_kept, kept_total, kept_gold_total, golds = 0, 0, 0, 0, 0
    questions = 0
    for line in (folder / "sft.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["role"] != "selector" or row["provenance"].get("candidates_from") != "question":
            continue
        ep = episodes[row["question_id"]]
        base = ep.leaves()[0].info["base_ids"]
        gold = set(ep.question.supporting_ids or [])
        kept = [base[i] for i in kept_ids(row["target"])]
        questions += 1
        kept_hist[len(kept)] += 1
        golds += len(gold)
        gold_in += len(gold & set(base))
        gold_kept += len(gold & set(kept))
        kept_total += len(kept)
        kept_gold_total += len(gold & set(kept))
    no_row = summary["questions"] - questions  # a candidate set with nothing kept gives no row
    return {
        "folder": folder.name,
        "corpus": summary.get("corpus"),
        "k": k,
        "questions": summary["questions"],
        "rows": questions,
        "no_label": no_row,
        "mean_kept": kept_total / questions if questions else 0.0,
        "all_k": kept_hist.get(k, 0),
        "kept_histogram": dict(sorted(kept_hist.items())),
        "gold_in_candidates": gold_in / golds if golds else None,
        "label_precision": kept_gold_total / kept_total if kept_total else None,
        "label_recall": gold_kept / gold_in if gold_in else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="collect sft --workflow mmoa output folders")
    args = ap.parse_args()
    print("| corpus | questions | kept per question | all K kept | kept histogram | gold in the K | "
          "label precision | label recall |")  # fmt: skip
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for folder in args.folders:
        s = label_stats(folder)
        print(
            f"| {s['corpus']} | {s['questions']} | {s['mean_kept']:.2f} | {s['all_k']} of {s['rows']} | "
            f"{s['kept_histogram']} | {s['gold_in_candidates']:.3f} | {s['label_precision']:.3f} | "
            f"{s['label_recall']:.3f} |"
        )


if __name__ == "__main__":
    main()
