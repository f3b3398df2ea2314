"""examples/search_r1: Search-R1's agent written only against ragteam's public API, as its own package.

Its parser and turns with scripted replies; the team built by `module:Class` and by its installed entry point
(a real `pip install` of the example into a temporary folder); an evaluation of a few HotpotQA questions and
two PPO iterations (GAE with a critic, and GRPO) with the tiny model over BM25.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scripted import drive, hits_for, prompt_text, question

import ragteam
from ragteam.protocol import Act

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "search_r1"
TARGET = "search_r1.workflow:SearchR1"


def _forget() -> None:
    """Drop the example's modules, so the next import finds them where sys.path now says."""
    for name in [m for m in sys.modules if m == "search_r1" or m.startswith("search_r1.")]:
        del sys.modules[name]


@pytest.fixture(autouse=True)
def _registries(monkeypatch):
    """The example's credit and reward, registered when a test imports it, forgotten after the test: `--help`
    reads the registries when a parser is built, so a later test (docs/cli.md's) sees only ragteam's own."""
    from ragteam import credit
    from ragteam.metrics import rewards

    monkeypatch.setattr(credit, "CREDITS", dict(credit.CREDITS))
    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))


@pytest.fixture
def on_path(monkeypatch):
    """The example importable from its source folder (as with PYTHONPATH=examples/search_r1)."""
    _forget()
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    _forget()


