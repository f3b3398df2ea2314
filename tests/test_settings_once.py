"""Each paper's settings are stated once, in its workflow's package, and everything else reads them: the
profiles, the recipes (`paper:`), the rollout's `forks: c3po` and the C-3PO parser; learning-rate defaults
stand in one table."""

from __future__ import annotations

import pytest

from ragteam.config import ConfigError
from ragteam.depth import tree
from ragteam.rollout.config import RolloutConfig
from ragteam.train import ppo_config
from ragteam.train.train_config import DEFAULT_LR, TrainConfig
from ragteam.types import Action
from ragteam.workflows import profiles
from ragteam.workflows.c3po import settings as c3po
from ragteam.workflows.c3po.parsers import parse_router, write_router
from ragteam.workflows.gym import settings as gym
from ragteam.workflows.mmoa import settings as mmoa


def test_profiles_are_the_packages_rows():
    for fam, package in (("c3po", c3po), ("mmoa", mmoa), ("gym", gym)):
        # the package's rows, then the corpus row every family shares (`setting.CORPUS_SMALL`, `corpus_paper`)
        assert profiles.SMALL[fam][:-1] == package.SMALL and profiles.PAPER[fam][:-1] == package.PAPER
        assert (profiles.SMALL[fam][-1].key, profiles.PAPER[fam][-1].value) == ("corpus", "pooled")
    paper = profiles.values("paper", "c3po")
    assert (paper["topk"], paper["max_rounds"], paper["rollout"]["max_depth"]) == (10, 13, 15)
    assert paper["topk"] == c3po.TOPK and paper["rollout"]["max_depth"] == c3po.TEST_MAX_DEPTH
    assert profiles.values("paper", "standard-rag")["topk"] == c3po.TOPK  # the baselines follow C-3PO's


def test_a_team_from_outside_keeps_its_own_defaults_under_every_profile():
    assert profiles.values("paper", "my_pkg.team:Team") == {} and profiles.values("paper", "search-r1") == {}
    assert profiles.settings("paper", "direct") == profiles.PAPER["baseline"]
    assert (
        profiles.settings("paper", "gym:react")
        == profiles.settings("paper", "gym:direct")
        == profiles.PAPER["gym"]
    )


def test_presets_are_found_by_the_workflow_not_by_its_name():
    """A workflow's rows are its class's `presets` (stated in its package's options.py): a team registered
    under any name, or from outside the package, brings its own; nothing matches names as strings."""
    from ragteam.protocol import Workflow
    from ragteam.workflows import registry
    from ragteam.workflows.setting import Setting

    class Mine(Workflow):
        name = "mine"
        presets = {"paper": (Setting("topk", 7, "my paper"),)}

        def __init__(self, cfg=None):
            self.cfg = cfg

        def run(self, question):
            yield from ()

    registry._FACTORIES["gym-like-name"] = Mine  # a name that looks like a built-in family's
    try:
        assert profiles.values("paper", "gym-like-name") == {"topk": 7}
        assert profiles.values("small", "gym-like-name") == {}
    finally:
        del registry._FACTORIES["gym-like-name"]


def test_the_c3po_tree_is_the_packages():
    assert tree("c3po").fields is c3po.TREE  # registered by the package, looked up by name
    assert RolloutConfig(forks="c3po").forks == RolloutConfig(forks=c3po.TREE["forks"]).forks
    forced = [f.text for f in RolloutConfig(forks="c3po").forks[0].forced]
    assert forced == list(c3po.ROUTER_TAGS.values()) == ["[No Retrieval]", "[Retrieval]", "[Planning]"]
    assert c3po.TREE["max_depth"] == c3po.MAX_DEPTH == 13


def test_the_router_writes_and_reads_the_stated_tags():
    for kind, tag in c3po.ROUTER_TAGS.items():
        action = Action(kind, "who wrote hamlet" if kind == "retrieval" else None)
        written = write_router(action)
        assert written.startswith(tag)
        assert parse_router(written, question="q").kind == kind


def test_recipes_take_the_papers_values_from_the_package():
    c3 = ppo_config.recipe_values("c3po")
    assert c3["profile"] == "paper" and c3["rollout"]["max_depth"] == c3po.MAX_DEPTH  # training's 13
    assert c3["rollout"]["forks"] == "c3po" and "paper" not in c3
    run = ppo_config.PPOConfig(recipe="c3po-no-tree", data="d", out="o")
    assert (run.topk, run.max_rounds, run.rollout.max_depth) == (c3po.TOPK, 13, 13)  # through its base
    mmoa = ppo_config.PPOConfig(recipe="mmoa", data="d", out="o")
    assert mmoa.selector_constrained is True and mmoa.fill_from_question is False
    gym = ppo_config.PPOConfig(recipe="gym", data="d", out="o", prm={"model": "m"})
    g = gym
    assert (g.max_steps, g.topk, g.retriever.fusion, g.last_step) == (10, 32, "rrf", "same")


def test_a_recipe_naming_a_value_the_paper_does_not_state_is_an_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workflow: c3po\npaper: [topk, no_such_setting]\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: paper: .*no_such_setting.*'c3po'"):
        ppo_config.recipe_values(str(bad))
    bad.write_text("paper: [topk]\n")
    with pytest.raises(ConfigError, match="names no workflow"):
        ppo_config.recipe_values(str(bad))
    bad.write_text("workflow: c3po\npaper: topk\n")
    with pytest.raises(ConfigError, match="a list of setting names"):
        ppo_config.recipe_values(str(bad))


def test_learning_rate_defaults_stand_in_one_table():
    from ragteam.train.train_config import resolved_lr

    help_text = TrainConfig.model_fields["lr"].description
    assert "sft 2e-5 (LoRA 2e-4), dpo 1e-6 (LoRA 1e-5), prm 1e-5 (LoRA 1e-4)" in help_text
    for trainer, rates in DEFAULT_LR.items():
        assert resolved_lr(TrainConfig(data="d", out="o"), trainer) == rates["full"]
        assert resolved_lr(TrainConfig(data="d", out="o", lora=True), trainer) == rates["lora"]
    assert resolved_lr(TrainConfig(data="d", out="o", lr=3e-3), "sft") == 3e-3
