"""`ragteam score`: score one prediction against gold answers and print the metrics as JSON.

ragteam score --prediction "the Eiffel tower" --gold "Eiffel Tower" --gold "La tour Eiffel"
ragteam score --prediction "The answer is (B)." --gold B --choices "A=aspirin" "B=heparin"
"""

from __future__ import annotations

import json

from pydantic import Field

from ragteam.config import Config as BaseConfig
from ragteam.types import Question


class Config(BaseConfig):
    """Settings of `ragteam score`."""

    prediction: str = Field(..., description="the predicted answer (free text)")
    gold: list[str] = Field(
        ...,
        min_length=1,
        description="a gold answer; repeat --gold (or give several values) for aliases: the best one counts",
    )
    choices: list[str] = Field(
        default_factory=list,
        description="options of a multiple-choice question as LETTER=TEXT; --gold is then the letter, "
        "and mc_acc (the letter read from the prediction) is added",
    )


def parse_choices(items: list[str]) -> dict[str, str] | None:
    """`["A=aspirin", "B=heparin"]` -> `{"A": "aspirin", "B": "heparin"}`; ValueError on a malformed item."""
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        letter, sep, text = item.partition("=")
        if not sep or not letter.strip() or not text.strip():
            raise ValueError(f"--choices: {item!r} is not LETTER=TEXT")
        out[letter.strip().upper()] = text.strip()
    return out


def run(cfg: Config) -> int:
    from ragteam.metrics.answer import NORMALIZATION, normalize_answer, score_answer

    question = Question(
        id="score", question="", golden_answers=list(cfg.gold), choices=parse_choices(cfg.choices)
    )
    scores: dict[str, object] = dict(score_answer(cfg.prediction, question))
    scores["normalized"] = {
        "prediction": normalize_answer(cfg.prediction),
        "gold": [normalize_answer(g) for g in cfg.gold],
    }
    scores["normalization"] = NORMALIZATION
    print(json.dumps(scores, ensure_ascii=False, indent=2))
    return 0
