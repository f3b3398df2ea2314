"""Rewards by name (`ragteam.metrics.rewards`): the registry, the built-in metric rewards, a reward registered
from outside the package training a PPO run, and `eval --reward` scoring with one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import ragteam
import ragteam.api  # noqa: F401  (--help lists the rewards known at its import: before these tests' own)
from ragteam.metrics import rewards
from ragteam.rollout.tree import Node


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, so a test's registrations do not outlive it."""
    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))
    return rewards.REWARDS


def leaf(answer: str = "a b", status: str = "ok", **scores: float) -> Node:
    return Node(id=3, parent=2, kind="answer", answer=answer, status=status, rewards=dict(scores))


def test_a_reward_registers_as_a_call_or_a_decorator_and_a_taken_name_is_refused(registry) -> None:
    def words(leaf, question) -> float:
        return float(len((leaf.answer or "").split()))

    assert ragteam.register_reward("words", words) is words
    assert ragteam.register_reward("words", words) is words  # the same function again (a re-import)

    @ragteam.register_reward("half")
    def half(leaf, question) -> float:
        return 0.5

    assert ragteam.get_reward("words")(leaf("one two three"), None) == 3.0
    assert ragteam.get_reward("half") is half and "half" in rewards.reward_names()
    with pytest.raises(ValueError, match="already registered"):
        ragteam.register_reward("words", half)
    with pytest.raises(ValueError, match=r"unknown reward 'nope'; known: .*cover_em.*f1"):
        ragteam.get_reward("nope")
    with pytest.raises(TypeError, match="a reward is a function"):
        ragteam.register_reward("bad", 3)  # type: ignore[arg-type]


def test_the_metric_rewards_read_what_the_engine_recorded() -> None:
    f1 = rewards.get_reward("f1")
    assert f1(leaf(f1=0.25, em=0.0), None) == 0.25
    assert f1(leaf(status="truncated", em=0.0), None) == 0.0  # truncated without the metric: worth 0
    with pytest.raises(KeyError, match="has no reward 'f1'"):
        f1(leaf(em=1.0), None)  # an ok leaf without it: an error, not a silent 0
    assert set(
        rewards.answer_rewards(ragteam.Question(id="q", question="?", golden_answers=["a b"]), "a b")
    ) >= {
        "em",
        "f1",
        "cover_em",
    }


SMALL_BATCHES = {"max_sample_tokens": 8192, "micro_tokens": 8192, "minibatch_tokens": 16384}
"""test_ppo's tiny runs' PPO sizes (the tiny model's byte-level BPE makes long prompts)."""

LENGTH_REWARD = '''
import ragteam


@ragteam.register_reward("answer-length")
def answer_length(leaf, question):
    """A quarter, plus a hundredth per character of the answer: nothing ragteam computes."""
    return 0.25 + len(leaf.answer or "") / 100
'''


def _expected(episodes: list[dict]) -> float:
    """The mean of `answer_length` over the answer leaves of saved episodes (a failed leaf with no metrics is
    worth 0, as credit reads it)."""
    values = []
    for ep in episodes:
        for node in ep["nodes"]:
            if node["kind"] == "answer":
                scored = node.get("status", "ok") == "ok" or node.get("rewards")
                values.append(0.25 + len(node.get("answer") or "") / 100 if scored else 0.0)
    return sum(values) / len(values)


