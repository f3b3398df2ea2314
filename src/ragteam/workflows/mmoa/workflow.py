"""MMOA-RAG's pipeline as a workflow: Query Rewriter -> Retriever -> Selector -> Generator.

    qr-s-g : rewriter -> K candidates from the sub-questions -> selector -> generator
    s-g    :             K candidates from the question      -> selector -> generator
    qr-g   : rewriter -> K candidates from the sub-questions ->             generator (all K)

All three roles are played by the trainable policy (`Act`; one model, parameter sharing as in the paper); the
Generator's answer is the final answer, so no LLM-server call is made. The Selector always receives a fixed
set of K = `cfg.candidates` documents however many sub-questions there are (the paper's implementation
details, 5.1.3): K is split across the sub-questions (2 sub-questions -> top 5 of each), duplicates are
skipped, and slots left free are filled round-robin from the next hits of each sub-question, then (with
`cfg.fill_from_question`, the `small` profile) from the hits of the question itself, searched alongside in
the same request when it is not one of the sub-questions. The paper's candidates come from the
sub-questions' searches only (`--profile paper`). At most K sub-questions are searched. Per-role penalties are
on each node's `Action.penalty` (see `parsers`).

The Selector's action space (the paper's eq. 5) is declared on its role (`selector_constraint`: the tokens
of `Document`, the ids 0..K-1 and `,`, and the regex `Document[0-9](,Document[0-9])*` for K = 10), K being
the number of candidates it is shown (fewer when a prompt is cut to fit). With `cfg.selector_constrained`
(`--profile paper`, the `mmoa` recipe) the act carries it and the backend enforces it; otherwise it is
dropped and the Selector writes free text, read by its parser either way.

If the engine's budget stops an act (`BudgetExceeded`), a stopped rewriter falls back to the question, a
stopped selector keeps every candidate; a stopped generator ends the path (a `truncated` leaf).

`Answer.info`: variant, subquestions, candidate_ids (the K candidates), selected (0-based ids given to the
generator), invalid (invalid actions), penalties (role -> penalty), doc_ids (documents the generator saw).

`MMOALabeling` is the rollout `collect sft` runs for the team's warm-start data (section 4.3; the team
declares it, `MMOA.sft_labelling`): the question's K candidates and the teacher's rewrites with the candidate
sets the team would build from them, which `labels.py`'s heuristics label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from typing import Any

from ragteam.llm.constraint import choice_regex
from ragteam.protocol import Answer, BudgetExceeded, Constraint, EpisodeGenerator, Retrieve, Role, Workflow
from ragteam.types import Action, Doc, Hit, Question
from ragteam.workflows.answers import format_options
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.mmoa import prompts
from ragteam.workflows.mmoa.labels import WITH_REWRITER
from ragteam.workflows.mmoa.options import PRESETS, MMOAOptions
from ragteam.workflows.mmoa.parsers import parse_generator, parse_rewriter, parse_selector

REWRITER_MAX_TOKENS = 128
SELECTOR_MAX_TOKENS = 64
GENERATOR_MAX_TOKENS = 64


def _parse_selector(text: str, docs: list[Doc]) -> Action:
    """The Selector's parser reads K from its documents (each role function takes the fields it uses)."""
    return parse_selector(text, k=len(docs))


def selector_constraint(k: int) -> Constraint:
    """The Selector's action space for K candidates (MMOA-RAG eq. 5): the texts `Document`,
    `Document0`..`Document{K-1}`, `,Document0`..`,Document{K-1}`, the numbers 0..K-1 and `,` (their tokens are
    the whitelist), and the equivalent regex `Document[0-{K-1}](,Document[0-{K-1}])*`."""
    if k < 1:
        raise ValueError(f"the Selector needs at least one candidate, got K={k}")
    ids = [str(i) for i in range(k)]
    one = "Document" + choice_regex(ids)
    texts = ("Document", *(f"Document{i}" for i in ids), *(f",Document{i}" for i in ids), *ids, ",")
    return Constraint(texts, f"{one}(,{one})*", name="selector")


def _selector_constraint(docs: list[Doc]) -> Constraint | None:
    return selector_constraint(len(docs)) if docs else None


REWRITER = Role("rewriter", prompts.rewriter_messages, parse_rewriter, max_tokens=REWRITER_MAX_TOKENS)
SELECTOR = Role(
    "selector",
    prompts.selector_messages,
    _parse_selector,
    max_tokens=SELECTOR_MAX_TOKENS,
    docs="docs",
    constrain=_selector_constraint,
)
GENERATOR = Role(
    "generator", prompts.generator_messages, parse_generator, max_tokens=GENERATOR_MAX_TOKENS, docs="docs"
)


