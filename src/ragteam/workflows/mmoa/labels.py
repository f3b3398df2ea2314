"""MMOA-RAG's warm-start labels (paper, section 4.3): the heuristics that label what the labelling rollout
(`workflow.MMOALabeling`, which `collect sft --workflow mmoa` runs instead of the team) retrieved.
`collect/mmoa.py` turns a recorded episode into the trainer's rows with them; the team declares the rollout
(`MMOA.sft_labelling`), so collect never names it.

- **Selector** (4.3.2): heuristic labels. The question and its golden answers are lower-cased, punctuation
  becomes spaces, stop words are dropped (`stopwords.STOP_WORDS`): the word set Set_q. Each candidate
  document (title and text) gives Set_d the same way. The paper selects candidate j when ANY word of Set_q
  is in Set_d. Implemented: candidate j is selected when `|Set_q & Set_d| >= min_overlap` (default 1: the
  paper's rule exactly) or when the document contains a golden answer as a whole normalized token run
  (cover-EM's test; golden answers made only of stop words, such as `no`, are not looked for). The target is
  the selected ids in the Selector's action format, `Document0,Document4,Document7` (ascending).
- **Query Rewriter** (4.3.1): a rewrite is kept when the support recall (`support_recall`) of the K
  candidates built from its sub-questions beats the question's own; its target is the sub-questions one per
  line (`rewriter_target`), which `parse_rewriter` reads back unchanged.

The rollout that gathers what they label is `workflow.MMOALabeling`, beside the team it shares its candidate
sets with; it only samples the rewrites and retrieves.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragteam.metrics.answer import cover_em, fold_accents
from ragteam.types import Doc, doc_id
from ragteam.workflows.mmoa.parsers import parse_selector
from ragteam.workflows.mmoa.stopwords import STOP_WORDS

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