def _parsers_module():
    """The example's parsers.py loaded from its file, under a name of its own (no sys.path change)."""
    spec = importlib.util.spec_from_file_location("search_r1_parsers", EXAMPLE / "search_r1" / "parsers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the parser and the turns, with scripted replies ------------------------------------------------------


def test_the_first_tag_is_the_action_and_nothing_raises(on_path):
    from search_r1.parsers import parse_reply, write_reply

    search = parse_reply("<think>I need the director.</think>\n<search> Holocaust 2000 director </search>")
    assert (search.kind, search.value, search.valid) == ("search", "Holocaust 2000 director", True)
    first = parse_reply("<answer> Alberto De Martino </answer> <search> more </search>")
    assert (first.kind, first.value) == ("answer", "Alberto De Martino")
    unclosed = parse_reply("<think>ok</think><search> who directed it")  # the stop string left out
    assert (unclosed.kind, unclosed.value) == ("search", "who directed it")
    for bad in ("no tags at all", "<search>   </search>", "<answer></answer>", ""):
        action = parse_reply(bad)
        assert action.kind == "none" and not action.valid and action.error
    assert parse_reply(write_reply(first)) == first


PARSERS = _parsers_module()
_PIECES = st.sampled_from(["<search>", "</search>", "<answer>", "</answer>", "<", ">", "a", " ", "\n"])


@given(st.lists(_PIECES).map("".join))
def test_the_parser_never_raises(text):
    action = PARSERS.parse_reply(text)
    assert action.kind in ("search", "answer", "none") and action.valid == (action.kind != "none")


def test_searches_come_back_as_information_then_the_answer_ends_the_episode(on_path):
    from search_r1 import SearchR1
    from search_r1.prompts import INVALID

    replies = [
        "<think>Who directed it?</think> <search> Holocaust 2000 director </search>",
        "I am not sure.",
        "<answer> Alberto De Martino </answer>",
    ]
    trace = drive(SearchR1(ragteam.WorkflowConfig(topk=2)), question(), policy={"agent": replies})
    assert trace.answer.text == "Alberto De Martino" and trace.queries() == ["Holocaust 2000 director"]
    assert trace.answer.info == {
        "turns": 3, "searches": 1, "queries": ["Holocaust 2000 director"], "invalid": 1, "stop": "answer"
    }  # fmt: skip
    (first, _), (second, _), (third, _) = trace.acts("agent")
    assert len(first.messages) == 1 and "<search>" in first.messages[0]["content"]
    hits = hits_for("Holocaust 2000 director", 2)
    assert second.messages[1] == {"role": "assistant", "content": replies[0]}
    info = second.messages[2]["content"]
    assert info.startswith("\n\n<information>Doc 1(Title: Holocaust 2000 director #1)") and "Doc 2(" in info
    assert info.rstrip().endswith("</information>") and all(h.doc.text in info for h in hits)
    assert third.messages[-1]["content"] == INVALID  # the observation of the invalid turn
    assert isinstance(first, Act) and first.role == "agent" and first.stop == ("</search>", "</answer>")


def test_the_last_turn_may_only_answer(on_path):
    from search_r1 import SearchR1
    from search_r1.options import SearchR1Options

    cfg = SearchR1Options(topk=1, max_turns=2)  # two searching turns, then one answer-only turn
    trace = drive(SearchR1(cfg), question(), policy={"agent": "<search> again"})
    assert len(trace.acts("agent")) == 3 and trace.queries() == ["again", "again"]
    assert trace.answer.text == "" and trace.answer.info["stop"] == "max_turns"
    last_prompt = prompt_text(trace.acts("agent")[-1][0])
    assert last_prompt.count("<information>Doc") == 2 and "again</search>" in last_prompt  # the reply closed
    assert SearchR1().max_turns == SearchR1Options().max_turns == 10  # --max-turns (the recipe: 4)


# ---- built by name: module:Class and the installed entry point ------------------------------------------


def test_built_by_module_and_class(on_path):
    team = ragteam.build_workflow(TARGET, ragteam.WorkflowConfig(topk=3))
    assert type(team).__name__ == "SearchR1" and team.name == "search-r1" and team.cfg.topk == 3
    assert [r.name for r in team.roles] == ["agent"] and team.needs == {"policy", "retriever"}


@pytest.mark.slow  # installs a package, then a command in a process of its own
def test_built_by_its_entry_point_once_installed(tmp_path, monkeypatch):
    """A real install of the example (pip, no dependencies, no index) into a folder put on sys.path: its
    `ragteam.workflows` entry point makes `search-r1` a name every command knows."""
    from ragteam.workflows.registry import workflow_help, workflow_names

    source = tmp_path / "src"
    subprocess.run(["cp", "-r", str(EXAMPLE), str(source)], check=True)  # the build writes beside the source
    site = tmp_path / "site"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
    ]
    subprocess.run([*pip, "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    _forget()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        assert "search-r1" in workflow_names() and "search-r1" in workflow_help()
        from ragteam.metrics.rewards import reward_names

        assert "search_r1_format_em" in reward_names()  # its `ragteam.rewards` entry point, not imported
        team = ragteam.build_workflow("search-r1")
        assert type(team).__name__ == "SearchR1"
        assert Path(sys.modules[type(team).__module__].__file__).is_relative_to(site)
    finally:
        _forget()


# ---- its own option, --max-turns: from the command line and from Python --------------------------------


def _command(argv: list[str]):
    """`ragteam ...argv` resolved as the command resolves it (the parser built for the chosen workflow)."""
    import ragteam.cli.evaluate as command
    from ragteam.cli.main import _add_command_flags, _strip, build_parser, command_config
    from ragteam.config import config_from_args

    cls = command_config(command.Config, argv)
    parser = build_parser()
    _add_command_flags(parser, "evaluate", command, cls)
    return parser, cls, (lambda: config_from_args(cls, _strip(parser.parse_args(argv))))


def test_its_option_is_a_flag_of_the_commands_that_run_it(on_path, capsys):
    from search_r1.options import SearchR1Options

    argv = ["eval", "--workflow", TARGET, "--max-turns", "2", "--data", "d", "--out", "o"]
    _, cls, resolve = _command(argv)
    cfg = resolve()
    assert cfg.max_turns == 2 and ragteam.build_workflow(cfg.workflow, cfg.workflow_config()).max_turns == 2
    assert isinstance(cfg.workflow_config(), SearchR1Options)
    parser, _, _ = _command(["eval", "--workflow", TARGET])
    assert "--max-turns" in _subcommand_help(parser, "eval")  # `--help` with the workflow lists it
    _, other, resolve_other = _command(
        ["eval", "--workflow", "c3po", "--max-turns", "2", "--data", "d", "--out", "o"]
    )
    assert "max_turns" not in other.model_fields  # another team has no such option
    with pytest.raises(SystemExit):
        resolve_other()
    assert "unrecognized arguments: --max-turns" in capsys.readouterr().err


def _subcommand_help(parser, name: str) -> str:
    action = next(a for a in parser._subparsers._group_actions)
    return action.choices[name].format_help()


def test_its_option_from_python_and_from_a_recipe(on_path, tmp_path):
    cfg = ragteam.EvalConfig.for_workflow(TARGET)(workflow=TARGET, max_turns=3, data="d", out="o")
    assert ragteam.build_workflow(TARGET, cfg.workflow_config()).max_turns == 3
    ppo = ragteam.PPOConfig.for_workflow(TARGET)(
        workflow=TARGET, recipe=str(EXAMPLE / "search-r1.yaml"), data="d", out="o"
    )
    assert ppo.max_turns == 4 and ppo.ppo.reward == "em"  # the recipe's value of the team's option
    from ragteam.precedence import sources_of

    assert sources_of(ppo)["max_turns"] == "recipe"


# ---- evaluated and trained with the tiny model -------------------------------------------------------------


def _team(hotpot_small: Path) -> dict:
    return dict(
        workflow=TARGET,
        data=str(hotpot_small),
        topk=2,
        max_turns=2,  # the team's own option
        retriever={"kind": "bm25"},
        progress=False,
    )


def test_evaluated_on_a_few_questions(on_path, hotpot_small, tmp_path):
    """docs/extend.md step 6: evaluated, and scored with the team's own reward (`--reward search_r1_format_em`)
    beside EM / F1 / cover-EM."""
    cfg = ragteam.EvalConfig.for_workflow(TARGET)(
        **_team(hotpot_small),
        limit=3,
        out=str(tmp_path / "eval"),
        policy={"model": "tiny", "device": "cpu"},
        rollout={"max_tokens": 16},
        reward="search_r1_format_em",
    )
    metrics = ragteam.evaluate(cfg, log=lambda line: None)
    assert metrics["n"] == 3 and metrics["failed"] == 0, metrics
    assert 0.0 <= metrics["metrics"]["search_r1_format_em"] <= 1.0  # the tiny model: no <answer>, so 0
    episodes = (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 3 and all(json.loads(e)["workflow"] == "search-r1" for e in episodes)


@pytest.mark.slow  # a PPO run of whole iterations
@pytest.mark.parametrize("advantage", ["gae", "grpo"])
def test_two_ppo_iterations(on_path, hotpot_small, tmp_path, advantage):
    """docs/extend.md step 7: the recipe's PPO with a critic, and GRPO on the team's own reward
    (`--ppo.reward search_r1_format_em`) keeping its rollouts (`--save-rollouts-every 1`), read back as the page
    reads them: each answer leaf's status, its path's acts, the reward it was worth."""
    tokens = 8192  # the tiny model's byte-level BPE makes long prompts
    reward = "search_r1_format_em" if advantage == "grpo" else "em"  # em: the recipe's
    cfg = ragteam.PPOConfig.for_workflow(TARGET)(
        **_team(hotpot_small),
        recipe=str(EXAMPLE / "search-r1.yaml"),
        out=str(tmp_path / "ppo"),
        policy={"model": "tiny"},
        limit=4,
        iterations=2,
        questions_per_iteration=2,
        tensorboard=False,
        save_rollouts_every=1,
        rollout={"max_tokens": 16, "group_size": 2 if advantage == "grpo" else 1},
        ppo={"advantage": advantage, "lr": 1e-4, "max_sample_tokens": tokens, "micro_tokens": tokens,
             "minibatch_tokens": 2 * tokens, **({"reward": reward} if advantage == "grpo" else {})},
    )  # fmt: skip
    if advantage == "grpo":  # the tiny model never answers right: each group scored alike, nothing to train
        from ragteam.train.ppo import NothingTrained

        with pytest.raises(NothingTrained, match="uninformative_group"):  # an error, not "saved"
            ragteam.train_ppo(cfg)
        out = tmp_path / "ppo"  # the log, curves and (initial) policy are written for inspection
    else:
        out = ragteam.train_ppo(cfg)
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
    assert set(rows[-1]["roles"]) == {"agent"} and rows[-1]["roles"]["agent"]["n"] >= 2
    assert reward in rows[-1]["reward"] and (out / "model.safetensors").is_file()
    resolved = (out / "config.yaml").read_text()
    assert "credit: outcome" in resolved and f"reward: {reward}" in resolved  # the recipe, and the flag
    from ragteam.rollout.traces import read_episodes

    for it in (1, 2):  # kept even by the run that trained nothing: what it played is there to read
        episodes = list(read_episodes(out / "rollouts" / f"iteration-{it}.jsonl"))
        assert len(episodes) == 2 * (2 if advantage == "grpo" else 1)  # questions x group size
        for ep in episodes:
            (leaf,) = ep.leaves()
            acts = [node for node in ep.path(leaf.id) if node.kind == "policy"]
            assert 1 <= len(acts) <= 3 and leaf.status in ("ok", "truncated", "failed")  # --max-turns 2
            assert leaf.status != "ok" or leaf.rewards[reward] == (
                0.0 if advantage == "grpo" else leaf.rewards["em"]
            )


# ---- the format reward (credit `search_r1_format`) ----------------------------------------------------------


def test_the_format_reward_pays_an_answer_in_the_format_and_nothing_else(on_path):
    """A chain policy -> retrieve -> policy -> answer: an `<answer>`-ended leaf earns lambda_f + (1 - lambda_f)
    x its metric on both acts; an episode that ran out of turns earns 0 whatever its metric says; the
    credit survives the package being imported a second time (registration replaces itself)."""
    from search_r1.rewards import FORMAT_SHARE

    from ragteam.credit import get_credit
    from ragteam.rollout.tree import Episode, Node
    from ragteam.types import Question

    def chain(stop: str, f1: float) -> Episode:
        ep = Episode(
            id="q", workflow="search-r1", question=Question(id="q", question="Who?", golden_answers=["A"])
        )
        ep.add(Node(id=-1, parent=None, kind="policy", role="agent"))
        ep.add(Node(id=-1, parent=0, kind="retrieve", queries=["who"]))
        ep.add(Node(id=-1, parent=1, kind="policy", role="agent"))
        ep.add(Node(id=-1, parent=2, kind="answer", answer="A", info={"stop": stop}, rewards={"f1": f1}))
        return ep

    credit = get_credit("search_r1_format")
    assert credit(chain("answer", 0.5), "f1") == pytest.approx({0: 0.6, 2: 0.6})  # 0.2 + 0.8 x 0.5
    assert credit(chain("answer", 0.0), "f1") == pytest.approx({0: FORMAT_SHARE, 2: FORMAT_SHARE})
    assert credit(chain("max_turns", 1.0), "f1") == {0: 0.0, 2: 0.0}
    _forget()
    importlib.import_module("search_r1")  # registers again: the same function, no error
    assert get_credit("search_r1_format")(chain("answer", 1.0), "f1") == pytest.approx({0: 1.0, 2: 1.0})


def test_the_format_reward_is_a_reward_too(on_path):
    """`search_r1_format_em`, the same shaping over the exact match as a registered reward: what one answer
    leaf is worth, so the `outcome` credit over it gives each act what `search_r1_format` over `em` gives."""
    importlib.import_module("search_r1")
    from ragteam import Question, get_reward
    from ragteam.credit import get_credit
    from ragteam.metrics.rewards import for_question
    from ragteam.rollout.tree import Episode, Node

    q = Question(id="q", question="Who?", golden_answers=["A"])
    for stop, em, worth in (("answer", 1.0, 1.0), ("answer", 0.0, 0.2), ("max_turns", 1.0, 0.0)):
        ep = Episode(id="q", workflow="search-r1", question=q)
        ep.add(Node(id=-1, parent=None, kind="policy", role="agent"))
        ep.add(Node(id=-1, parent=0, kind="answer", answer="A", info={"stop": stop}, rewards={"em": em}))
        reward = get_reward("search_r1_format_em")
        assert reward(ep.leaves()[0], q) == pytest.approx(worth)
        by_reward = get_credit("outcome")(ep, for_question(reward, q))
        assert (
            by_reward == pytest.approx(get_credit("search_r1_format")(ep, "em")) == {0: pytest.approx(worth)}
        )
