"""MMOA-RAG's warm-start SFT rows (paper, section 4.3), made from the episodes of its labelling rollout
(`MMOALabeling` in `workflows/mmoa/workflow.py`; the Selector and rewrite heuristics in
`workflows/mmoa/labels.py`), with the MMOA workflow's own prompts.

- **Selector** (4.3.2): the heuristic labels of `labels.selector_labels`; the target is the selected ids in
  the Selector's action format, `Document0,Document4,Document7` (ascending). A candidate set with no selected
  document gives no row (the format cannot say "none").
- **Generator** (4.3.3): the target is the (first) golden answer; the prompt shows the documents the labels
  select (variant `qr-g`, which has no Selector: all K candidates).
- **Query Rewriter** (4.3.1): the paper uses Rewrite-Retrieve-Read's published rewrites; offline we sample
  rewrites from a teacher (`--samples` per question) and keep those that retrieve the question's gold
  supporting paragraphs (`Question.supporting_ids`) better than the question itself: a rewrite is kept when
  the support recall (fraction of supporting paragraphs found) of the K candidates the workflow builds from
  its sub-questions is strictly higher than that of the question's own top K. Rewrites that do not parse or
  carry the paper's penalty (more than 4 sub-questions) are dropped. The target is the sub-questions one per
  line, which `parse_rewriter` reads back unchanged. Rows carry both recalls in their provenance.

Selector and Generator rows are made for the candidate set of the question itself (what variant `s-g`
shows, and `qr-s-g` when the rewriter falls back to the question) and for the candidate set of every kept
rewrite (what `qr-s-g` shows after a good rewrite). Every prompt is rendered by the workflow's roles
(`REWRITER`, `SELECTOR`, `GENERATOR` in `workflows/mmoa/workflow.py`), so it is byte-identical to what the
workflow sends at inference (before any cut to the context length, which a 10-passage prompt does not need).

`mmoa_rows` turns one recorded episode into rows, purely.
"""

from __future__ import annotations

from collections import Counter

from ragteam.collect.rows import SFTRow, dedupe
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Doc, Question
from ragteam.workflows.answers import format_options
from ragteam.workflows.mmoa.labels import (
    WITH_REWRITER,
    WITH_SELECTOR,
    check_selector_target,
    rewriter_target,
    selector_labels,
    selector_target,
    support_recall,
)
from ragteam.workflows.mmoa.parsers import parse_rewriter
from ragteam.workflows.mmoa.workflow import GENERATOR, REWRITER, SELECTOR

# ------------------------------------------------------------------------------------------- rows


def _docs_by_id(episode: Episode, leaf: Node) -> dict[str, Doc]:
    out: dict[str, Doc] = {}
    for n in episode.path(leaf.id):
        for ranked in n.hits or []:
            for hit in ranked:
                out.setdefault(hit.doc.id, hit.doc)
    return out


def _reader_rows(
    episode: Episode,
    docs: list[Doc],
    origin: str,
    variant: str,
    min_overlap: int,
    counts: Counter,
) -> list[SFTRow]:
    """Selector and Generator rows for one candidate set (`origin` says where it came from)."""
    q: Question = episode.question
    qid, golds = q.id, q.golden_answers
    base = {"workflow": "mmoa", "episode": episode.id, "candidates_from": origin}
    options = format_options(q)
    if not golds or not str(golds[0]).strip():
        counts["no_golden_answer"] += 1
        return []
    rows = []
    if variant in WITH_SELECTOR:
        ids, overlaps = selector_labels(q.question, golds, docs, min_overlap)
        if not ids:
            counts["selector_none_selected"] += 1
            return []
        target = selector_target(ids)
        if not check_selector_target(target, ids, len(docs)):  # cannot happen with ids < K; never train on it
            counts["selector_not_round_trip"] += 1
            return []
        prov = {**base, "source": "heuristic", "overlaps": overlaps, "min_overlap": min_overlap}
        rows.append(SFTRow("selector", SELECTOR.render(question=q.question, docs=docs), target, qid, prov))
        shown = [docs[i] for i in ids]
    else:
        shown = list(docs)
    messages = GENERATOR.render(question=q.question, docs=shown, options=options, choices=q.choices)
    prov = {**base, "source": "gold", "doc_ids": [d.id for d in shown]}
    rows.append(SFTRow("generator", messages, str(golds[0]).strip(), qid, prov))
    return rows


def mmoa_rows(
    episode: Episode, *, variant: str, min_overlap: int = 1, teacher: str = ""
) -> tuple[list[SFTRow], Counter]:
    """SFT rows for the three MMOA roles from one `MMOALabeling` episode, deduplicated; and counts (rewrites
    sampled and kept, recalls, skipped sets)."""
    counts: Counter = Counter()
    q = episode.question
    leaves = [leaf for leaf in episode.leaves() if leaf.status == "ok" and "base_ids" in leaf.info]
    if not leaves:
        counts["no_usable_leaf"] += 1
        return [], counts
    first = leaves[0]
    docs = _docs_by_id(episode, first)
    base_docs = [docs[i] for i in first.info["base_ids"] if i in docs]
    base_recall = support_recall(base_docs, q.supporting_ids)
    rows: list[SFTRow] = []
    kept: list[tuple[Node, list[Doc]]] = []
    for leaf in leaves:
        if "rewriter_node" not in leaf.info or variant not in WITH_REWRITER:
            continue
        node = episode.nodes[leaf.info["rewriter_node"]]
        counts["rewrites"] += 1
        if node.action is None or not node.action.valid or node.action.penalty < 0:
            counts["rewrites_invalid"] += 1
            continue
        path_docs = _docs_by_id(episode, leaf)
        cands = [path_docs[i] for i in leaf.info.get("candidate_ids", []) if i in path_docs]
        recall = support_recall(cands, q.supporting_ids)
        if recall is None or base_recall is None:
            counts["rewrites_without_supporting_ids"] += 1
            continue
        if recall <= base_recall:
            counts["rewrites_not_better"] += 1
            continue
        target = rewriter_target([str(s) for s in node.action.value])
        if parse_rewriter(target, question=q.question).value != [str(s) for s in node.action.value]:
            counts["rewrites_not_round_trip"] += 1
            continue
        counts["rewrites_kept"] += 1
        prov = {
            "workflow": "mmoa",
            "source": "recall_filter",
            "episode": episode.id,
            "node": node.id,
            "teacher": teacher,
            "recall": recall,
            "baseline_recall": base_recall,
            "k": len(cands),
            "teacher_text": node.text,
        }
        rows.append(SFTRow("rewriter", REWRITER.render(question=q.question), target, q.id, prov))
        kept.append((node, cands))
    rows += _reader_rows(episode, base_docs, "question", variant, min_overlap, counts)
    if variant in WITH_REWRITER:
        for node, cands in kept:
            rows += _reader_rows(episode, cands, f"rewrite node {node.id}", variant, min_overlap, counts)
    if base_recall is not None:
        counts["baseline_recall_sum"] += base_recall
        counts["with_supporting_ids"] += 1
    rows, dropped = dedupe(rows)
    if dropped:
        counts["duplicates"] += dropped
    return rows, counts
