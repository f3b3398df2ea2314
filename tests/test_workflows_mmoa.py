"""MMOA-RAG's pipeline driven with scripted role outputs: variants, the fixed candidate set, the per-role
penalties of the paper on the recorded actions."""

from __future__ import annotations

import pytest
from scripted import drive, hits_for, prompt_text, question

from ragteam.types import Hit
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.mmoa.options import MMOAOptions
from ragteam.workflows.mmoa.workflow import merge_candidates, quotas

Q = question("What is the date of death of the director of film Holocaust 2000?")
GOOD = {
    "rewriter": "Who directed Holocaust 2000?\nWhen did Alberto De Martino die?",
    "selector": "Document0,Document5",
    "generator": "2 June 2015",
}


def mmoa(**kw) -> MMOA:
    return MMOA(MMOAOptions(**kw))


def test_qr_s_g_runs_all_three_roles_on_a_fixed_candidate_set():
    t = drive(mmoa(variant="qr-s-g", candidates=10), Q, policy=GOOD)
    assert t.roles() == ["rewriter", "selector", "generator"]
    assert t.asks() == []  # the generator is a policy role: no LLM-server call
    # the sub-questions, and the question itself (its hits only fill slots the sub-questions leave free)
    assert t.queries() == ["Who directed Holocaust 2000?", "When did Alberto De Martino die?", Q.question]
    info = t.answer.info
    assert len(info["candidate_ids"]) == 10
    # two sub-questions -> the top 5 of each, as in the paper
    first = [h.doc.id for h in hits_for("Who directed Holocaust 2000?", 10)[:5]]
    second = [h.doc.id for h in hits_for("When did Alberto De Martino die?", 10)[:5]]
    assert info["candidate_ids"] == first + second
    assert info["selected"] == [0, 5] and info["doc_ids"] == [first[0], second[0]]
    assert t.answer.text == "2 June 2015"
    assert info["penalties"] == {"rewriter": 0.0, "selector": 0.0, "generator": 0.0}
    gen_prompt = prompt_text(t.acts("generator")[0][0])
    assert "Who directed Holocaust 2000? #1" in gen_prompt and "#2" not in gen_prompt


@pytest.mark.parametrize(
    "variant, roles, searched_question",
    [("s-g", ["selector", "generator"], True), ("qr-g", ["rewriter", "generator"], False)],
)
def test_variants_skip_the_right_roles(variant, roles, searched_question):
    t = drive(mmoa(variant=variant, candidates=6), Q, policy=GOOD)
    assert t.roles() == roles
    assert (t.queries() == [Q.question]) is searched_question
    assert (Q.question in t.queries()) is True
    if variant == "qr-g":  # no selector: the generator sees every candidate
        assert t.answer.info["selected"] == list(range(6))
        assert len(t.answer.info["doc_ids"]) == 6


def test_rewriter_penalty_for_more_than_four_subquestions():
    five = "\n".join(f"{i}. sub-question {i}?" for i in range(1, 6))
    t = drive(mmoa(), Q, policy={**GOOD, "rewriter": five})
    action = t.acts("rewriter")[0][1].action
    assert action.value == [f"sub-question {i}?" for i in range(1, 6)]
    assert action.penalty == -0.5 and action.valid
    assert len(t.answer.info["candidate_ids"]) == 10  # 5 sub-questions x 2 each
    four = "\n".join(f"sub-question {i}?" for i in range(1, 5))
    assert drive(mmoa(), Q, policy={**GOOD, "rewriter": four}).acts("rewriter")[0][1].action.penalty == 0.0


@pytest.mark.parametrize(
    "text, selected",
    [
        ("Document1,Document1,Document3", [1, 3]),  # duplicate
        ("Doc 1 and Document3 are useful", [3]),  # not the format; the one readable id is kept
        ("Document1, Document12", [1]),  # id out of range
        ("I cannot tell", list(range(10))),  # nothing readable: keep all
    ],
)
def test_selector_penalty_for_duplicate_or_malformed_ids(text, selected):
    t = drive(mmoa(), Q, policy={**GOOD, "selector": text})
    action = t.acts("selector")[0][1].action
    assert action.penalty == -1.0 and not action.valid
    assert t.answer.info["selected"] == selected
    assert t.answer.info["penalties"]["selector"] == -1.0


def test_generator_penalty_for_an_over_long_answer():
    long = "The director of the film was Alberto De Martino who died on 2 June 2015 in Rome after a long career in Italian cinema and television"
    t = drive(mmoa(), Q, policy={**GOOD, "generator": long})
    action = t.acts("generator")[0][1].action
    assert action.penalty == -0.5
    assert t.answer.info["penalties"]["generator"] == -0.5
    short = drive(mmoa(), Q, policy=GOOD).acts("generator")[0][1].action
    assert short.penalty == 0.0


