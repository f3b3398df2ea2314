"""The RAG-Gym agents on the search-or-answer process, driven with scripted actor outputs: termination within
max_steps, who searches, what the state shows, summaries by the LLM server, fallbacks."""

from __future__ import annotations

import json

import pytest
from scripted import drive, prompt_text, question

from ragteam.workflows.gym import AGENTS, GymAgent, prompts
from ragteam.workflows.gym.options import GymOptions

Q = question("What is the date of death of the director of film Holocaust 2000?")


def gym(agent: str, **kw) -> GymAgent:
    return GymAgent(GymOptions(**kw), agent=agent)


def out(reasoning: str = "Thinking.", **fields) -> str:
    return f"### Step-by-step Reasoning\n{reasoning}\n\n### Structured Output\n```json\n{json.dumps(fields)}\n```"


def always_search(act) -> str:
    """An actor that never wants to stop: it searches whenever the prompt allows it."""
    if '"generated_query"' in prompt_text(act):
        return out(predicted_answer="1990", generated_query=f"query {len(act.messages[1]['content'])}")
    return out(predicted_answer="2 June 2015")


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("max_steps", [1, 4])
def test_every_agent_terminates_within_max_steps(agent, max_steps):
    t = drive(gym(agent, max_steps=max_steps, topk=2), Q, policy={"actor": always_search})
    assert t.answer is not None
    assert 1 <= len(t.acts()) <= max_steps
    assert t.answer.info["steps"] == len(t.acts())
    searches = len(t.queries())
    if agent in ("direct", "cot"):
        assert searches == 0 and len(t.acts()) == 1
    elif agent == "rag":
        assert t.queries() == [Q.question] and len(t.acts()) == 1
    else:  # an actor that always searches is stopped by the answer-only last step
        assert len(t.acts()) == max_steps and searches == max_steps - 1
        assert t.answer.info["forced"] is True and t.answer.info["stop"] == "forced"
        assert '"generated_query"' not in prompt_text(t.acts()[-1][0])
    assert t.answer.text == "2 June 2015"


def test_react_shows_documents_and_search_o1_shows_summaries():
    script = [out(generated_query="director of Holocaust 2000"), out(predicted_answer="Alberto De Martino")]
    react = drive(gym("react", topk=2), Q, policy={"actor": script})
    assert react.asks() == []
    second = prompt_text(react.acts()[1][0])
    assert "Query: director of Holocaust 2000" in second
    assert "Document [0] (Title: director of Holocaust 2000 #1)" in second
    assert react.answer.text == "Alberto De Martino" and react.answer.info["stop"] == "answer"

    o1 = drive(gym("search-o1", topk=2), Q, policy={"actor": script}, llm="It was Alberto De Martino.")
    ((ask, _),) = o1.asks()
    assert ask.purpose == "summary" and "director of Holocaust 2000 #1" in prompt_text(ask)
    second = prompt_text(o1.acts()[1][0])
    assert "Answer: It was Alberto De Martino." in second and "Document [0]" not in second


def test_re2search_stops_when_no_query_is_needed_and_summarizes():
    script = [
        out(predicted_answer="1990", generated_query="When did Alberto De Martino die?"),
        out(predicted_answer="2 June 2015", generated_query="None"),
    ]
    t = drive(gym("re2search"), Q, policy={"actor": script}, llm="He died on 2 June 2015.")
    assert len(t.acts()) == 2 and [a.purpose for a, _ in t.asks()] == ["summary"]
    assert t.queries() == ["When did Alberto De Martino die?"]
    assert "### Unverified Claim Identification" in prompt_text(t.acts()[0][0])
    assert t.answer.text == "2 June 2015" and t.answer.info["forced"] is False


def test_re2search_budget_stop_answers_with_its_last_predicted_answer():
    t = drive(
        gym("re2search"),
        Q,
        policy={"actor": out(predicted_answer="1990", generated_query="more")},
        max_acts=2,
    )
    assert t.answer.text == "1990" and t.answer.info["stop"] == "budget"
    t = drive(gym("react"), Q, policy={"actor": out(generated_query="more")}, max_acts=1)
    assert t.answer.text == "" and t.answer.info["stop"] == "budget"


def test_malformed_actor_output_answers_with_its_first_line():
    t = drive(gym("react"), Q, policy={"actor": "Alberto De Martino\nbecause I remember"})
    assert t.answer.text == "Alberto De Martino"
    assert t.answer.info["invalid"] == 1 and t.queries() == []


def test_multiple_choice_options_are_shown_to_the_actor():
    mc = question("Which is a film?", golden_answers=["B"], choices={"A": "a river", "B": "Holocaust 2000"})
    t = drive(gym("cot"), mc, policy={"actor": out(predicted_answer="B")})
    assert "B. Holocaust 2000" in prompt_text(t.acts()[0][0])
    assert t.answer.text == "B"


def test_forced_template_offers_only_an_answer():
    history = prompts.history_with_documents([])
    forced = prompt_text_of(prompts.actor_messages("react", "Q?", history, forced=True))
    normal = prompt_text_of(prompts.actor_messages("react", "Q?", history))
    assert '"generated_query"' not in forced and '"predicted_answer"' in forced
    assert "Search[query]" in normal and '"generated_query"' in normal


def prompt_text_of(messages) -> str:
    return "\n".join(m["content"] for m in messages)


def test_unknown_agent_is_refused():
    with pytest.raises(ValueError, match="re2search"):
        GymAgent(GymOptions(), agent="reflexion")


@pytest.mark.parametrize("agent", ["react", "search-o1", "re2search"])
def test_paper_last_step_uses_the_agents_own_template_and_may_end_unanswered(agent):
    """RAG-Gym has no last-step template (`--last-step same`, the paper profile): every step may search;
    a search at the last step ends the episode (Re2Search keeps its predicted answer)."""
    t = drive(gym(agent, max_steps=3, last_step="same", topk=2), Q, policy={"actor": always_search})
    assert len(t.acts()) == 3
    assert all('"generated_query"' in prompt_text(a) for a, _ in t.acts())  # no answer-only template
    info = t.answer.info
    assert info["stop"] == "max_steps" and info["forced"] is False
    assert info["searches"] == 2 and len(info["queries"]) == 3  # the last query is not run
    assert t.answer.text == ("1990" if agent == "re2search" else "")
    small = drive(gym(agent, max_steps=3, topk=2), Q, policy={"actor": always_search})
    assert small.answer.info["stop"] == "forced" and small.answer.text == "2 June 2015"


def test_paper_last_step_still_answers_when_the_actor_answers():
    answer = out(predicted_answer="2 June 2015")
    t = drive(
        gym("react", max_steps=2, last_step="same"), Q, policy={"actor": [out(generated_query="q"), answer]}
    )
    assert t.answer.text == "2 June 2015" and t.answer.info["stop"] == "answer"
