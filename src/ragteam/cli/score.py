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


def check_golds(golds: list[str], choices: dict[str, str] | None) -> None:
    """ValueError for a gold no prediction could match: empty (or nothing once normalized), or, with
    --choices, a letter that is not one of the options. Why: such a gold scores every prediction 0, which
    reads as a wrong prediction rather than as the typo it is."""
    from ragteam.metrics.answer import normalize_answer

    for gold in golds:
        if not gold.strip():
            raise ValueError("--gold: an empty gold answer; give the answer text")
        if not normalize_answer(gold):
            raise ValueError(f"--gold: {gold[:80]!r} is only punctuation or invisible characters")
        if choices is not None and gold.strip().upper() not in choices:
            raise ValueError(
                f"--gold: {gold[:20]!r} is not one of the --choices letters {', '.join(choices)}"
            )


def run(cfg: Config) -> int:
    from ragteam.metrics.answer import NORMALIZATION, normalize_answer, score_answer

    choices = parse_choices(cfg.choices)
    check_golds(cfg.gold, choices)
    question = Question(id="score", question="", golden_answers=list(cfg.gold), choices=choices)
    scores: dict[str, object] = dict(score_answer(cfg.prediction, question))
    scores["normalized"] = {
        "prediction": normalize_answer(cfg.prediction),
        "gold": [normalize_answer(g) for g in cfg.gold],
    }
    scores["normalization"] = NORMALIZATION
    print(json.dumps(scores, ensure_ascii=False, indent=2))
    return 0
