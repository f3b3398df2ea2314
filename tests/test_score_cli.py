"""`ragteam score` through the real CLI entry point: JSON out, repeated --gold, multiple choice, errors."""

from __future__ import annotations

import json

import pytest

from ragteam.cli.main import main
from ragteam.metrics.answer import NORMALIZATION


def score(capsys, *argv: str) -> dict:
    assert main(["score", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_keys_and_values(capsys):
    out = score(capsys, "--prediction", "It was the Eiffel Tower.", "--gold", "Eiffel Tower")
    assert {"em", "f1", "precision", "recall", "cover_em", "normalization"} <= set(out)
    assert out["normalization"] == NORMALIZATION
    # "it was eiffel tower" vs "eiffel tower": P=2/4, R=1, F1=2/3
    assert (out["em"], out["cover_em"], out["precision"], out["recall"]) == (0.0, 1.0, 0.5, 1.0)
    assert out["f1"] == pytest.approx(2 / 3)
    assert out["normalized"] == {"prediction": "it was eiffel tower", "gold": ["eiffel tower"]}


def test_repeated_gold_accumulates(capsys):
    repeated = score(
        capsys, "--prediction", "La tour Eiffel", "--gold", "Eiffel Tower", "--gold", "la Tour Eiffel"
    )
    assert repeated["em"] == 1.0 and repeated["normalized"]["gold"] == ["eiffel tower", "la tour eiffel"]
    listed = score(capsys, "--prediction", "La tour Eiffel", "--gold", "Eiffel Tower", "la Tour Eiffel")
    assert listed == repeated


def test_empty_prediction_and_yes_no(capsys):
    assert score(capsys, "--prediction", "", "--gold", "Paris")["f1"] == 0.0
    out = score(capsys, "--prediction", "yes it is", "--gold", "yes")
    assert (out["f1"], out["cover_em"]) == (0.0, 1.0)


def test_multiple_choice(capsys):
    out = score(
        capsys, "--prediction", "The answer is (B).", "--gold", "B", "--choices", "A=aspirin", "B=heparin"
    )
    assert out["mc_acc"] == 1.0
    out = score(capsys, "--prediction", "give heparin", "--gold", "A", "--choices", "A=aspirin", "B=heparin")
    assert out["mc_acc"] == 0.0


def test_errors(capsys):
    assert main(["score", "--prediction", "x"]) == 2
    assert "gold" in capsys.readouterr().err
    assert main(["score", "--prediction", "x", "--gold", "B", "--choices", "A"]) == 1
    assert "LETTER=TEXT" in capsys.readouterr().err


def test_yaml_config(capsys, tmp_path):
    cfg = tmp_path / "score.yaml"
    cfg.write_text("prediction: Gödel\ngold: [Godel, Goedel]\n", encoding="utf-8")
    assert score(capsys, "--config", str(cfg))["em"] == 1.0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--gold", ""], "empty gold"),
        (["--gold", "   "], "empty gold"),
        (["--gold", "Paris", "--gold", ""], "empty gold"),
        (["--gold", "?!\u200b"], "only punctuation or invisible"),
        (["--gold", "C", "--choices", "A=aspirin", "B=heparin"], "not one of the --choices letters A, B"),
        (["--gold", "aspirin", "--choices", "A=aspirin", "B=heparin"], "not one of the --choices"),
    ],
)
def test_golds_no_prediction_could_match_are_refused(capsys, argv, needle):
    assert main(["score", "--prediction", "A", *argv]) == 1
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    # the lower-case letter of an option is accepted
    assert score(capsys, "--prediction", "(b)", "--gold", "b", "--choices", "A=x", "B=y")["mc_acc"] == 1.0
