"""Parsers of every role: the papers' formats are read exactly, malformed output becomes an invalid action
with its fallback, and no text whatsoever makes a parser raise (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragteam.types import Action
from ragteam.workflows.c3po.parsers import (
    clean_query,
    extract_thought,
    parse_decider,
    parse_filter,
    parse_router,
)
from ragteam.workflows.gym.parsers import loads_lenient, parse_actor, predicted_answer, structured_output
from ragteam.workflows.mmoa.parsers import parse_generator, parse_rewriter, parse_selector

# ---------------------------------------------------------------------- C-3PO


@pytest.mark.parametrize(
    "text, kind, value",
    [
        ("[No Retrieval]", "no_retrieval", None),
        ("[Planning]", "planning", None),
        ("[Retrieval]<director of Holocaust 2000>", "retrieval", "director of Holocaust 2000"),
        ("[Retrieval] 'director of Holocaust 2000'", "retrieval", "director of Holocaust 2000"),
        ("[retrieval]\nQuery: Alberto De Martino", "retrieval", "Alberto De Martino"),
        ("[ no retrieval ]", "no_retrieval", None),
    ],
)
def test_router_reads_the_three_actions(text, kind, value):
    a = parse_router(text, question="Q?")
    assert (a.kind, a.value, a.valid) == (kind, value, True)


@pytest.mark.parametrize("text", ["", "Let me think", "[Retrieval]", "[Retrieval]<your search query>"])
def test_router_falls_back_to_single_pass_with_the_question(text):
    a = parse_router(text, question="Who?")
    assert (a.kind, a.value, a.valid) == ("retrieval", "Who?", False)
    assert "fallback: single-pass retrieval" in a.error


@pytest.mark.parametrize(
    "text, ids, valid",
    [
        ("Thought: 1 is useful, 2 is not.\nAction: [1, 3]", [1, 3], True),
        ("Thought: none\nAction: []", [], True),
        ("Action: [Document 2, doc 4, 2]", [2, 4], True),
        ("Action: [1 3]", [1, 3], True),
        ("Thought: x Action: [1, 9]", [1], False),  # 9 is not among 5 documents
        ("Thought: all good", [1, 2, 3, 4, 5], False),
        ("Action: [the first one]", [1, 2, 3, 4, 5], False),
    ],
)
def test_filter_ids(text, ids, valid):
    a = parse_filter(text, n_docs=5)
    assert (a.kind, a.value, a.valid) == ("select", ids, valid)


def test_filter_uses_the_last_action_list():
    assert parse_filter("Action: [1]\nThought: on second look\nAction: [2]", n_docs=3).value == [2]


@pytest.mark.parametrize(
    "text, have_docs, kind, value, valid",
    [
        (
            "Thought: need X\nAction: [Retrieval]<birth place of X>",
            False,
            "retrieval",
            "birth place of X",
            True,
        ),
        ("Thought: enough\nAction: [LLM]", True, "llm", None, True),
        (
            "Thought: mentions [LLM] later\nAction: [Retrieval] X's father",
            True,
            "retrieval",
            "X's father",
            True,
        ),
        ("no idea", False, "retrieval", "Q?", False),
        ("no idea", True, "llm", None, False),
        ("Action: [Retrieval]", True, "llm", None, False),
    ],
)
def test_decider(text, have_docs, kind, value, valid):
    a = parse_decider(text, question="Q?", have_docs=have_docs)
    assert (a.kind, a.value, a.valid) == (kind, value, valid)


def test_thought_and_query_helpers():
    assert extract_thought("Thought: find the director\nAction: [LLM]") == "find the director"
    assert extract_thought("plain text") == "plain text"
    assert clean_query("  <'Holocaust 2000'>  \nsecond line") == "Holocaust 2000"


# ---------------------------------------------------------------------- MMOA-RAG


def test_rewriter_lines_marks_and_penalty():
    a = parse_rewriter(
        "Sub-questions:\n1. Who directed X?\n2) When did he die?\n- Who directed X?", question="Q?"
    )
    assert a.value == ["Who directed X?", "When did he die?"] and a.valid and a.penalty == 0.0
    five = parse_rewriter("\n".join(f"q{i}?" for i in range(5)))
    assert len(five.value) == 5 and five.penalty == -0.5
    none = parse_rewriter("", question="Q?")
    assert none.value == ["Q?"] and not none.valid


@pytest.mark.parametrize(
    "text, ids, penalty",
    [
        ("Document0,Document4,Document7", [0, 4, 7], 0.0),
        ("Document0, Document4", [0, 4], 0.0),  # spaces are tolerated
        ("Document0,Document0", [0], -1.0),
        ("Document0,Document10", [0], -1.0),
        ("0,4,7", list(range(10)), -1.0),
        ("Documents: Document3 and Document5", [3, 5], -1.0),
    ],
)
def test_selector_format_and_penalty(text, ids, penalty):
    a = parse_selector(text, k=10)
    assert (a.value, a.penalty, a.valid) == (ids, penalty, penalty == 0.0)


def test_generator_answer_and_length_penalty():
    assert parse_generator("Answer: 2 June 2015.").value == "2 June 2015"
    assert parse_generator(" ".join(["word"] * 21)).penalty == -0.5
    assert parse_generator(" ".join(["word"] * 20)).penalty == 0.0
    empty = parse_generator("   ")
    assert empty.value == "" and not empty.valid


# ---------------------------------------------------------------------- RAG-Gym


def test_actor_reads_json_structured_output():
    text = '### Step-by-step Reasoning\nx\n### Structured Output\n```json\n{"generated_query": "who is X?",}\n```'
    assert parse_actor(text) == Action("search", "who is X?")
    text = 'reasoning {"predicted_answer": "Paris"}'
    assert parse_actor(text) == Action("answer", "Paris")
    # Re2Search: a "None" query means the answer stands; a real query wins over the answer
    both = '```json\n{"predicted_answer": "1990", "generated_query": "None"}\n```'
    assert parse_actor(both, mode="re2search") == Action("answer", "1990")
    both = '```json\n{"predicted_answer": "1990", "generated_query": "death of X"}\n```'
    assert parse_actor(both, mode="re2search") == Action("search", "death of X")
    assert predicted_answer(both) == "1990"
    # answer mode ignores queries
    assert parse_actor(both, mode="answer") == Action("answer", "1990")


def test_actor_lenient_and_react_fallbacks():
    assert parse_actor("{'predicted_answer': 'Rome'}").value == "Rome"
    # the pair regex needs a closing quote
    assert parse_actor('"generated_query": "unclosed json').kind == "answer"
    assert parse_actor('xx "generated_query": "who?" yy') == Action("search", "who?")
    assert parse_actor("I will do Search[Alberto De Martino]") == Action("search", "Alberto De Martino")
    assert parse_actor("Finish[Rome]", mode="answer") == Action("answer", "Rome")
    bad = parse_actor("Rome, I believe\nmore")
    assert (bad.kind, bad.value, bad.valid) == ("answer", "Rome, I believe", False)
    assert parse_actor('{"predicted_answer": "B"}', choices={"A": "x", "B": "y"}).value == "B"


def test_lenient_json_loader():
    assert loads_lenient('{"a": 1,}') == {"a": 1}
    assert loads_lenient("{'a': None}") == {"a": None}
    assert loads_lenient("{not json") is None
    assert structured_output("no object here") is None


# ---------------------------------------------------------------------- no text makes a parser raise

# fmt: off
FRAGMENTS = [
    "[No Retrieval]", "[Retrieval]", "[Planning]", "[LLM]", "Thought:", "Action:", "[", "]", "<", ">", ",",
    "Document", "Document0", "Document 12", "1", "-3", "99999999", "\n", " ", "'", '"', "{", "}", "```json",
    "```", "### Structured Output", '"predicted_answer":', '"generated_query":', "None", "null", "Search[",
    "Finish[", "Answer:", "1.", "- ", "Q1:", "é", "\u2028", "\x00", "\\",
]
# fmt: on
model_text = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=40).map("".join),
)
CHOICES = st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.text(max_size=10), max_size=4))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _is_action(a: object) -> bool:
    return isinstance(a, Action) and isinstance(a.valid, bool) and (a.valid or bool(a.error))


@SETTINGS
@given(text=model_text, q=st.text(max_size=40), n=st.integers(-2, 40), have=st.booleans())
def test_c3po_parsers_never_raise(text, q, n, have):
    for a in (parse_router(text, q), parse_filter(text, n), parse_decider(text, q, have)):
        assert _is_action(a)
    assert isinstance(extract_thought(text), str) and isinstance(clean_query(text), str)


@SETTINGS
@given(text=model_text, q=st.text(max_size=40), k=st.integers(0, 50), choices=CHOICES)
def test_mmoa_parsers_never_raise(text, q, k, choices):
    for a in (parse_rewriter(text, q), parse_selector(text, k), parse_generator(text, choices)):
        assert _is_action(a) and a.penalty <= 0


@SETTINGS
@given(text=model_text, mode=st.sampled_from(["answer", "search_or_answer", "re2search"]), choices=CHOICES)
def test_gym_parser_never_raises(text, mode, choices):
    a = parse_actor(text, mode, choices)
    assert _is_action(a) and a.kind in ("search", "answer")
    assert mode != "answer" or a.kind == "answer"
    predicted_answer(text)
    structured_output(text)
