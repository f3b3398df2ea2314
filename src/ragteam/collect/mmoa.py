"""MMOA-RAG's warm-start SFT data (paper, section 4.3), written with the MMOA workflow's own prompts.

- **Selector** (4.3.2): heuristic labels. The question and its golden answers are lower-cased, punctuation
  becomes spaces, stop words are dropped (`stopwords.STOP_WORDS`): the word set Set_q. Each candidate
  document (title and text) gives Set_d the same way. The paper selects candidate j when ANY word of Set_q
  is in Set_d. Implemented: candidate j is selected when `|Set_q & Set_d| >= min_overlap` (default 1: the
  paper's rule exactly) or when the document contains a golden answer as a whole normalized token run
  (cover-EM's test; golden answers made only of stop words, such as `no`, are not looked for). The target is
  the selected ids in the Selector's action format, `Document0,Document4,Document7` (ascending). A candidate
  set with no selected document gives no row (the format cannot say "none").
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

The rollout (`MMOALabeling`) only samples the rewrites and retrieves; `mmoa_rows` turns one recorded episode
into rows, purely.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ragteam.collect.rows import SFTRow, dedupe
from ragteam.collect.stopwords import STOP_WORDS
from ragteam.metrics.answer import cover_em, fold_accents
from ragteam.protocol import Answer, BudgetExceeded, EpisodeGenerator, Retrieve, Workflow
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Doc, Question, doc_id
from ragteam.workflows.answers import format_options
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.mmoa.parsers import parse_rewriter, parse_selector
from ragteam.workflows.mmoa.workflow import (
    GENERATOR,
    REWRITER,
    SELECTOR,
    gather_candidates,
    merge_candidates,
)

_WORD = re.compile(r"[^\W_]+")
WITH_REWRITER = ("qr-s-g", "qr-g")
WITH_SELECTOR = ("qr-s-g", "s-g")

# ------------------------------------------------------------------------------------------- labels


def content_words(text: str) -> set[str]:
    """Lower-cased words of `text` without punctuation (split on it) and stop words; accents folded."""
    return {w for w in _WORD.findall(fold_accents(text or "").lower()) if w not in STOP_WORDS}


def selector_labels(
    question: str, golden_answers: Sequence[str], docs: Sequence[Doc], min_overlap: int = 1
) -> tuple[list[int], list[int]]:
    """(selected candidate ids, ascending; the word overlap of each candidate) by the heuristic above."""
    wanted = content_words(question)
    for gold in golden_answers:
        wanted |= content_words(gold)
    findable = [g for g in golden_answers if content_words(g)]
    overlaps, selected = [], []
    for j, doc in enumerate(docs):
        words = content_words(f"{doc.title}\n{doc.text}")
        overlap = len(wanted & words)
        overlaps.append(overlap)
        contains = any(cover_em(f"{doc.title} {doc.text}", [g]) for g in findable)
        if overlap >= min_overlap or contains:
            selected.append(j)
    return selected, overlaps


def selector_target(ids: Sequence[int]) -> str:
    """The Selector's action for `ids`: `Document0,Document4,Document7` (what `parse_selector` reads)."""
    return ",".join(f"Document{i}" for i in sorted(ids))


def check_selector_target(target: str, ids: Sequence[int], k: int) -> bool:
    """Whether `parse_selector` reads `target` back as exactly `ids` (a valid action, no penalty)."""
    action = parse_selector(target, k=k)
    return action.valid and action.penalty == 0 and list(action.value) == sorted(ids)


def rewriter_target(subquestions: Sequence[str]) -> str:
    """The Query Rewriter's action: one sub-question per line (what `parse_rewriter` reads)."""
    return "\n".join(s.strip() for s in subquestions)


def support_recall(docs: Sequence[Doc], supporting_ids: Sequence[str]) -> float | None:
    """Fraction of `supporting_ids` among `docs` (matched by id or by the passage's `doc_id(title, text)`,
    so any corpus holding the same paragraphs counts); None when the question names none."""
    if not supporting_ids:
        return None
    found: set[str] = set()
    for d in docs:
        found.update((d.id, doc_id(d.title, d.text)))
    wanted = set(supporting_ids)
    return len(wanted & found) / len(wanted)


# ------------------------------------------------------------------------------------------- rollout


class MMOALabeling(Workflow):
    """The part of MMOA-RAG that SFT data needs from a model: retrieve K candidates with the question, then
    (variants with a rewriter) let the teacher rewrite the question and build the K candidates the workflow
    would give the Selector. Fork the rewriter act (`forks: [{role: rewriter, k: N}]`) for N rewrites.

    `Answer.info`: variant, base_ids (the question's K candidates), and on rewrite paths rewriter_node,
    subquestions and candidate_ids."""

    name = "mmoa-sft"
    roles = (REWRITER,)

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else WorkflowConfig()

    @property
    def needs(self) -> frozenset[str]:
        return frozenset({"policy", "retriever"} if self.cfg.variant in WITH_REWRITER else {"retriever"})

    def run(self, question: Question) -> EpisodeGenerator:
        q, k = question.question, self.cfg.candidates
        ranked = yield Retrieve([q], k=k)
        base = merge_candidates(ranked[:1], k)
        info: dict[str, Any] = {"variant": self.cfg.variant, "base_ids": [d.id for d in base]}
        if self.cfg.variant not in WITH_REWRITER:
            return Answer("", info=info)
        try:
            acted = yield REWRITER.act(question=q)
        except BudgetExceeded:
            return Answer("", info=info)
        subquestions = [str(s) for s in acted.action.value] or [q]
        # as MMOA.run builds the Selector's candidates
        candidates = yield from gather_candidates(q, subquestions, k, self.cfg.fill_from_question)
        info.update(
            rewriter_node=acted.node_id,
            subquestions=subquestions,
            candidate_ids=[d.id for d in candidates],
        )
        return Answer("", info=info)


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
