"""The RAG-Gym agents on the search-or-answer process, driven with scripted actor outputs: termination within
max_steps, who searches, what the state shows, summaries by the LLM server, fallbacks."""

from __future__ import annotations

import hashlib
import json

import pytest
from scripted import drive, prompt_text, question

from ragteam.types import Doc
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


# ---- where the history stands (`history_at`) ----------------------------------------------------------------

HISTORIES = {
    "empty": prompts.history_with_summaries([]),
    "documents": prompts.history_with_documents(
        [("director of Holocaust 2000", [Doc("d0", "Holocaust 2000", "A 1977 film by Alberto De Martino.")])]
    ),
    "summaries": prompts.history_with_summaries(
        [("director of Holocaust 2000", "Alberto De Martino."), ("When did he die?", "On 2 June 2015.")]
    ),
}
MC = prompts.question_block("Which film did he direct?", {"A": "Holocaust 2000", "B": "a river"})

PAPER_ORDER_SHA256 = {
    "direct": "d6153a1a5345e80ae099b9243d321401e7ff8e08ab69ba1041585945430c3c6c",
    "cot": "92059cdc5e67aa07958b6c918323f96f0b8d932383db1d5e9d443686e48e84a2",
    "rag": "8b039756aecedd65ab135797f340e3f0b66b5c6bfdd7017e5ca3216b4d29a47f",
    "react": "8d456db9ee142c008180b412d96d8a2bf1dce047ed18a100226119b18a8c7d94",
    "search-o1": "8d456db9ee142c008180b412d96d8a2bf1dce047ed18a100226119b18a8c7d94",
    "re2search": "6bc3a83490cba767dab78e964c236e9d052ec57dc6985c1bfbe185210b6c2c86",
}
"""SHA-256 of each design's chats (`renderings`) as the templates wrote them before `history_at` existed
(the paper's order, one template per design): the default must stay byte-identical."""


def renderings(agent: str, **kw) -> list:
    return [
        prompts.actor_messages(agent, MC, history, forced=forced, **kw)
        for history in HISTORIES.values()
        for forced in (False, True)
    ]


@pytest.mark.parametrize("agent", AGENTS)
def test_default_history_at_keeps_every_prompt_byte_identical(agent):
    chats = json.dumps(renderings(agent)).encode()
    assert hashlib.sha256(chats).hexdigest() == PAPER_ORDER_SHA256[agent]
    assert renderings(agent, history_at="start") == renderings(agent)
    assert GymOptions().history_at == "start"


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("forced", [False, True])
def test_history_at_end_shows_the_same_blocks_with_the_history_last(agent, forced):
    history = HISTORIES["summaries"]
    start = prompts.actor_messages(agent, MC, history, forced=forced)
    end = prompts.actor_messages(agent, MC, history, forced=forced, history_at="end")
    assert end[0] == start[0]  # the system prompt
    if agent in ("direct", "cot"):  # no history: one layout
        assert end == start
        return
    block = "### Information-seeking History\n" + history
    user_start, user_end = start[1]["content"], end[1]["content"]
    assert user_start.startswith(block + "\n\n### Original Question\n")
    assert user_end.startswith("### Original Question\n") and user_end.endswith("\n\n" + block)
    assert user_end.removesuffix("\n\n" + block) == user_start.removeprefix(block + "\n\n")


def test_history_at_is_checked():
    with pytest.raises(ValueError, match="history_at must be start or end, not 'middle'"):
        prompts.actor_messages("react", "Q?", prompts.NO_HISTORY, history_at="middle")  # type: ignore[arg-type]


def re2search_chats(history_at: str) -> list:
    """The actor's chats of a 4-step Re2Search episode that searches at every step (`query N` at step N),
    each step under its own template (`last_step` same)."""

    def search(act) -> str:
        step = prompt_text(act).count("Query: ") + 1
        return out(predicted_answer="1990", generated_query=f"query {step}")

    t = drive(
        gym("re2search", max_steps=4, last_step="same", history_at=history_at),
        Q,
        policy={"actor": search},
        llm=lambda ask: f"Summary of {ask.fields['query']}.",
    )
    assert len(t.acts()) == 4
    return [act.messages for act, _ in t.acts()]


def test_history_at_end_each_step_extends_the_previous_steps_tokens():
    """Under `end` step t's prompt up to the end of its history is a token prefix of step t+1's (the tiny
    model's byte-level BPE, tokenized as the local engine prefills), so a prefix cache prefills only the new
    entry and the prompt's tail; from step 2 on (step 1 shows the empty history's placeholder). Under `start`
    the steps share no more than the system prompt and the history: the question and the instructions follow."""
    from ragteam.llm.local import LocalChatModel

    model = LocalChatModel("tiny")

    def head(messages) -> list[int]:
        """Token ids of the chat up to the end of the user message's text (its history under `end`)."""
        text = model.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        user = messages[-1]["content"]
        return model.tokenizer(text[: text.rindex(user) + len(user)], add_special_tokens=False)["input_ids"]

    def shared(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    chats = re2search_chats("end")
    assert chats[1][1]["content"].endswith("Answer: Summary of query 1.")  # the history is last
    for before, after in zip(chats[1:], chats[2:]):
        prefix = head(before)
        assert model.prompt_ids(before)[: len(prefix)] == prefix
        assert model.prompt_ids(after)[: len(prefix)] == prefix
    assert head(chats[0]) != model.prompt_ids(chats[1])[: len(head(chats[0]))]  # "(nothing searched yet)"

    chats = re2search_chats("start")
    for before, after in zip(chats[1:], chats[2:]):
        ids = model.prompt_ids(before)
        common = model.tokenizer.decode(ids[: shared(ids, model.prompt_ids(after))])
        assert "### Information-seeking History" in common and "### Original Question" not in common
