"""The one settings resolver (`ragteam.config.resolve`, `ragteam.precedence`): defaults < profile < recipe <
config file < flags, merged as mappings and validated once, each value's source recorded in config.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from ragteam.cli.main import _add_command_flags, _strip, build_parser
from ragteam.config import config_from_args, save_resolved
from ragteam.precedence import merge_layers, sources_of


def _resolved(argv: list[str]):
    """A command line resolved as `ragteam` resolves it, without running the command."""
    import importlib

    from ragteam.cli.main import _command_from_argv, command_config

    module_name = _command_from_argv(argv)
    module = importlib.import_module(f"ragteam.cli.{module_name}")
    cls = command_config(module.Config, argv)  # with the options of the workflow it runs, as `main` builds it
    parser = build_parser()
    _add_command_flags(parser, module_name, module, cls)
    return config_from_args(cls, _strip(parser.parse_args(argv)))


def test_the_ppo_learning_rate_goes_from_the_flag_to_the_optimizer_through_four_files() -> None:
    """The chain `--ppo.lr` crosses, one file each: cli/main.py (the flag, `config_from_args`) ->
    config.py (`resolve`: defaults < profile < recipe < file < flags, one validation) ->
    train/ppo_config.py (`PPOOptions.lr`, the recipe's layer) -> train/ppo/learner.py (the optimizer's
    param group takes `cfg.ppo.lr`). The recipe (mmoa: 2e-5) sits under the flag."""
    cfg = _resolved(["train", "ppo", "--recipe", "mmoa", "--ppo.lr", "3e-6", "--data", "d", "--out", "o"])
    assert cfg.ppo.lr == 3e-6
    sources = sources_of(cfg)
    assert sources["ppo.lr"] == "flag"
    assert sources["ppo.clip"] == "recipe"  # the recipe's other values stay
    # ... and the fourth file: the learner's optimizer takes it (the tiny policy, no value model)
    import torch
    from transformers import AutoModelForCausalLM

    from ragteam.llm.tiny import tiny_model_dir
    from ragteam.train.actor_critic import ActorCritic
    from ragteam.train.ppo.learner import Learner

    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    ac = ActorCritic.from_policy(policy, value_model=False)
    learner = Learner.create(ac, None, None, cfg.ppo, torch.device("cpu"), iterations=2, fused=False)
    assert learner.optimizer.param_groups[0]["lr"] == 3e-6


def test_each_layer_wins_over_the_one_below_and_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("topk: 7\nrollout:\n  max_tokens: 50\n", encoding="utf-8")
    argv = ["train", "ppo", "--recipe", "c3po", "--config", str(path), "--max-rounds", "4"]
    cfg = _resolved([*argv, "--data", "d", "--out", "o"])
    sources = sources_of(cfg)
    assert (cfg.max_rounds, sources["max_rounds"]) == (4, "flag")
    assert (cfg.topk, sources["topk"]) == (7, "file")
    assert (cfg.rollout.max_tokens, sources["rollout.max_tokens"]) == (50, "file")
    assert sources["ppo.credit"] == "recipe"
    assert (cfg.rollout.max_prompt_tokens, sources["rollout.max_prompt_tokens"]) == (4096, "profile")
    assert sources["iterations"] == "default"


def test_a_profile_follows_the_workflow_and_yields_to_a_flag() -> None:
    paper = _resolved(
        ["eval", "--workflow", "gym:react", "--profile", "paper", "--topk", "3", "--data", "d", "--out", "o"]
    )
    sources = sources_of(paper)
    assert (paper.topk, sources["topk"]) == (3, "flag")
    assert (paper.last_step, sources["last_step"]) == ("same", "profile")
    small = _resolved(["eval", "--workflow", "gym:react", "--data", "d", "--out", "o"])
    assert sources_of(small)["last_step"] == "profile"  # `small` states the defaults, as a layer too
    assert small.last_step == "answer"


def test_a_config_built_in_python_resolves_like_the_command_line() -> None:
    from ragteam.eval.run import EvalConfig
    from ragteam.train.ppo_config import PPOConfig

    cfg = EvalConfig(workflow="mmoa", profile="paper", data="d", out="o", topk=4)
    assert cfg.selector_constrained is True and cfg.topk == 4
    assert sources_of(cfg)["topk"] == "code" and sources_of(cfg)["selector_constrained"] == "profile"
    ppo = PPOConfig(recipe="mmoa", data="d", out="o")  # the recipe is applied when the config is built
    assert ppo.ppo.lr == 2e-5 and sources_of(ppo)["ppo.lr"] == "recipe"


def test_an_sft_preset_is_a_layer_under_the_flags() -> None:
    cfg = _resolved(["train", "sft", "--preset", "c3po", "--epochs", "1", "--data", "d", "--out", "o"])
    sources = sources_of(cfg)
    assert (cfg.epochs, sources["epochs"]) == (1.0, "flag")
    assert (cfg.lr, sources["lr"]) == (4e-5, "preset")


def test_config_yaml_records_each_value_with_its_source(tmp_path: Path) -> None:
    cfg = _resolved(["train", "ppo", "--recipe", "mmoa", "--ppo.lr", "3e-6", "--data", "d", "--out", "o"])
    doc = yaml.safe_load(save_resolved(cfg, tmp_path, "train ppo").read_text(encoding="utf-8"))
    assert doc["config"]["ppo"]["lr"] == 3e-6  # `config` stays what --resume and the eval check read
    assert doc["sources"]["ppo.lr"] == "flag"
    assert doc["sources"]["ppo.gamma"] == "recipe"
    assert doc["sources"]["selector_constrained"] == "profile"
    assert doc["sources"]["seed"] == "default"
    assert set(doc["sources"].values()) <= {"default", "profile", "recipe", "file", "flag"}


def test_merging_replaces_a_value_and_merges_a_group() -> None:
    merged, sources = merge_layers(
        [
            ("profile", {"rollout": {"max_depth": 13, "max_tokens": 2048}}),
            ("flag", {"rollout": {"max_tokens": 9}}),
        ]
    )
    assert merged == {"rollout": {"max_depth": 13, "max_tokens": 9}}
    assert sources == {"rollout.max_depth": "profile", "rollout.max_tokens": "flag"}
    merged, sources = merge_layers([("profile", {"rollout": {"max_depth": 13}}), ("code", {"rollout": 5})])
    assert merged == {"rollout": 5} and sources == {"rollout": "code"}
