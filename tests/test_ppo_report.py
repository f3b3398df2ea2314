"""What `train ppo` tells its user (issue 31): the acts each iteration trained and why the others were not,
warnings when too many were left out, an error (not "saved") when nothing was trained, the training reward
as the credit defined it, the sampling temperature without a recipe, and the rollouts kept for inspection.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragteam.train.experience import Sample
from ragteam.train.ppo.log import act_counts, act_warnings, credit_means, iteration_line, nothing_trained
from ragteam.train.ppo_config import PPOConfig

# ---- the acts of one iteration -----------------------------------------------------------------------------


def test_act_counts_total_every_act_and_sort_the_reasons() -> None:
    acts = act_counts(11, {"too_long": 1, "uninformative_group": 12, "no_credit": 0})
    assert acts == {"total": 24, "trained": 11, "skipped": {"uninformative_group": 12, "too_long": 1}}


def test_an_iteration_that_trains_nothing_is_a_warning_naming_the_reasons() -> None:
    (warning,) = act_warnings(act_counts(0, {"uninformative_group": 12, "too_long": 12}))
    assert "trained 0 of 24 acts (too_long 12, uninformative_group 12)" in warning  # ties: by name


@pytest.mark.parametrize(
    ("trained", "skipped", "expected"),
    [
        (99, {"too_long": 1}, []),  # 1 % lost: at the limit, not over it
        (98, {"too_long": 2}, ["2 of 100 acts could not be trained (too_long 2): raise --ppo.max-sample"]),
        (91, {"uninformative_group": 9}, []),  # 9 %: a group estimator's usual filter
        (89, {"uninformative_group": 11}, ["11 of 100 trainable acts left out of the update"]),
        (50, {"role_not_trained": 50}, []),  # an ablation's untrained role: asked for, never a warning
        (40, {"role_not_trained": 50, "uninformative_group": 10}, ["10 of 50 trainable acts"]),
    ],
)
def test_acts_left_out_warn_past_one_percent_lost_or_a_tenth_in_all(trained, skipped, expected) -> None:
    warnings = act_warnings(act_counts(trained, skipped))
    assert len(warnings) == len(expected)
    for got, start in zip(warnings, expected):
        assert got.startswith(start)


def test_the_terminal_line_says_what_was_trained_and_the_credits_reward() -> None:
    row = {
        "iteration": 3,
        "acts": act_counts(11, {"uninformative_group": 12, "too_long": 1}),
        "credit": {"act": 0.25, "episode": 0.5},
        "reward": {"f1": 0.4, "cover_em": 0.5, "em": 0.3},
        "kl_mean": 0.01,
        "kl_beta": 0.05,
        "train": {"policy_loss": 0.1},
        "seconds": {"rollout": 3.0},
    }
    line = iteration_line(row, "outcome", "f1-minus-searches")
    assert line.startswith("ppo it 3: trained 11/24 acts (uninformative_group 12, too_long 1) | ")
    assert "reward (f1-minus-searches, outcome credit) 0.250/act 0.500/episode | answer f1 0.400" in line


def test_the_credits_reward_is_averaged_per_act_and_per_episode() -> None:
    def act(episode: str, reward: float) -> Sample:
        return Sample(episode, 0, "r", [1], [2], reward=reward)

    # one 3-act episode at 0 and one 1-act episode at 1: per act 0.25, per episode 0.5
    means = credit_means([act("a", 0.0), act("a", 0.0), act("a", 0.0), act("b", 1.0)])
    assert means == {"act": 0.25, "episode": 0.5}
    assert credit_means([]) == {}


def test_a_run_that_trained_nothing_is_an_error_and_one_that_trained_once_is_not() -> None:
    idle = act_counts(0, {"uninformative_group": 4})
    error = nothing_trained([idle, act_counts(0, {"uninformative_group": 2, "too_long": 1})])
    assert error is not None
    assert "no iteration trained any act (2 iterations, 7 acts: uninformative_group 6, too_long 1)" in error
    assert "--rollout.group-size" in error  # what to change for the main reason
    assert nothing_trained([idle, act_counts(1, {})]) is None
    assert nothing_trained([]) is None  # a resumed run that had nothing left to do


# ---- the temperature without a recipe ----------------------------------------------------------------------


def _cfg(**over) -> PPOConfig:
    return PPOConfig.model_validate({"data": "d.jsonl", "out": "o", **over})


def test_train_ppo_samples_at_temperature_one_unless_told_otherwise(tmp_path: Path) -> None:
    assert _cfg().rollout.temperature == 1.0
    assert _cfg(rollout={"group_size": 4}).rollout.temperature == 1.0  # rollout built anew
    assert _cfg(rollout={"temperature": 0.7}).rollout.temperature == 0.7
    recipe = tmp_path / "cool.yaml"
    recipe.write_text("recipe: mmoa\nrollout:\n  temperature: 0.6\n", encoding="utf-8")
    assert _cfg(recipe=str(recipe)).rollout.temperature == 0.6
    assert _cfg(recipe="mmoa", rollout={"temperature": 0.9}).rollout.temperature == 0.9


# ---- a real run: every act too long ------------------------------------------------------------------------


def test_a_run_that_trains_nothing_warns_each_iteration_exits_1_and_keeps_its_rollouts(
    hotpot_small: Path, tmp_path: Path, capfd
) -> None:
    from ragteam.cli.main import main
    from ragteam.rollout.traces import load_trace, read_episodes

    out = tmp_path / "ppo"
    argv = [
        "train", "ppo", "--recipe", "mmoa", "--data", str(hotpot_small), "--out", str(out), "--policy.model", "tiny",
        "--limit", "4", "--iterations", "2", "--questions-per-iteration", "2", "--variant", "s-g",
        "--topk", "2", "--candidates", "2", "--retriever.kind", "bm25", "--no-progress", "--no-tensorboard",
        "--ppo.max-sample-tokens", "32", "--save-rollouts-every", "2",
    ]  # fmt: skip
    assert main(argv) == 1
    err = capfd.readouterr().err
    assert err.count("WARNING trained 0 of") == 2  # one per iteration
    assert "ragteam: error: train ppo: no iteration trained any act" in err
    assert "too_long" in err and "--ppo.max-sample-tokens" in err
    assert "saved to" not in err
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["acts"]["trained"] for r in rows] == [0, 0]
    prefills = [r["prefill"]["policy"] for r in rows]  # the rollout's, by the prefix cache
    assert all(0 < p["prefill_tokens"] < p["prompt_tokens"] for p in prefills)
    assert all(r["acts"]["skipped"]["too_long"] == r["acts"]["total"] > 0 for r in rows)
    # the rollouts of every 2nd iteration: iteration 2 only, in eval's episodes format
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["iteration-2.jsonl"]
    episodes = list(read_episodes(out / "rollouts" / "iteration-2.jsonl"))
    assert len(episodes) == 2 and all(ep.leaves() for ep in episodes)
    assert len(load_trace(out / "rollouts" / "iteration-2.jsonl")) == 2  # what compare reads
    # and `ragteam ask --episodes` shows their traces, every rollout of a question or one question's
    assert main(["ask", "--episodes", str(out / "rollouts" / "iteration-2.jsonl")]) == 0
    shown = capfd.readouterr().out
    assert all(ep.question.question in shown and f"== episode {ep.id}" in shown for ep in episodes)
    assert main(["ask", "--episodes", str(out / "rollouts" / "iteration-2.jsonl"), "--id", "nope"]) == 1
    assert "no episode of question 'nope'" in capfd.readouterr().err


# ---- names from the registry -------------------------------------------------------------------------------


def test_a_credit_registers_by_call_or_decorator_as_a_workflow_does(monkeypatch) -> None:
    from ragteam import credit

    monkeypatch.setattr(credit, "CREDITS", dict(credit.CREDITS))

    def mine(episode, reward):
        return {}

    assert credit.register_credit("mine", mine) is mine  # a call, as register_workflow("x", Factory)
    assert credit.register_credit("mine-too")(mine) is mine  # a decorator
    assert credit.get_credit("mine") is mine and credit.get_credit("mine-too") is mine
    with pytest.raises(TypeError, match="a credit is a function"):
        credit.register_credit("bad", "outcome")


def test_an_installed_packages_credit_is_in_the_help_and_loads_by_name(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "selfask_credit.py").write_text(
        "def f1_minus_searches(episode, reward):\n    return {}\n", encoding="utf-8"
    )
    info = tmp_path / "selfask_credit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: selfask-credit\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[ragteam.credits]\nf1-minus-searches = selfask_credit:f1_minus_searches\n", encoding="utf-8"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    shown = subprocess.run(
        [sys.executable, "-m", "ragteam.cli.main", "train", "ppo", "--help"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    credit_help = " ".join(shown[shown.rindex("--ppo.credit PPO.CREDIT") :].split()[:40])  # not the usage
    assert "outcome, tree_mc" in credit_help and "f1-minus-searches" in credit_help
    assert "grpo (groups" in " ".join(shown.split())  # --ppo.advantage's names come from the registry too
    loaded = subprocess.run(
        [sys.executable, "-c", "from ragteam.credit import get_credit; print(get_credit('f1-minus-searches'))"],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    assert "f1_minus_searches" in loaded


# ---- curves --------------------------------------------------------------------------------------------------


def test_curves_tick_whole_iterations_and_plot_the_credits_reward() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ragteam.train.curves import curves_figure

    def row(i: int) -> dict:
        reward = {"f1": 0.1 * i, "cover_em": 0.1, "em": 0.0}
        out = {"iteration": i, "reward": reward, "credit": {"act": -0.5 + i, "episode": 0.0}, "roles": {}}
        if i == 2:  # evaluated once, after the last iteration: one point, still whole-number ticks
            out["eval"] = {m: {"mean": 10.0, "ci95": [5.0, 15.0]} for m in ("f1", "cover_em", "em")}
        return out

    fig = curves_figure([row(1), row(2)])
    try:
        fig.canvas.draw()
        for ax in [a for a in fig.axes if a.has_data()]:  # an empty panel says "not recorded"
            lo, hi = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
            assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
        reward = fig.axes[0]
        assert [line.get_label() for line in reward.get_lines()][0] == "credit (per act)"
        assert list(reward.get_lines()[0].get_ydata()) == [0.5, 1.5]
    finally:
        plt.close(fig)


def test_the_demo_goes_on_past_a_ppo_run_that_trained_nothing(monkeypatch, capsys) -> None:
    """`ragteam train ppo` fails such a run; the demo says WARNING and goes on to its report."""
    from ragteam.cli.demo import ppo_or_warn
    from ragteam.train import ppo

    def idle(cfg):
        raise ppo.NothingTrained("train ppo: no iteration trained any act (2 iterations, 4 acts: ...)")

    monkeypatch.setattr(ppo, "train_ppo", idle)
    ppo_or_warn(None)
    assert "PPO: WARNING train ppo: no iteration trained any act" in capsys.readouterr().out


def test_extend_mds_credit_example_runs_as_written(monkeypatch) -> None:
    """docs/extend.md's `f1-minus-searches` credit, executed from the page, on a two-act episode with one
    search: both acts get F1 0.5 - 0.1."""
    import re

    from ragteam import credit
    from ragteam.metrics.rewards import for_question, get_reward
    from ragteam.rollout.tree import Episode, Node
    from ragteam.types import Question

    monkeypatch.setattr(credit, "CREDITS", dict(credit.CREDITS))
    page = (Path(__file__).parent.parent / "docs" / "extend.md").read_text(encoding="utf-8")
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", page, re.DOTALL) if "f1_minus_searches" in b]
    exec(compile(code, "docs/extend.md", "exec"), {})
    ep = Episode(id="e", workflow="self-ask", question=Question(id="q", question="?", golden_answers=["a"]))
    ep.add(Node(id=-1, parent=None, kind="policy", role="asker"))
    ep.add(Node(id=-1, parent=0, kind="retrieve", queries=["follow-up"], k=2, hits=[[]]))
    ep.add(Node(id=-1, parent=1, kind="policy", role="asker"))
    ep.add(Node(id=-1, parent=2, kind="answer", answer="a b", rewards={"f1": 0.5, "em": 0.0}))
    f1 = for_question(get_reward("f1"), ep.question)
    assert credit.get_credit("f1-minus-searches")(ep, f1) == {0: pytest.approx(0.4), 2: pytest.approx(0.4)}


def test_a_resumed_run_is_judged_with_its_earlier_iterations(tmp_path: Path) -> None:
    """A resumed run whose new iterations trained nothing is no error when an earlier one trained (its
    log.jsonl row, or a row from before rows counted acts: its samples)."""
    from types import SimpleNamespace

    from ragteam.train.ppo.log import earlier_acts

    rows = [
        {"iteration": 1, "samples": 5, "skipped": {}},
        {"iteration": 2, "acts": act_counts(0, {"too_long": 3})},
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    resumed = SimpleNamespace(out=tmp_path, resume_from=tmp_path / "checkpoint-2")
    acts = earlier_acts(resumed)
    assert [a["trained"] for a in acts] == [5, 0]
    assert nothing_trained([*acts, act_counts(0, {"too_long": 2})]) is None
    assert nothing_trained([acts[1], act_counts(0, {"too_long": 2})]) is not None
    assert earlier_acts(SimpleNamespace(out=tmp_path, resume_from=None)) == []  # a fresh run
