"""LLM-as-judge answer correctness with C-3PO's answer-validator prompt (paper appendix D.2), in our words.

The judge shows a model the question, the list of acceptable answers and the prediction, and asks for a bare
`True` or `False`, exactly the decision format of C-3PO's validator. `parse_verdict` reads that verdict
robustly (the first true/false word, else yes/no, else correct/incorrect; any case, with markdown or
quotes around it; `not` before the word flips it) and never raises;
an unreadable verdict or a failed model call scores 0 and is counted in `LLMJudge.stats`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ragteam.llm.base import ChatModel, ChatRequest, ModelError, Sampling
from ragteam.types import Message, Question

PROMPT_NAME = "c3po-validator"

VALIDATOR_INSTRUCTIONS = """You check answers. Decide whether a predicted answer agrees with at least one answer \
from a list of accepted correct answers.

You will be given:
Question: the question that was asked
Correct Answers: a list of accepted correct answers
Predicted Answer: the answer to check

How to decide:
1. Judge meaning, not surface form: a paraphrase or an equivalent expression counts as a match.
2. Differences in capitalization, spacing, punctuation or formatting do not matter.
3. For numbers, accept a reasonable tolerance where the question allows one.
4. For text, ask whether the prediction states the same core fact as a correct answer.
5. The prediction is correct when it matches ANY ONE of the correct answers, exactly or in meaning.
6. Reply with exactly one word: "True" if the prediction is correct, "False" if it is not."""

# Tried in order: the asked-for True/False, then yes/no, then (in)correct; "not" flips the word after it.
_VERDICTS = [
    re.compile(r"\b(not\s+)?(true|false)\b", re.IGNORECASE),
    re.compile(r"\b(not\s+)?(yes|no)\b", re.IGNORECASE),
    re.compile(r"\b(not\s+)?(correct|incorrect|right|wrong)\b", re.IGNORECASE),
]
_POSITIVE = {"true", "yes", "correct", "right"}


def validator_messages(question: str, golden_answers: Sequence[str], prediction: str) -> list[Message]:
    """The chat messages asking the judge about one prediction (instructions, then the case to decide)."""
    case = (
        "Now decide this case.\n\n"
        f"Question: {question}\n"
        f"Correct Answers: {json.dumps(list(golden_answers), ensure_ascii=False)}\n"
        f"Predicted Answer: {prediction}"
    )
    return [{"role": "user", "content": f"{VALIDATOR_INSTRUCTIONS}\n\n{case}"}]


def parse_verdict(text: str) -> bool | None:
    """True / False from the judge's reply (its first verdict word), or None when it states no verdict."""
    if not isinstance(text, str):
        return None
    for pattern in _VERDICTS:
        match = pattern.search(text)
        if match is not None:
            positive = match.group(2).lower() in _POSITIVE
            return positive != bool(match.group(1))
    return None


class LLMJudge:
    """Scores predictions 1.0 (correct) / 0.0 with any ChatModel, one batched `chat()` call per `judge()`."""

    def __init__(self, model: ChatModel, max_tokens: int = 8, batch_size: int = 64) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.stats = {"judged": 0, "correct": 0, "unparseable": 0, "errors": 0}
        self.last_replies: list[str | None] = []

    def settings(self) -> dict[str, Any]:
        """What a report should record about this metric."""
        return {
            "prompt": PROMPT_NAME,
            "model": getattr(self.model, "name", type(self.model).__name__),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "unparseable_scores": 0.0,
        }

    def judge(self, questions: list[Question], predictions: list[str]) -> list[float]:
        """1.0 / 0.0 per (question, prediction); unreadable verdicts and failed calls score 0 (and are counted)."""
        if len(questions) != len(predictions):
            raise ValueError(f"{len(questions)} questions but {len(predictions)} predictions")
        sampling = Sampling(temperature=0.0, max_tokens=self.max_tokens, n=1, seed=0)
        requests = [
            ChatRequest(validator_messages(q.question, q.golden_answers, p or ""), sampling)
            for q, p in zip(questions, predictions)
        ]
        scores: list[float] = []
        self.last_replies = []
        for start in range(0, len(requests), self.batch_size):
            for result in self.model.chat(requests[start : start + self.batch_size]):
                self.stats["judged"] += 1
                if isinstance(result, ModelError) or not result:
                    self.stats["errors"] += 1
                    self.last_replies.append(None)
                    scores.append(0.0)
                    continue
                reply = result[0].text
                self.last_replies.append(reply)
                verdict = parse_verdict(reply)
                if verdict is None:
                    self.stats["unparseable"] += 1
                self.stats["correct"] += int(bool(verdict))
                scores.append(1.0 if verdict else 0.0)
        return scores
