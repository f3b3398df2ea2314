"""LLM judge with C-3PO's validator prompt: verdict parsing, and judging through a real loopback server."""

from __future__ import annotations

import json
import re
import socket

import pytest
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, ChatResult, Completion
from ragteam.llm.local import LocalChatModel
from ragteam.llm.openai_http import OpenAIChatModel
from ragteam.metrics.judge import LLMJudge, parse_verdict, validator_messages
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer
from ragteam.types import Question


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("True", True),
        ("False", False),
        ("true.", True),
        ("FALSE", False),
        ("**True**", True),
        ("'False'", False),
        ("  True\nThe prediction names the same city.", True),
        ("Verdict: False, because it is not true", False),
        ("Not true.", False),
        ("not false", True),
        ("Yes", True),
        ("No, it is a different person.", False),
        ("The predicted answer is correct.", True),
        ("The predicted answer is incorrect.", False),
        ("It is not correct", False),
        ("wrong", False),
        ("", None),
        ("maybe?", None),
        ("untrue falsehood", None),
        ("<|im_end|>", None),
    ],
)
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_parse_verdict_never_raises_on_odd_input():
    for odd in [None, 3, b"True", "\x00\ud800", "True" * 10000]:
        assert parse_verdict(odd) in (True, False, None)  # type: ignore[arg-type]


def test_validator_prompt_carries_the_case_and_the_decision_format():
    [msg] = validator_messages("Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"], "shakespeare")
    text = msg["content"]
    assert msg["role"] == "user"
    assert "Question: Who wrote Hamlet?" in text
    assert 'Correct Answers: ["William Shakespeare", "Shakespeare"]' in text
    assert text.rstrip().endswith("Predicted Answer: shakespeare")
    assert '"True"' in text and '"False"' in text and "ANY ONE" in text


class RuleJudge:
    """A rule-based ChatModel standing in for a strong judge: True iff the prediction contains a gold answer.

    Replies "???" for a prediction of "unsure" (an unreadable verdict), to exercise the counting.
    """

    name = "rule-judge"
    max_batch_size = 8

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        out: list[ChatResult] = []
        for req in requests:
            text = req.messages[-1]["content"]
            golds = json.loads(re.search(r"Correct Answers: (\[.*\])", text).group(1))
            pred = text.rsplit("Predicted Answer: ", 1)[1].strip().lower()
            if pred == "unsure":
                reply = "???"
            else:
                reply = "True" if any(g.lower() in pred for g in golds) else "False."
            out.append([Completion(text=reply, completion_tokens=1)])
        return out


def _questions() -> list[Question]:
    return [
        Question("q1", "What is the capital of France?", ["Paris"]),
        Question("q2", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"]),
        Question("q3", "How many legs does a spider have?", ["8", "eight"]),
        Question("q4", "Which river flows through Vienna?", ["Danube"]),
    ]


def test_judge_over_http_scores_verdicts_and_counts_unparseable():
    with BackgroundServer(make_app(RuleJudge(), "judge")) as srv:
        judge = LLMJudge(OpenAIChatModel(srv.url, "judge", retries=0), batch_size=3)
        preds = ["It is Paris.", "Christopher Marlowe", "unsure", "the Danube river"]
        assert judge.judge(_questions(), preds) == [1.0, 0.0, 0.0, 1.0]
        assert judge.stats == {"judged": 4, "correct": 2, "unparseable": 1, "errors": 0}
        assert judge.last_replies == ["True", "False.", "???", "True"]
        assert judge.settings()["prompt"] == "c3po-validator" and judge.settings()["model"] == "judge"


def test_judge_with_the_tiny_model_behind_a_loopback_server():
    tiny = LocalChatModel("tiny", device=TEST_DEVICE)
    with BackgroundServer(make_app(tiny, "tiny")) as srv:
        judge = LLMJudge(OpenAIChatModel(srv.url, "tiny", retries=0), max_tokens=6)
        preds = ["Paris", "Marlowe", "8", "Rhine"]
        scores = judge.judge(_questions(), preds)
        assert len(scores) == 4 and set(scores) <= {0.0, 1.0}
        assert all(isinstance(r, str) for r in judge.last_replies)
        verdicts = [parse_verdict(r) for r in judge.last_replies]
        assert scores == [1.0 if v else 0.0 for v in verdicts]
        assert judge.stats["unparseable"] == verdicts.count(None)
        assert judge.stats["judged"] == 4 and judge.stats["errors"] == 0
        # the same replies as calling the local model directly (greedy, same prompt)
        again = LLMJudge(tiny, max_tokens=6)
        assert again.judge(_questions(), preds) == scores and again.last_replies == judge.last_replies


def test_judge_scores_zero_and_counts_errors_when_the_server_is_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    judge = LLMJudge(OpenAIChatModel(f"http://127.0.0.1:{port}", "x", retries=1, backoff=0.01))
    assert judge.judge(_questions()[:2], ["Paris", "Shakespeare"]) == [0.0, 0.0]
    assert judge.stats["errors"] == 2 and judge.last_replies == [None, None]
    with pytest.raises(ValueError, match="2 questions but 1 predictions"):
        judge.judge(_questions()[:2], ["Paris"])
