"""Paired comparison of two runs: the bootstrap and McNemar against hand-computed values, pairing by question
id (refused on different question sets), and `ragteam compare` end to end on two episodes.jsonl files."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragteam.cli.main import main
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode, Node
from ragteam.stats.paired import binomial_cdf_half, compare_runs, mcnemar, paired_bootstrap, sign_test
from ragteam.types import Action, Question


def episode(qid: str, answer: str, status: str = "ok", **rewards: float) -> Episode:
    """A one-leaf episode of question `qid` (gold "Ann") whose leaf holds `rewards`."""
    ep = Episode(
        id=f"ep-{qid}",
        workflow="test",
        question=Question(id=qid, question=f"Who {qid}?", golden_answers=["Ann"]),
    )
    ep.add(Node(id=-1, parent=None, kind="policy", role="actor"))
    ep.add(Node(id=-1, parent=0, kind="answer", answer=answer, rewards=dict(rewards)))
    ep.status = status
    return ep


def right(qid: str) -> Episode:
    return episode(qid, "Ann", em=1.0, f1=1.0, cover_em=1.0)


def wrong(qid: str) -> Episode:
    return episode(qid, "Bob", em=0.0, f1=0.0, cover_em=0.0)


# ---- the statistics ---------------------------------------------------------------------------------------------


def test_mcnemar_hand_computed():
    # n01 = 8 (A wrong, B right), n10 = 1: p = 2 * P[X <= 1], X ~ Bin(9, 1/2) = 2 * (1 + 9) / 512
    a = [True] + [False] * 8 + [True, False]  # the last two pairs agree (both right, both wrong)
    b = [False] + [True] * 8 + [True, False]
    assert mcnemar(a, b) == {"n01": 8, "n10": 1, "discordant": 9, "p": 0.0390625}
    assert mcnemar([False] * 5, [True] * 5)["p"] == 2 / 32  # all 5 discordant pairs one way
    assert mcnemar([True, False] * 3, [False, True] * 3)["p"] == 1.0  # 3 vs 3: 2 * 42/64 capped at 1
    assert mcnemar([True, False], [True, False]) == {"n01": 0, "n10": 0, "discordant": 0, "p": 1.0}
    assert binomial_cdf_half(1, 9) == 10 / 512 and binomial_cdf_half(9, 9) == 1.0


def test_bootstrap_hand_computed():
    # differences (1, 0): a resample of 2 has mean 0, 0.5, 1 with probability 1/4, 1/2, 1/4
    r = paired_bootstrap([0.0, 0.0], [1.0, 0.0])
    assert r["mean_diff"] == 0.5 and r["ci95"] == [0.0, 1.0] and r["n"] == 2
    assert r["p"] == pytest.approx(2 * 0.25, abs=0.03)  # P[mean <= 0] = 1/4
    # differences (1, 1, -1): mean 1/3; a resample's mean is <= 0 when it draws -1 at least twice:
    # P = 3 * (1/3)^2 * (2/3) + (1/3)^3 = 7/27, so p = 14/27
    r = paired_bootstrap([0.0, 0.0, 1.0], [1.0, 1.0, 0.0])
    assert r["mean_diff"] == pytest.approx(1 / 3) and r["p"] == pytest.approx(14 / 27, abs=0.03)
    # the sign is symmetric: swapping the runs negates the difference and the interval, p unchanged
    s = paired_bootstrap([1.0, 1.0, 0.0], [0.0, 0.0, 1.0])
    assert s["mean_diff"] == pytest.approx(-1 / 3) and s["p"] == r["p"]
    assert s["ci95"] == pytest.approx([-r["ci95"][1], -r["ci95"][0]])


def test_bootstrap_identical_seeded_and_refusals():
    r = paired_bootstrap([0.2, 0.9, 0.5], [0.2, 0.9, 0.5])
    assert (r["mean_diff"], r["ci95"], r["p"]) == (0.0, [0.0, 0.0], 1.0)
    assert paired_bootstrap([1, 0], [0, 1])["p"] == 1.0  # gains and losses cancel: mean 0
    x, y = [0.1, 0.4, 0.3, 0.9], [0.5, 0.2, 0.8, 0.9]
    assert paired_bootstrap(x, y, seed=3) == paired_bootstrap(x, y, seed=3)
    assert paired_bootstrap([0.0] * 30, [1.0] * 30)["p"] == 0.0  # no resample crosses 0: p < 1/n
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap([1.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="no paired values"):
        paired_bootstrap([], [])


# ---- pairing two runs -------------------------------------------------------------------------------------------


def test_identical_runs_differ_by_nothing():
    run = [right("q0"), wrong("q1"), episode("q2", "Ann Lee", em=0.0, f1=2 / 3, cover_em=1.0)]
    out = compare_runs(run, list(reversed(run)))  # order does not matter: paired by id
    assert out["counts"] == {
        "questions": 3,
        "dropped": 0,
        "changed": 0,
        "better": 0,
        "worse": 0,
        "failed_a": 0,
        "failed_b": 0,
    }
    for m in ("em", "f1", "cover_em"):
        r = out["metrics"][m]
        assert r["a"] == r["b"] and r["bootstrap"]["mean_diff"] == 0.0 and r["bootstrap"]["p"] == 1.0
    assert out["metrics"]["em"]["mcnemar"]["p"] == 1.0 and "mcnemar" not in out["metrics"]["f1"]
    assert out["metrics"]["cover_em"]["a"] == pytest.approx(200 / 3)  # x100, like the eval reports


def test_clearly_better_run_has_small_p():
    ids = [f"q{i}" for i in range(40)]
    a = [wrong(q) for q in ids[:35]] + [right(q) for q in ids[35:]]
    b = [right(q) for q in ids[:30]] + [wrong(q) for q in ids[30:]]  # 30 gained, 5 lost
    out = compare_runs(a, b)
    em = out["metrics"]["em"]
    assert (em["a"], em["b"], em["bootstrap"]["mean_diff"]) == (12.5, 75.0, 62.5)
    assert em["bootstrap"]["p"] < 0.001 and em["bootstrap"]["ci95"][0] > 0
    assert em["mcnemar"]["n01"] == 30 and em["mcnemar"]["n10"] == 5
    assert em["mcnemar"]["p"] == pytest.approx(2 * binomial_cdf_half(5, 35)) and em["mcnemar"]["p"] < 1e-4
    assert out["counts"]["better"] == 30 and out["counts"]["worse"] == 5 and out["counts"]["changed"] == 35


def test_failed_and_unscored_episodes():
    a = [episode("q0", "", status="failed"), episode("q1", "the Ann")]  # q1: no rewards on the leaf
    b = [right("q0"), right("q1")]
    out = compare_runs(a, b, metrics=["em"])
    assert out["counts"]["failed_a"] == 1 and out["counts"]["failed_b"] == 0
    assert out["metrics"]["em"]["a"] == 50.0  # q0 failed -> 0, q1 rescored from its answer -> 1
    assert out["counts"]["changed"] == 1 and out["counts"]["better"] == 1  # "the ann" == "ann" normalized


def test_different_question_sets_are_refused_with_ids():
    a = [right(f"q{i}") for i in range(5)]
    b = [right(f"q{i}") for i in range(4)] + [right("q9")]
    with pytest.raises(ValueError, match=r"1 only in A \(q4\); 1 only in B \(q9\).*--intersect"):
        compare_runs(a, b)
    out = compare_runs(a, b, intersect=True)
    assert out["counts"]["questions"] == 4 and out["counts"]["dropped"] == 2
    with pytest.raises(ValueError, match="share no question"):
        compare_runs([right("x")], [right("y")], intersect=True)
    other = right("q0")
    other.question.question = "Where?"
    with pytest.raises(ValueError, match="different questions.*q0"):
        compare_runs([right("q0")], [other])


# ---- ragteam compare ----------------------------------------------------------------------------------------------


def _two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run A as an eval folder (a/episodes.jsonl), run B as a bare .jsonl (like PPO's eval/iteration-N.jsonl)."""
    ids = [f"q{i}" for i in range(12)]
    (tmp_path / "a").mkdir()
    write_episodes(
        tmp_path / "a" / "episodes.jsonl", [wrong(q) for q in ids[:10]] + [right(q) for q in ids[10:]]
    )
    write_episodes(tmp_path / "b.jsonl", [right(q) for q in ids[:9]] + [wrong(q) for q in ids[9:]])
    return tmp_path / "a", tmp_path / "b.jsonl"


