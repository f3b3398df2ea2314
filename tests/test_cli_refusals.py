"""Low items of the round-4 probe, each a one-line refusal instead of a traceback or a silent non-answer:
`compare --metrics mc_acc` on runs without a multiple-choice question (printed 0.0 against 0.0), and a
`--workflow module:attribute` that is no Workflow class or factory of one's own (`os:system` was called
with the config before anything checked it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragteam.cli.main import main
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Question
from ragteam.workflows.registry import build_workflow

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]


def _run(path: Path, choices: dict[str, str] | None) -> Path:
    episodes = []
    for i in range(4):
        q = Question(id=f"q{i}", question=f"Who {i}?", golden_answers=["A"], choices=choices)
        ep = Episode(id=f"ep-{i}", workflow="test", question=q)
        ep.add(Node(id=-1, parent=None, kind="policy", role="actor"))
        ep.add(
            Node(id=-1, parent=0, kind="answer", answer="A", rewards={"em": 1.0, "f1": 1.0, "mc_acc": 1.0})
        )
        ep.status = "ok"
        episodes.append(ep)
    write_episodes(path, episodes)
    return path


def test_compare_refuses_a_metric_the_runs_do_not_have(tmp_path, capsys):
    a, b = _run(tmp_path / "a.jsonl", None), _run(tmp_path / "b.jsonl", None)
    assert main(["compare", str(a), str(b), "--metrics", "em", "mc_acc"]) == 1
    err = capsys.readouterr().err
    assert f"{a}: no multiple-choice question in this run, so no mc_acc to compare" in err
    assert len(err.strip().splitlines()) == 1
    mc_a, mc_b = (
        _run(tmp_path / "mc-a.jsonl", {"A": "x", "B": "y"}),
        _run(tmp_path / "mc-b.jsonl", {"A": "x"}),
    )
    assert main(["compare", str(mc_a), str(mc_b), "--metrics", "mc_acc", "--json"]) == 0


@pytest.mark.parametrize(
    "spec, kind",
    [("os:system", "builtin_function_or_method"), ("subprocess:run", "function"), ("os:PathLike", "ABCMeta")],
)
def test_a_module_path_that_is_no_workflow_is_refused_before_it_is_called(
    spec, kind, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError, match=f"is a {kind}, not a ragteam.Workflow subclass or a factory function"
    ):
        build_workflow(spec)
    assert main(["ask", "Who wrote Hamlet?", "--workflow", spec, *TINY]) == 1
    err = capsys.readouterr().err
    assert f"workflow '{spec}'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing ran: os.system(cfg) would have tried a command


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["train", "sft", "--data", "d", "--out", "o", "--init", "tiny"], "--init is now --policy.model"),
        (["train", "dpo", "--data", "d", "--out", "o", "--init=runs/sft"], "--init is now --policy.model"),
        (["train", "ppo", "--data", "d", "--out", "o", "--init", "tiny"], "--init is now --policy.model"),
        (["train", "prm", "--data", "d", "--out", "o", "--init", "tiny"], "--init is now --prm.model"),
        (
            ["collect", "sft", "--workflow", "c3po", "--teacher.max-batch-size", "8"],
            "--teacher.max-batch-size is now --policy.max-batch-size",
        ),
        (["demo", "--model.model", "tiny"], "--model.model is now --policy.model"),
        (["serve", "llm", "--model", "tiny"], "--model is now --model.model"),
        (["serve", "llm", "--threads", "1"], "--threads is now --model.threads"),
    ],
)
def test_a_models_former_spelling_is_refused_naming_the_new_one(argv, said, capsys):
    """One spelling for a model on every command (a ModelConfig group named for its role): the former
    spellings are no aliases; the command stops before it parses, naming what to write instead."""
    assert main(argv) == 2
    assert f"ragteam: {said}\n" == capsys.readouterr().err


def test_the_new_spellings_reach_the_configs():
    from ragteam.cli.main import command_config
    from ragteam.config import load_config
    from ragteam.train.ppo_config import PPOConfig

    for module, flag in (("train_sft", "policy"), ("train_dpo", "policy"), ("train_prm", "prm")):
        cls = __import__(f"ragteam.cli.{module}", fromlist=["Config"]).Config
        cfg = load_config(command_config(cls, []), overrides={"data": "d", "out": "o", flag: {"model": "m"}})
        assert getattr(cfg, flag).model == "m" and "init" not in type(cfg).model_fields
    ppo = PPOConfig(
        data="d", out="o", policy={"backend": "openai", "model": "runs/sft"}, ppo={"served_name": "p"}
    )
    assert (
        ppo.policy.model == "runs/sft" and ppo.served_policy().model == "p"
    )  # start weights; the server's name
    assert PPOConfig(data="d", out="o", policy={"model": "runs/sft"}).served_policy().model == "runs/sft"


def test_a_bad_or_missing_flag_is_named_as_the_flag_and_a_file_key_as_the_key(tmp_path, capsys):
    """The user reads the spelling they typed: `--workflow: required` (not the whole argument mapping),
    `--candidates: ...` for a flag, `candidates: ...` for the same key in a --config file."""
    out = str(tmp_path / "o")
    assert main(["eval", "--data", "x.jsonl", "--out", out]) != 0
    said = capsys.readouterr().err
    assert "--workflow: required" in said and "{" not in said
    assert main(["eval", "--workflow", "mmoa", "--candidates", "99", "--data", "x", "--out", out]) != 0
    assert "  --candidates: Input should be less than or equal to 50" in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    config.write_text("candidates: 99\n", encoding="utf-8")
    assert main(["eval", "--workflow", "mmoa", "--config", str(config), "--data", "x", "--out", out]) != 0
    assert "\n  candidates: Input should be less than or equal to 50" in capsys.readouterr().err
