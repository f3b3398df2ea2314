"""A question longer than the model's context (issue 23, item 1): fitting ends on every input.

A short question followed by 7,950 emoji is ~32,000 tokens of the tiny model's byte-level BPE, four times its
8,192-token context. Before the fix, a role with documents wedged the fitting loop (a passage shortened to
MIN_WORDS plus its " ..." mark was "shortened" again to itself, forever). Each request kind is tested with the
tiny model: its prompt fits after cutting the question in its middle, in a bounded number of measured prompts;
a prompt whose template alone is over the context is refused as a failed path naming the limit, never sent;
and `serve team` answers such a question over loopback.
"""

from __future__ import annotations

import httpx
import pytest
from conftest import TEST_DEVICE

from ragteam.llm.local import LocalChatModel
from ragteam.protocol import Answer, EpisodeGenerator, Role, Workflow
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.types import Action, Doc, Message, Question

LONG = "Who wrote the novel? " + "\U0001f600" * 7950  # 7,971 characters: under serve team's 8,000
MAX_STEPS = 40  # prompts measured while fitting: a few per step, logarithmic in the overshoot


def _render(question: str, docs: list[Doc], turns: int = 0) -> list[Message]:
    """The reader's prompt; `turns` short earlier turns before it (a template no cut can shorten: every
    message is under MIN_CHARS)."""
    body = "\n".join(f"[{i}] {d.text}" for i, d in enumerate(docs, 1))
    history: list[Message] = [{"role": "user", "content": "Read it."}] * turns
    return [
        {"role": "system", "content": "Answer from the documents."},
        *history,
        {"role": "user", "content": f"Documents:\n{body}\nQuestion: {question}\nAnswer:"},
    ]


def _parse(text: str, question: str, docs: list[Doc], turns: int = 0) -> Action:
    return Action("answer", value=text.strip())


READER = Role("reader", _render, _parse, max_tokens=8, docs="docs")
DOCS = [Doc(f"d{i}", f"title {i}", " ".join(["word"] * 120)) for i in range(5)]


class Reads(Workflow):
    """One request with documents: the policy reads (`act`) or the LLM server does (`ask`)."""

    name = "reads"

    def __init__(self, kind: str, turns: int = 0) -> None:
        self.kind, self.turns = kind, turns

    def run(self, question: Question) -> EpisodeGenerator:
        role = READER.act if self.kind == "act" else READER.ask
        reply = yield role(question=question.question, docs=DOCS, turns=self.turns)
        return Answer(reply.text if self.kind == "act" else reply)


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE)


def _engine(tiny: LocalChatModel) -> Engine:
    return Engine(tiny, tiny, None, RolloutConfig(max_tokens=8, llm_max_tokens=8))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["act", "ask"])
def test_a_question_over_the_context_is_cut_in_its_middle_and_answered(tiny, kind):
    assert tiny.count_tokens([{"role": "user", "content": LONG}]) > 3 * tiny.context_length
    engine = _engine(tiny)
    report = engine.run(Reads(kind), [Question("q0", LONG, ["x"])])
    (episode,) = report.episodes
    assert episode.status == "ok", episode.error
    (node,) = [n for n in episode.nodes if n.kind in ("policy", "llm")]
    fit = node.fit
    assert fit["docs_dropped"] == 4 and fit["passages_shortened"] >= 1  # the documents went first
    assert fit["question_cut"]["field"] == "question" and fit["question_cut"]["kept"] < len(LONG) // 3
    assert fit["steps"] <= MAX_STEPS and "refused" not in fit
    assert fit["prompt_tokens_after"] + 8 <= tiny.context_length
    assert tiny.count_tokens(node.messages) == fit["prompt_tokens_after"]
    text = node.messages[-1]["content"]
    assert "Who wrote the novel?" in text and "[...]" in text and text.endswith("\U0001f600\nAnswer:")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["act", "ask"])
def test_a_template_alone_over_the_context_fails_its_path_naming_the_limit(tiny, kind):
    engine = _engine(tiny)
    report = engine.run(Reads(kind, turns=2000), [Question("q0", "Who?", ["x"])])
    (episode,) = report.episodes
    assert episode.status == "failed" and report.failures
    assert "after fitting" in episode.error and f"context {tiny.context_length} tokens" in episode.error
    assert engine.calls["policy_requests"] == 0 and engine.calls["llm_requests"] == 0  # never sent


class ReadsTwice(Workflow):
    """A team that passes documents to the policy, then to the LLM server."""

    name = "reads-twice"

    def run(self, question: Question) -> EpisodeGenerator:
        yield READER.act(question=question.question, docs=DOCS)
        reply = yield READER.ask(question=question.question, docs=DOCS)
        return Answer(reply)


@pytest.mark.timeout(300)
def test_serve_team_answers_a_question_over_the_context_on_loopback(tiny):
    from ragteam.serve.team import make_app
    from ragteam.serve.testing import BackgroundServer

    app = make_app(_engine(tiny), ReadsTwice(), "reads", batch_wait_ms=10.0)
    with BackgroundServer(app) as srv:
        r = httpx.post(
            srv.url + "/v1/chat/completions",
            json={
                "model": "reads",
                "messages": [{"role": "user", "content": LONG}],
                "ragteam": {"trace": True},
            },
            timeout=240,
        )
        assert r.status_code == 200, r.text  # the question was cut to fit: an answer, not a refusal
        assert r.json()["choices"][0]["message"]["role"] == "assistant"
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200  # still serving
