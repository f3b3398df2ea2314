"""The PPO sample length limit follows from the rollout's own limits (issue 29 item 5): an act the rollout
could make is never left out of training for its length by default; an explicit limit still wins and the
acts over it are counted by reason."""

from __future__ import annotations

import pytest

from ragteam.llm.tiny import CONTEXT, tiny_model_dir
from ragteam.train.ppo.run import model_context, with_sample_limit
from ragteam.train.ppo_config import PPOConfig, sample_token_limit


def test_the_limit_is_the_prompt_limit_plus_the_act_limit_within_the_context():
    paper = PPOConfig(recipe="c3po", data="d", out="o")  # 4096-token prompts, 2048-token acts
    assert sample_token_limit(paper, 8192) == 4096 + 2048  # what the c3po recipe's fixed 4096 cut short
    assert sample_token_limit(paper, 4096) == 4096  # never past what the model holds
    assert sample_token_limit(paper, None) == 6144
    small = PPOConfig(workflow="mmoa", data="d", out="o")  # prompts bounded by the context only
    assert sample_token_limit(small, 8192) == 8192
    with pytest.raises(ValueError, match="context length is unknown"):
        sample_token_limit(small, None)
    mine = PPOConfig(workflow="mmoa", data="d", out="o", ppo={"max_sample_tokens": 1024})
    assert sample_token_limit(mine, 8192) == 1024  # a flag wins


def test_the_run_resolves_it_from_the_policys_own_config():
    folder = tiny_model_dir()
    assert model_context(folder) == CONTEXT
    cfg = with_sample_limit(PPOConfig(workflow="mmoa", data="d", out="o"), folder)
    assert cfg.ppo.max_sample_tokens == CONTEXT  # what config.yaml then records
    assert model_context(folder.parent / "no-such-model") is None


def test_config_yaml_shows_every_value_a_recipe_resolved(tmp_path):
    """`train ppo --recipe c3po` alone: the saved config holds the paper profile's values, the recipe's own,
    the corpus and the derived sample limit, so the run says what it ran."""
    import yaml

    from ragteam.config import save_resolved

    cfg = with_sample_limit(PPOConfig(recipe="c3po", data="d", out="o"), tiny_model_dir())
    saved = yaml.safe_load(save_resolved(cfg, tmp_path, "train ppo").read_text())["config"]
    assert (saved["profile"], saved["corpus"], saved["topk"], saved["role_caps"]) == (
        "paper",
        "pooled",
        10,
        False,
    )
    r = saved["rollout"]
    assert (r["max_tokens"], r["llm_max_tokens"], r["max_prompt_tokens"], r["max_depth"]) == (
        2048,
        2048,
        4096,
        13,
    )
    assert saved["ppo"]["max_sample_tokens"] == min(4096 + 2048, CONTEXT)
    flag = PPOConfig(recipe="c3po", data="d", out="o", topk=3, corpus="distractor")
    assert (flag.topk, flag.corpus, flag.rollout.max_tokens) == (
        3,
        "distractor",
        2048,
    )  # flags win, one by one
