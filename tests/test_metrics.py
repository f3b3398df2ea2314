"""Answer metrics pinned to hand-computed values on awkward cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragteam.metrics.answer import (
    NORMALIZATION,
    cover_em,
    exact_match,
    extract_choice,
    f1_score,
    normalize_answer,
    score_answer,
)
from ragteam.types import Question


@pytest.mark.parametrize(
    "raw, normalized",
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an apple, a day!  ", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),  # "the" only as a whole word
        ("Bankman-Fried", "bankmanfried"),  # punctuation is deleted, not spaced (SQuAD)
        ("U.S.A.", "usa"),
        ("1,000", "1000"),
        ("3.14", "314"),
        ("Gödel", "godel"),  # accents folded
        ("Café Crème", "cafe creme"),
        ("Małgorzata", "małgorzata"),  # ł has no decomposition: kept
        ("O’Neil", "oneil"),  # curly apostrophe is punctuation too
        ("«Le Monde»", "le monde"),
        ("1977–2015", "19772015"),  # en dash deleted like "-"
        ("ﬁve", "five"),  # NFKD compatibility form
        ("The The", "the the"),  # articles kept when they are the whole answer
        ("A", "a"),
        ("", ""),
        ("?!", ""),
        ("Eif\u200bfel\u00ad Tower\ufeff", "eiffel tower"),  # zero-width space, soft hyphen, BOM: Cf
        ("Paris\x1b\x00\x7f", "paris"),  # escape, NUL, DEL: Cc
        ("New\nYork\tCity", "new york city"),  # control characters that are whitespace still separate
        ("\u2066Paris\u2069", "paris"),  # bidi isolates around a word
    ],
)
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_invisible_characters_do_not_decide_a_match():
    assert exact_match("Eif\u200bfel Tower", ["Eiffel Tower"]) == 1.0
    assert exact_match("\u200b\u200b", ["\u200b"]) == 0.0  # nothing visible on either side: no match
    assert cover_em("it is Pa\u200dris", ["Paris"]) == 1.0


def test_exact_match_aliases_and_empty():
    golds = ["Chief of Protocol", "Chief of Protocol of the United States"]
    assert exact_match("chief of protocol.", golds) == 1.0
    assert exact_match("The Chief of Protocol of the U.S.", golds) == 0.0  # "us" != "united states"
    assert exact_match("", golds) == 0.0
    assert exact_match("   ", ["the"]) == 0.0  # an empty prediction never matches, even an article
    assert exact_match("the", ["The"]) == 1.0
    assert exact_match("Gödel", "godel") == 1.0  # a bare string is one alias
    assert exact_match("anything", ["", "?"]) == 0.0  # golds that normalize to nothing never match


def test_f1_hand_computed():
    # pred "cat sat" vs gold "cat sat on mat": same=2, P=2/2, R=2/4, F1=2*1*.5/1.5=2/3
    f1, p, r = f1_score("The cat sat", ["a cat sat on the mat"])
    assert (p, r) == (1.0, 0.5) and f1 == pytest.approx(2 / 3)
    # repeated tokens count by multiplicity: pred "new new york" vs "new york": same=2, P=2/3, R=1, F1=.8
    f1, p, r = f1_score("new new york", "New York")
    assert (p, r) == (pytest.approx(2 / 3), 1.0) and f1 == pytest.approx(0.8)


def test_f1_max_over_aliases_reports_one_alias():
    # vs "cat": P=1/2 R=1 F1=2/3; vs "cat sat on": P=1 R=2/3 F1=0.8 -> the second alias wins, whole triple
    f1, p, r = f1_score("cat sat", ["cat", "cat sat on"])
    assert f1 == pytest.approx(0.8) and p == 1.0 and r == pytest.approx(2 / 3)


def test_f1_yes_no_noanswer_rule():
    assert f1_score("yes", ["yes"]) == (1.0, 1.0, 1.0)
    assert f1_score("Yes.", ["no"]) == (0.0, 0.0, 0.0)
    # plain token F1 would give 2/3 here; HotpotQA's rule makes it 0 because the gold is "yes"
    assert f1_score("yes it is", ["yes"]) == (0.0, 0.0, 0.0)
    assert f1_score("no", ["no way"]) == (0.0, 0.0, 0.0)
    assert f1_score("noanswer", ["noanswer"])[0] == 1.0
    # the rule is per alias: the "yes" alias scores 0 but the other one still counts (P=1/2, R=1)
    assert f1_score("yes indeed", ["yes", "indeed"])[0] == pytest.approx(2 / 3)


def test_f1_empty_prediction_and_numbers():
    assert f1_score("", ["Paris"]) == (0.0, 0.0, 0.0)
    assert f1_score("...", ["Paris"]) == (0.0, 0.0, 0.0)
    # "1,000 people" -> "1000 people" vs "1000": P=1/2, R=1, F1=2/3
    assert f1_score("1,000 people", ["1000"])[0] == pytest.approx(2 / 3)
    assert f1_score("1961", ["1960"])[0] == 0.0


def test_cover_em_token_boundaries():
    assert cover_em("It was Yuri Gagarin, in 1961.", ["Gagarin"]) == 1.0
    assert cover_em("about 12 people", ["12"]) == 1.0
    assert cover_em("112 people", ["12"]) == 0.0  # a plain substring test would say 1
    assert cover_em("The Béatles!", ["the beatles"]) == 1.0
    assert cover_em("", ["Paris"]) == 0.0
    assert cover_em("Paris", ["", "..."]) == 0.0  # empty golds are ignored, not "contained everywhere"
    assert cover_em("Sam Bankman-Fried", ["Bankman-Fried", "SBF"]) == 1.0


CHOICES = {
    "A": "Disclose the error to the patient",
    "B": "Tell the attending that he cannot fail to disclose this mistake",
    "C": "Report the physician to the ethics committee",
    "D": "Refuse to dictate the operative report",
}


@pytest.mark.parametrize(
    "text, letter",
    [
        ("B", "B"),
        ("(c)", "C"),
        ("d.", "D"),
        ("The answer is (C).", "C"),
        ("**Final answer: D**", "D"),
        ("Answer: option B", "B"),
        ("Option A is tempting, but option C is correct.", "C"),
        ("Considering A and B... the answer is D because it protects", "D"),
        ("B. Tell the attending that he cannot fail to disclose this mistake", "B"),
        ("(A) Disclose the error", "A"),
        ("The resident should refuse to dictate the operative report.", "D"),
        ("A patient must always be told, so I pick (A)", "A"),
        ("so the answer is b.", "B"),
        ("Answer: Disclose the error to the patient", "A"),  # "D" of "Disclose" is not a letter
        ("A or B", None),
        ("I don't know", None),
        ("", None),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text, CHOICES) == letter


def test_extract_choice_prefers_longest_contained_option_and_never_raises():
    choices = {"A": "aspirin", "B": "aspirin and heparin", "C": "warfarin"}
    assert extract_choice("give aspirin and heparin now", choices) == "B"
    assert extract_choice("aspirin, or warfarin", choices) is None  # two unrelated options named
    assert extract_choice(None, choices) is None  # type: ignore[arg-type]
    assert extract_choice("B", {}) is None


def test_score_answer_keys_and_multiple_choice():
    q = Question(id="1", question="q", golden_answers=["Yuri Gagarin", "Gagarin"])
    s = score_answer("It was Yuri Gagarin", q)
    assert set(s) == {"em", "f1", "precision", "recall", "cover_em"}
    # vs "yuri gagarin": same=2, P=2/4, R=1 -> F1=2/3 (the "gagarin" alias gives 2/5)
    assert s["em"] == 0.0 and s["cover_em"] == 1.0 and s["f1"] == pytest.approx(2 / 3)
    mc = Question(id="2", question="q", golden_answers=["B"], choices=CHOICES)
    s = score_answer("The answer is (B).", mc)
    assert s["mc_acc"] == 1.0 and s["em"] == 0.0 and s["cover_em"] == 1.0
    assert score_answer("C", mc)["mc_acc"] == 0.0
    assert score_answer(None, q) == {"em": 0.0, "f1": 0.0, "precision": 0.0, "recall": 0.0, "cover_em": 0.0}  # type: ignore[arg-type]
    assert "NFKD" in NORMALIZATION and "yes/no" in NORMALIZATION


# --- properties over arbitrary text (including combining marks, odd scripts, punctuation) ---------------


_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("aAbBnNtThHeE yYsSoO12 ,.-’'\"()é\u0301ﬁİℌ")),
        st.characters(codec="utf-8"),
    ),
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(_text)
def test_normalize_is_idempotent(s):
    once = normalize_answer(s)
    assert normalize_answer(once) == once
    assert once == once.strip() and "  " not in once


@settings(max_examples=300, deadline=None)
@given(_text, _text)
def test_metric_relations(pred, gold):
    f1, p, r = f1_score(pred, [gold])
    assert 0.0 <= f1 <= 1.0 and 0.0 <= p <= 1.0 and 0.0 <= r <= 1.0
    f1_swapped, p_swapped, r_swapped = f1_score(gold, [pred])
    assert f1 == pytest.approx(f1_swapped) and (p, r) == pytest.approx((r_swapped, p_swapped))
    if exact_match(pred, [gold]):
        assert f1 == 1.0 and cover_em(pred, [gold]) == 1.0
    if cover_em(pred, [gold]):
        assert r == 1.0 or normalize_answer(gold) in ("yes", "no", "noanswer")
    assert extract_choice(pred, {"A": gold or "x", "B": "y"}) in (None, "A", "B")