@pytest.mark.slow  # a PPO run of whole iterations
def test_a_reward_registered_outside_the_package_trains_a_ppo_run(
    hotpot_small: Path, tmp_path: Path, monkeypatch, registry
) -> None:
    """A module written here registers `answer-length`; `train ppo --ppo.reward answer-length` trains one
    iteration on it: the log row carries its mean over the answers, and the credited acts got its values."""
    from test_ppo import tiny_cfg

    (tmp_path / "lengthreward.py").write_text(LENGTH_REWARD, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lengthreward", raising=False)
    import lengthreward  # noqa: F401  (registers the reward)

    cfg = tiny_cfg(
        hotpot_small,
        tmp_path / "out",
        iterations=1,
        save_rollouts_every=1,
        ppo={**SMALL_BATCHES, "reward": "answer-length", "credit": "outcome"},
    )
    out = ragteam.train_ppo(cfg)
    (row,) = [json.loads(x) for x in (out / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    episodes = [json.loads(x) for x in (out / "rollouts" / "iteration-1.jsonl").read_text().splitlines()]
    assert row["reward"]["answer-length"] == pytest.approx(_expected(episodes))
    leaves = [n for ep in episodes for n in ep["nodes"] if n["kind"] == "answer" and n.get("rewards")]
    assert leaves and all(  # the saved rollouts carry the training reward each answer got
        n["rewards"]["answer-length"] == pytest.approx(0.25 + len(n.get("answer") or "") / 100)
        for n in leaves
    )
    assert (
        row["reward"]["answer-length"] >= 0.25
    )  # its values, not an answer metric's (the tiny model's F1 ~ 0)
    assert row["credit"]["act"] >= 0.25 and row["acts"]["trained"] > 0  # `outcome` handed them to the acts
    assert "reward: answer-length" in (out / "config.yaml").read_text(encoding="utf-8")


def test_an_unknown_reward_fails_before_any_model_loads(hotpot_small: Path, tmp_path: Path) -> None:
    from test_ppo import tiny_cfg

    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        ragteam.train_ppo(tiny_cfg(hotpot_small, tmp_path / "out", ppo={**SMALL_BATCHES, "reward": "nope"}))
    assert not (tmp_path / "out").exists()


def test_eval_scores_with_a_registered_reward(hotpot_small: Path, tmp_path: Path, registry) -> None:
    """`eval --reward NAME`: each prediction row and the summary carry the reward beside EM / F1 / cover-EM,
    and the table on the terminal and in report.md has a column of its own for it."""
    ragteam.register_reward("answer-chars", lambda leaf, question: float(len(leaf.answer or "")))
    cfg = ragteam.EvalConfig(
        workflow="standard-rag",
        data=str(hotpot_small),
        out=str(tmp_path / "eval"),
        limit=2,
        retriever={"kind": "bm25"},
        topk=2,
        policy={"model": "tiny", "device": "cpu"},
        llm={"model": "tiny", "device": "cpu"},
        rollout={"max_tokens": 8, "llm_max_tokens": 8},
        progress=False,
        reward="answer-chars",
    )
    printed: list[str] = []
    summary = ragteam.evaluate(cfg, log=printed.append)
    rows = [json.loads(x) for x in (tmp_path / "eval" / "predictions.jsonl").read_text().splitlines()]
    header = "| workflow | n | EM | F1 | cover-EM | answer-chars | failed |"
    assert header in "\n".join(printed)
    assert header in (tmp_path / "eval" / "report.md").read_text(encoding="utf-8")
    assert [r["answer-chars"] for r in rows] == [
        0.0 if r["failed"] else float(len(r["prediction"])) for r in rows
    ]
    assert summary["metrics"]["answer-chars"] == pytest.approx(
        sum(r["answer-chars"] for r in rows) / len(rows)
    )
    assert {"em", "f1", "cover_em"} <= set(summary["metrics"])


def _episodes(path: Path, answers: list[str]) -> Path:
    from ragteam.rollout.traces import write_episodes
    from ragteam.rollout.tree import Episode

    episodes = []
    for i, answer in enumerate(answers):
        q = ragteam.Question(id=f"q{i}", question=f"Who {i}?", golden_answers=["A"])
        ep = Episode(id=f"ep-{i}", workflow="test", question=q)
        ep.add(Node(id=-1, parent=None, kind="policy", role="actor"))
        ep.add(
            Node(
                id=-1, parent=0, kind="answer", answer=answer, rewards={"em": 0.0, "f1": 0.0, "cover_em": 0.0}
            )
        )
        ep.status = "ok"
        episodes.append(ep)
    write_episodes(path, episodes)
    return path


def test_compare_pairs_two_runs_on_a_registered_reward(tmp_path: Path, registry, capsys) -> None:
    """`compare --metrics NAME`: each answer scored with the reward (x100, as the metrics), paired; an unknown
    name is refused with the known ones."""
    from ragteam.cli.main import main

    ragteam.register_reward("answer-chars", lambda leaf, question: float(len(leaf.answer or "")) / 10)
    a = _episodes(tmp_path / "a.jsonl", ["x", "xy", "xyz", "x"])
    b = _episodes(tmp_path / "b.jsonl", ["xx", "xyzw", "xyz", "xyz"])
    assert main(["compare", str(a), str(b), "--metrics", "answer-chars", "f1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["metrics"]
    assert result["answer-chars"]["a"] == pytest.approx(17.5) and result["answer-chars"][
        "b"
    ] == pytest.approx(30.0)
    assert "mcnemar" not in result["answer-chars"] and result["f1"]["a"] == 0.0
    assert main(["compare", str(a), str(b), "--metrics", "nope"]) == 1
    assert "unknown reward 'nope'" in capsys.readouterr().err


TEAM_WITH_A_REWARD = """
import ragteam
from ragteam import Answer, Workflow


class Team(Workflow):
    name = "team-with-a-reward"
    roles = ()
    needs = frozenset()

    def run(self, question):
        return Answer("")
        yield


@ragteam.register_reward("shorter-is-better")
def shorter(leaf, question):
    return -len(leaf.answer or "")


@ragteam.register_credit("all-the-same")
def same(episode, reward):
    return {}
"""


def test_a_team_named_by_module_path_lists_its_reward_and_credit_in_help(tmp_path: Path) -> None:
    """A reward and a credit registered in a team's module, the team named as `--workflow module:Class` (not
    installed): `--help` lists them under `eval --reward`, `train ppo --ppo.reward` and `--ppo.credit`, read
    when the parser is built, after the team's module was imported."""
    import os
    import subprocess

    (tmp_path / "rewardteam.py").write_text(TEAM_WITH_A_REWARD, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))

    def help_of(*command: str, flag: str) -> str:
        shown = subprocess.run(
            [sys.executable, "-m", "ragteam.cli.main", *command, "--workflow", "rewardteam:Team", "--help"],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip
        return " ".join(shown[shown.rindex(flag) :].split()[:40])  # the option's description, not the usage

    assert "shorter-is-better" in help_of("eval", flag="--reward REWARD")
    assert "shorter-is-better" in help_of("train", "ppo", flag="--ppo.reward PPO.REWARD")
    assert "all-the-same" in help_of("train", "ppo", flag="--ppo.credit PPO.CREDIT")


def test_compare_knows_the_reward_of_the_team_a_run_was_made_by(tmp_path: Path, monkeypatch, capsys) -> None:
    """`compare --metrics NAME` where NAME is registered by the module of the runs' team, on PYTHONPATH and not
    imported here (an eval of `--workflow pkg.module:Team`): compare imports the module config.yaml records,
    for an eval folder and for a PPO run's rollouts file alike."""
    from ragteam.cli.main import main

    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))
    (tmp_path / "cmpteam.py").write_text(
        "import ragteam\n\nragteam.register_reward('answer-chars-x', "
        "lambda leaf, question: float(len(leaf.answer or '')))\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cmpteam", raising=False)
    team = "team:\n  module: cmpteam\n  package: null\n"
    for run in ("eval", "ppo"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "config.yaml").write_text(team, encoding="utf-8")
    a = _episodes(tmp_path / "eval" / "episodes.jsonl", ["x", "xy"])
    (tmp_path / "ppo" / "rollouts").mkdir()
    b = _episodes(tmp_path / "ppo" / "rollouts" / "iteration-1.jsonl", ["xyz", "xyzw"])
    assert "answer-chars-x" not in rewards.REWARDS
    assert main(["compare", str(a.parent), str(b), "--metrics", "answer-chars-x", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["metrics"]["answer-chars-x"]
    assert result["a"] == pytest.approx(150.0) and result["b"] == pytest.approx(350.0)