def test_malformed_rewriter_falls_back_to_the_question():
    t = drive(mmoa(), Q, policy={**GOOD, "rewriter": "   \n  "})
    assert t.queries() == [Q.question] and t.answer.info["invalid"] == 1


def test_budget_stop_skips_the_selector_and_truncates_at_the_generator():
    t = drive(mmoa(), Q, policy=GOOD, max_acts=1)
    assert t.roles() == ["rewriter"] and t.stopped() == ["selector", "generator"]
    assert t.truncated and t.answer is None  # a stopped generator ends the path (the engine's truncated leaf)


def test_quotas_and_merge_fill_a_fixed_k():
    assert quotas(10, 2) == [5, 5] and quotas(10, 3) == [4, 3, 3] and quotas(10, 12) == [1] * 10
    a = hits_for("a", 10)
    dup = [Hit(a[i].doc, 1.0) for i in range(3)] + hits_for("b", 7)  # b's top 3 repeat a's
    merged = merge_candidates([a, dup], 10)
    ids = [d.id for d in merged]
    assert len(ids) == 10 and len(set(ids)) == 10
    assert ids[:5] == [h.doc.id for h in a[:5]]
    assert merge_candidates([hits_for("a", 3)], 10) == [h.doc for h in hits_for("a", 3)]  # corpus too small
    assert merge_candidates([], 10) == []
    # sub-questions that find little leave slots to the question's own hits
    backup = hits_for("question", 10)
    filled = merge_candidates([hits_for("a", 2)], 5, backup=[*hits_for("a", 1), *backup])
    assert [d.title for d in filled] == ["a #1", "a #2", "question #1", "question #2", "question #3"]


def test_multiple_choice_options_reach_the_generator():
    mc = question("Which is a film?", golden_answers=["B"], choices={"A": "a river", "B": "Holocaust 2000"})
    t = drive(mmoa(variant="s-g"), mc, policy={**GOOD, "generator": "(B)"})
    assert "B. Holocaust 2000" in prompt_text(t.acts("generator")[0][0])
    assert t.answer.text == "B"


FIVE = ["Who directed it?", "When was he born?", "Where?", "Which studio?", "What year?"]


@pytest.mark.parametrize(
    "text",
    [
        "\n".join(FIVE),  # one per line
        "; ".join(FIVE),  # semicolons
        " ".join(f"{i}. {s}" for i, s in enumerate(FIVE, 1)),  # inline numbering
        " ".join(f"({i}) {s}" for i, s in enumerate(FIVE, 1)),
        " ".join(f"Q{i}: {s}" for i, s in enumerate(FIVE, 1)),
        " ".join(FIVE),  # one question after another
        "Sub-questions:\n1. Who directed it? When was he born?\n2. Where?; Which studio?\n- What year?",  # mixed
    ],
)
def test_rewriter_penalty_counts_subquestions_however_they_are_separated(text):
    t = drive(mmoa(), Q, policy={**GOOD, "rewriter": text})
    action = t.acts("rewriter")[0][1].action
    assert action.value == FIVE and action.penalty == -0.5  # five, more than four
    assert t.queries()[:5] == FIVE  # and each is searched on its own


def test_a_number_inside_a_subquestion_is_not_a_separator():
    text = "1. What did Apollo 11. achieve? 2. Who flew it?"
    t = drive(mmoa(), Q, policy={**GOOD, "rewriter": text})
    assert t.acts("rewriter")[0][1].action.value == ["What did Apollo 11. achieve?", "Who flew it?"]


def test_paper_candidates_come_from_the_subquestions_only():
    """MMOA-RAG 5.1.3 (`--profile paper`, fill_from_question off): the question itself is not searched, and
    two sub-questions fill K = 10 with the top 5 of each, then their next hits."""
    sub = ["Who directed Holocaust 2000?", "When did Alberto De Martino die?"]
    t = drive(mmoa(fill_from_question=False), Q, policy=GOOD)
    assert t.queries() == sub
    assert t.answer.info["candidate_ids"] == [h.doc.id for s in sub for h in hits_for(s, 10)[:5]]
    few = lambda q, k: hits_for(q, 3)  # noqa: E731 - each sub-question finds only 3 documents
    short = drive(mmoa(fill_from_question=False), Q, policy=GOOD, retrieve=few)
    assert len(short.answer.info["candidate_ids"]) == 6  # no backfill from the question
    filled = drive(mmoa(), Q, policy=GOOD, retrieve=few)
    assert t.queries() != filled.queries() and len(filled.answer.info["candidate_ids"]) == 9  # 3+3+3 of q