def quotas(k: int, n: int) -> list[int]:
    """How many of K candidates each of `n` sub-questions contributes first: K split evenly, the remainder to
    the first ones (K=10, n=3 -> [4, 3, 3]); `n` is capped at K."""
    n = max(1, min(n, k))
    return [k // n + (1 if i < k % n else 0) for i in range(n)]


def merge_candidates(ranked: Sequence[Sequence[Hit]], k: int, backup: Sequence[Hit] = ()) -> list[Doc]:
    """A fixed set of `k` distinct documents from one ranked list per sub-question: each list's share first
    (`quotas`), then free slots filled round-robin with each list's next unseen hits, then with `backup`'s
    (the question's own hits); fewer than `k` only when every list runs out."""
    lists = [list(r) for r in ranked][: max(1, k)]
    if not lists:
        lists = [[]]
    out: list[Doc] = []
    seen: set[str] = set()
    cursors = [0] * len(lists)

    def take(i: int, limit: int) -> None:
        got = 0
        while got < limit and cursors[i] < len(lists[i]) and len(out) < k:
            doc = lists[i][cursors[i]].doc
            cursors[i] += 1
            if doc.id not in seen:
                seen.add(doc.id)
                out.append(doc)
                got += 1

    for i, share in enumerate(quotas(k, len(lists))):
        take(i, share)
    while len(out) < k and any(c < len(lst) for c, lst in zip(cursors, lists)):
        for i in range(len(lists)):
            take(i, 1)
    for hit in backup:
        if len(out) >= k:
            break
        if hit.doc.id not in seen:
            seen.add(hit.doc.id)
            out.append(hit.doc)
    return out


def gather_candidates(
    question: str, subquestions: Sequence[str], k: int, fill_from_question: bool = True
) -> Generator[Retrieve, Any, list[Doc]]:
    """Search the sub-questions (at most `k`) in one request and merge their hits into the K candidates;
    with `fill_from_question` the question is searched too and its hits fill the free slots (a rewrite that
    matches little would otherwise shrink the set). Shared with the SFT labelling rollout, so both build the
    same set."""
    searched = list(subquestions[:k])
    extra = [question] if fill_from_question and question not in searched else []
    ranked = yield Retrieve(searched + extra, k=k)
    return merge_candidates(ranked[: len(searched)], k, backup=ranked[-1] if extra else ())


class MMOA(Workflow):
    """Query Rewriter, Selector and Generator as policy roles around a fixed retriever."""

    name = "mmoa"
    Options = MMOAOptions  # its options: the flags of a command that runs it (options.py)
    presets = PRESETS  # its rows of each profile (options.py)
    roles = (REWRITER, SELECTOR, GENERATOR)
    needs = frozenset({"policy", "retriever"})  # the Generator is a policy role: no LLM server is called

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = MMOAOptions.of(cfg)

    @staticmethod
    def sft_labelling(cfg: MMOAOptions) -> Workflow:
        """What `collect sft` rolls out for this team instead of sampling its solutions: the paper's SFT data
        are heuristic labels (section 4.3, `labels.py`), so the labelling rollout `MMOALabeling` over `cfg`."""
        return MMOALabeling(cfg)

    def run(self, question: Question) -> EpisodeGenerator:
        q = question.question
        k = self.cfg.candidates
        variant = self.cfg.variant
        invalid = 0
        penalties: dict[str, float] = {}
        subquestions = [q]
        if variant in ("qr-s-g", "qr-g"):
            try:
                acted = yield REWRITER.act(question=q)
                invalid += 0 if acted.action.valid else 1
                penalties["rewriter"] = acted.action.penalty
                subquestions = [str(s) for s in acted.action.value] or [q]
            except BudgetExceeded:
                pass
        candidates = yield from gather_candidates(q, subquestions, k, self.cfg.fill_from_question)
        selected = list(range(len(candidates)))
        if variant in ("qr-s-g", "s-g") and candidates:
            try:
                act = SELECTOR.act(question=q, docs=candidates)
                if not self.cfg.selector_constrained:
                    act = dataclasses.replace(act, constraint=None)
                acted = yield act
                invalid += 0 if acted.action.valid else 1
                penalties["selector"] = acted.action.penalty
                shown = len(acted.act.fields["docs"]) if acted.act and acted.act.fields else len(candidates)
                selected = [i for i in acted.action.value if 0 <= i < shown]  # ids of the documents it saw
            except BudgetExceeded:
                pass
        docs = [candidates[i] for i in selected]
        acted = yield GENERATOR.act(
            question=q, docs=docs, options=format_options(question), choices=question.choices
        )
        invalid += 0 if acted.action.valid else 1
        penalties["generator"] = acted.action.penalty
        info: dict[str, Any] = {
            "variant": variant,
            "subquestions": subquestions,
            "candidate_ids": [d.id for d in candidates],
            "selected": selected,
            "invalid": invalid,
            "penalties": penalties,
            "doc_ids": [d.id for d in docs],
        }
        return Answer(str(acted.action.value or ""), info=info)


class MMOALabeling(Workflow):
    """The part of MMOA-RAG that SFT data needs from a model: retrieve K candidates with the question, then
    (variants with a rewriter) let the teacher rewrite the question and build the K candidates the workflow
    would give the Selector. Fork the rewriter act (`forks: [{role: rewriter, k: N}]`) for N rewrites.

    `Answer.info`: variant, base_ids (the question's K candidates), and on rewrite paths rewriter_node,
    subquestions and candidate_ids."""

    name = "mmoa-sft"
    roles = (REWRITER,)
    collect_mode = "mmoa"
    """How `collect` makes rows of its episodes (`collect/run.py`'s table of labelled modes; the summary's
    `mode`)."""

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = MMOAOptions.of(cfg)

    def sft_forks(self, samples: int) -> tuple[list[dict[str, Any]], bool]:
        """The fork schedule of `samples` rewrites per question (`--samples`), and whether the rewrites
        sampled are several (so greedy decoding would make them identical)."""
        return [{"role": "rewriter", "k": samples}], samples > 1 and self.cfg.variant in WITH_REWRITER

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