def _cli(*argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ragteam.cli.main", "compare", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_cli_end_to_end(tmp_path: Path):
    a, b = _two_runs(tmp_path)
    done = _cli(str(a), str(b), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["a"] == str(a) and out["counts"]["questions"] == 12
    assert out["counts"]["better"] == 9 and out["counts"]["worse"] == 2
    em = out["metrics"]["em"]
    assert (em["a"], em["b"]) == pytest.approx((100 * 2 / 12, 100 * 9 / 12))
    assert (em["mcnemar"]["n01"], em["mcnemar"]["n10"]) == (9, 2)
    assert em["mcnemar"]["p"] == pytest.approx(2 * (1 + 11 + 55) / 2**11)

    done = _cli(str(a), str(b), "--metrics", "em", "f1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "| metric | A | B | B-A [95% CI] | p (bootstrap) | p (McNemar / sign) |" in lines
    assert "| invalid acts | 0.0 | 0.0 | +0.0 [+0.0, +0.0] | 1 | 1 |" in lines  # its acts carry no parse
    assert any(
        line.startswith("| EM | 16.7 | 75.0 | +58.3 [") and line.endswith("| 0.0654 |") for line in lines
    )
    assert any(line.startswith("| F1 |") and line.endswith("| – |") for line in lines)
    assert "12 questions, 11 answers changed, 9 better, 2 worse (by F1); failed: A 0, B 0" in lines

    gz = tmp_path / "b.jsonl.gz"  # an archived run (docs/runs/): read through gzip, the same comparison
    gz.write_bytes(gzip.compress(b.read_bytes()))
    zipped = _cli(str(a), str(gz), "--json")
    assert zipped.returncode == 0, zipped.stderr
    assert json.loads(zipped.stdout)["metrics"] == out["metrics"]


def test_cli_errors_name_the_file(tmp_path: Path, capsys):
    a, b = _two_runs(tmp_path)
    assert main(["compare", str(tmp_path / "missing"), str(b)]) == 1
    assert f"{tmp_path / 'missing'}: no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty"), str(b)]) == 1
    assert f"{tmp_path / 'empty'}: no episodes.jsonl" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(b.read_text().splitlines()[0] + "\n{not json\n")
    assert main(["compare", str(a), str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2: not an episode record" in err and len(err.strip().splitlines()) == 1
    short = tmp_path / "short.jsonl"
    short.write_text("".join(line + "\n" for line in b.read_text().splitlines()[:10]))
    assert main(["compare", str(a), str(short)]) == 1
    assert "2 only in A (q10, q11)" in capsys.readouterr().err
    assert main(["compare", str(a), str(short), "--intersect", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["dropped"] == 2


def test_sign_test_hand_computed():
    # down 5, up 1, 2 ties: p = 2 * P[X <= 1], X ~ Bin(6, 1/2) = 2 * 7/64
    a = [50, 50, 50, 50, 50, 10, 20, 30]
    b = [0, 10, 20, 30, 40, 90, 20, 30]
    assert sign_test(a, b) == {"down": 5, "up": 1, "p": pytest.approx(14 / 64)}
    assert sign_test([1, 2], [1, 2])["p"] == 1.0
    with pytest.raises(ValueError, match="same length"):
        sign_test([1], [1, 2])


def acting(qid: str, *valid: bool) -> Episode:
    """An episode of question `qid` whose policy acts parsed (True) or did not (False), then a wrong answer."""
    ep = Episode(
        id=f"ep-{qid}",
        workflow="test",
        question=Question(id=qid, question=f"Who {qid}?", golden_answers=["Ann"]),
    )
    parent = None
    for ok in valid:
        ep.add(
            Node(id=-1, parent=parent, kind="policy", role="actor", action=Action("answer", "x", valid=ok))
        )
        parent = len(ep.nodes) - 1
    ep.add(
        Node(
            id=-1, parent=parent, kind="answer", answer="Bob", rewards={"em": 0.0, "f1": 0.0, "cover_em": 0.0}
        )
    )
    return ep


def test_invalid_acts_are_paired_per_question_at_report_mds_pooled_rate():
    """A's questions: 1 of 2 acts invalid, 2 of 2, 0 of 1; B's: 0 of 2, 1 of 2, 0 of 1 -> pooled 3/5 = 60 %
    against 1/5 = 20 % (report.md's rate; the per-question mean would say 50 and 16.7): B - A = -40 points;
    2 questions down, none up (sign test p = 2 x 1/4)."""
    from ragteam.stats.episodes import invalid_rate

    a = [acting("q0", True, False), acting("q1", False, False), acting("q2", True)]
    b = [acting("q0", True, True), acting("q1", True, False), acting("q2", True)]
    r = compare_runs(a, b)["metrics"]["invalid"]
    assert (r["a"], r["b"]) == (pytest.approx(60.0), pytest.approx(20.0))
    assert (r["a"], r["b"]) == (pytest.approx(100 * invalid_rate(a)), pytest.approx(100 * invalid_rate(b)))
    assert r["bootstrap"]["mean_diff"] == pytest.approx(-40.0)
    lo, hi = r["bootstrap"]["ci95"]
    assert lo <= -40.0 <= hi and hi <= 0.0  # no resample has B worse: B is never above A on any question
    assert r["sign"] == {"down": 2, "up": 0, "p": pytest.approx(0.5)}
    assert (
        "invalid" in compare_runs(a, b)["metrics"]
        and "invalid" not in compare_runs([wrong_no_act("q0")], [wrong_no_act("q0")])["metrics"]
    )


def wrong_no_act(qid: str) -> Episode:
    """A wrong answer with no policy act (a workflow with nothing to train): no invalid row."""
    ep = Episode(
        id=f"ep-{qid}",
        workflow="test",
        question=Question(id=qid, question=f"Who {qid}?", golden_answers=["Ann"]),
    )
    ep.add(
        Node(id=-1, parent=None, kind="answer", answer="Bob", rewards={"em": 0.0, "f1": 0.0, "cover_em": 0.0})
    )
    return ep


def test_questions_for_power_hand_computed():
    from ragteam.stats.paired import questions_for_power

    # ((1.959964 + 0.841621) * 1.0 / 0.5)^2 = 5.60317^2 = 31.40 -> 32 questions
    assert questions_for_power(0.5, 1.0) == 32
    assert questions_for_power(-0.5, 1.0) == 32  # the sign of the difference does not matter
    assert questions_for_power(0.0, 1.0) is None  # no difference: nothing to power for
    # differences +1, +1, -1, +1: mean 0.5, squared deviations 0.25 + 0.25 + 2.25 + 0.25 = 3, / (4 - 1) -> sd 1
    boot = paired_bootstrap([0, 0, 1, 0], [1, 1, 0, 1])
    assert boot["sd_diff"] == pytest.approx(1.0)
    assert boot["n_for_power"] == 32


def test_detectable_effect_hand_computed():
    from ragteam.stats.paired import detectable_effect, questions_for_power

    # (1.959964 + 0.841621) * 0.279 / sqrt(900) = 2.801585 * 0.0093 = 0.026055: the 900 held-out questions
    assert detectable_effect(0.279, 900) == pytest.approx(0.026055, abs=1e-6)
    assert detectable_effect(0.279, 100) == pytest.approx(0.078164, abs=1e-6)
    assert detectable_effect(1.0, 1) is None  # one question has no spread to test against
    # the inverse of questions_for_power: the effect n questions detect needs n questions
    assert questions_for_power(detectable_effect(1.0, 50) * (1 + 1e-9), 1.0) == 50  # (ceil: float noise)
    # differences +1, +1, -1, +1 (sd 1, n 4): 2.801585 / 2
    assert paired_bootstrap([0, 0, 1, 0], [1, 1, 0, 1])["detectable"] == pytest.approx(1.4007925)
