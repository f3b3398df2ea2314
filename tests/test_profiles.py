"""Profiles (`--profile small|paper`): each paper value reaches the built workflow and rollout configs, the
values set explicitly (flags, config file, recipe) win, `small` is exactly the old defaults, the docs table is
the code's, and what the fitting policy cut is counted for the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_engine import CountingModel, CountingRetriever, questions
from test_engine_select_fit import READER, SmallContext, _docs, _words

from ragteam.assemble.build import build_workflow
from ragteam.assemble.config import TeamConfig
from ragteam.collect.config import CollectConfig
from ragteam.config import ConfigError, load_config
from ragteam.eval.report import truncation_section
from ragteam.eval.run import EvalConfig
from ragteam.llm.base import ChatRequest, ChatResult, Completion
from ragteam.llm.config import ModelConfig
from ragteam.precedence import sources_of
from ragteam.protocol import Answer, AskLLM, EpisodeGenerator, Workflow
from ragteam.retrieval.config import RetrieverConfig
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.fit import fit_request
from ragteam.stats.episodes import truncation_stats, workflow_stats
from ragteam.train.ppo_config import PPOConfig
from ragteam.types import Question
from ragteam.workflows import profiles
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.registry import WORKFLOWS, workflow_options
from ragteam.workflows.registry import build_workflow as build_by_name

ROOT = Path(__file__).resolve().parents[1]
FAMILY_OF = {"c3po": "c3po", "mmoa": "mmoa", "gym": "gym:re2search", "baseline": "standard-rag"}
GROUPS = {"rollout": RolloutConfig, "retriever": RetrieverConfig, "llm": ModelConfig}


def dotted(cfg, key: str):
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def field_default(key: str, workflow: str):
    """The value a config field declares as its default (`rollout.max_depth` -> RolloutConfig's, `max_rounds`
    -> the workflow's own options class's)."""
    head, _, rest = key.partition(".")
    own = TeamConfig if head == "corpus" else workflow_options(workflow)
    cls, name = (GROUPS[head], rest) if rest else (own, head)
    return cls.model_fields[name].get_default(call_default_factory=True)


# ---------------------------------------------------------------------- each value reaches the built run


@pytest.mark.parametrize("fam", list(profiles.PAPER))
def test_paper_profile_sets_each_value_in_the_built_workflow_and_rollout(fam):
    workflow = FAMILY_OF[fam]
    cfg = EvalConfig(workflow=workflow, data="d.jsonl", out="o", profile="paper")
    built = build_workflow(cfg)  # what eval, ask, collect and train ppo build from
    for s in profiles.PAPER[fam]:
        assert dotted(cfg, s.key) == s.value, s.key
        if "." not in s.key and s.key != "corpus":  # the corpus is the run's, not a workflow option
            assert getattr(built.cfg, s.key) == s.value, s.key


def test_paper_values_that_differ_from_small_for_each_paper():
    c3po = TeamConfig(workflow="c3po", profile="paper")
    assert (c3po.topk, c3po.max_rounds) == (10, 13)
    r = c3po.rollout
    assert (r.max_depth, r.max_tokens, r.max_prompt_tokens) == (15, 2048, 4096)  # 15: where they test
    assert c3po.corpus == "pooled" and TeamConfig(workflow="c3po").corpus == "distractor"
    gym = TeamConfig(workflow="gym:react", profile="paper")
    assert (gym.topk, gym.max_steps, gym.last_step) == (32, 10, "same")
    assert (gym.retriever.kind, gym.retriever.fusion, gym.retriever.dense_weight) == ("hybrid", "rrf", 0.5)
    assert (gym.llm.backend, gym.llm.model, gym.llm.lora) == ("local", "smollm2", None)  # untuned base
    mmoa = build_workflow(TeamConfig(workflow="mmoa", profile="paper"))
    assert (mmoa.cfg.candidates, mmoa.cfg.fill_from_question) == (10, False)


def test_small_is_the_old_defaults_and_the_default_profile():
    for fam, rows in profiles.SMALL.items():
        for s in rows:
            assert s.value == field_default(s.key, FAMILY_OF[fam]), (fam, s.key)
    for name in WORKFLOWS:
        assert TeamConfig(workflow=name) == TeamConfig(workflow=name, profile="small")
        assert TeamConfig(workflow=name).profile == "small"


def test_every_profile_declares_the_same_keys_for_a_workflow():
    """Switching profiles changes values, never which settings are pinned (llm.* only under paper: the
    field defaults are already the untuned base model)."""
    for fam in profiles.PAPER:
        small = {s.key for s in profiles.SMALL[fam]}
        paper = {s.key for s in profiles.PAPER[fam]} - {"llm.backend", "llm.model"}
        assert small == paper, fam


def test_a_bare_workflow_config_gets_its_profile_from_the_registry():
    assert build_by_name("c3po", WorkflowConfig(profile="paper")).cfg.topk == 10
    assert build_by_name("gym:react", WorkflowConfig(profile="paper")).cfg.topk == 32
    assert build_by_name("gym:react", WorkflowConfig(profile="paper", topk=3)).cfg.topk == 3
    assert build_by_name("c3po", WorkflowConfig()).cfg.topk == 5


def test_an_unknown_profile_is_an_error_naming_the_choices():
    with pytest.raises(ConfigError, match="profile.*'small', 'paper'|profile.*small.*paper"):
        load_config(TeamConfig, overrides={"workflow": "c3po", "profile": "huge"})


# ---------------------------------------------------------------------- what is set explicitly wins


def test_flags_and_config_files_override_the_profile(tmp_path):
    flags = {"workflow": "c3po", "data": "d", "out": "o", "profile": "paper", "topk": 3}
    flags["rollout.max_depth"] = 7
    cfg = load_config(EvalConfig, overrides=flags)
    assert (cfg.topk, cfg.rollout.max_depth) == (3, 7)
    assert (cfg.max_rounds, cfg.rollout.max_tokens, cfg.rollout.max_prompt_tokens) == (13, 2048, 4096)
    path = tmp_path / "run.yaml"
    path.write_text(
        "profile: paper\nworkflow: gym:re2search\nrollout:\n  max_tokens: 512\nlast_step: answer\n"
    )
    cfg = load_config(EvalConfig, path, {"data": "d", "out": "o", "retriever.fusion": "convex"})
    assert (cfg.rollout.max_tokens, cfg.last_step, cfg.retriever.fusion) == (512, "answer", "convex")
    assert (cfg.topk, cfg.retriever.dense_weight) == (32, 0.5)  # the rest is the profile's


def test_profile_values_are_named_as_the_profiles():
    cfg = TeamConfig(workflow="c3po", profile="paper", rollout={"temperature": 1.0})
    sources = sources_of(cfg)
    assert (sources["workflow"], sources["profile"], sources["rollout.temperature"]) == ("code",) * 3
    assert (sources["topk"], sources["rollout.max_depth"], sources["corpus"]) == ("profile",) * 3
    assert sources["rollout.seed"] == "default"


def test_a_recipe_wins_over_the_profile_which_fills_the_rest():
    cfg = PPOConfig(recipe="gym", data="d", out="o", profile="paper", prm={"model": "prm"})
    assert cfg.workflow == "gym:re2search" and cfg.rollout.temperature == 1.0  # the recipe's
    assert (cfg.topk, cfg.last_step, cfg.rollout.max_tokens) == (32, "same", 2048)  # the profile's
    flag = PPOConfig(recipe="c3po", data="d", out="o", profile="paper", max_rounds=4)
    assert (flag.max_rounds, flag.rollout.max_prompt_tokens) == (4, 4096)
    small = PPOConfig(recipe="c3po", data="d", out="o")
    assert (small.topk, small.rollout.max_depth) == (10, 13)  # `small` does not undo the recipe


def test_collect_keeps_its_own_sampling_and_candidates_under_a_profile():
    cfg = CollectConfig(what="process", workflow="gym:react", data="d", out="o", profile="paper")
    assert cfg.rollout.temperature == 1.0 and cfg.n_candidates == 4  # collect's own defaults
    assert cfg.run_config().topk == 32 and cfg.run_config().rollout.max_tokens == 2048
    mmoa = CollectConfig(what="sft", workflow="mmoa", data="d", out="o", profile="paper")
    assert mmoa.candidates is None and mmoa.workflow_config().candidates == 10
    assert mmoa.run_config().fill_from_question is False


# ---------------------------------------------------------------------- the docs list each value


def test_the_docs_table_is_the_code_table():
    text = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    assert profiles.markdown_table() in text, "regenerate the table: profiles.markdown_table()"
    for fam, rows in profiles.PAPER.items():
        for s in rows:
            assert s.source.strip(), (fam, s.key)


# ---------------------------------------------------------------------- prompts capped, cuts counted


def test_a_prompt_cap_drops_documents_without_shortening_the_reply():
    act = READER.act(question="q", docs=_docs(5))  # 1 + 5 * 41 words
    fitted, max_tokens, record = fit_request(act, 10, 10_000, _words, max_prompt=130)
    assert [d.id for d in fitted.fields["docs"]] == ["d0", "d1", "d2"] and max_tokens == 10
    assert record["max_prompt"] == 130 and record["prompt_tokens_after"] <= 130
    ask = AskLLM("answer", [{"role": "user", "content": " ".join(["w"] * 500)}])
    cut, max_tokens, record = fit_request(ask, 50, 10_000, _words, max_prompt=300)
    assert record["text_cut"] and _words(cut.messages) <= 300 and max_tokens == 50


class Reads(Workflow):
    name = "reads"

    def run(self, question: Question) -> EpisodeGenerator:
        acted = yield READER.act(question=question.question, docs=_docs(6))
        return Answer(str(len(acted.act.fields["docs"])))


class Rambles(SmallContext):
    """Every reply reaches its max tokens (finish_reason `length`)."""

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        return [[Completion("...", finish_reason="length", completion_tokens=3)] for _ in requests]


def test_the_engine_caps_policy_prompts_and_the_stats_count_the_cuts():
    cfg = RolloutConfig(max_tokens=20, max_prompt_tokens=130)
    (ep,) = Engine(SmallContext(10_000), None, None, cfg).run(Reads(), questions("q")).episodes
    (node,) = ep.policy_nodes()
    assert ep.answer == "3" and node.fit["docs_dropped"] == 3 and node.sampling["max_tokens"] == 20
    (cut,) = Engine(Rambles(10_000), None, None, cfg).run(Reads(), questions("q")).episodes
    stats = truncation_stats([ep, cut])
    assert stats["by_role"]["policy"]["reader"] == {
        "calls": 2,
        "prompt_cut": 2,
        "reply_cut": 1,
        "reply_cut_invalid": 0,  # READER's parser accepts anything
    }
    assert stats["totals"]["policy"] == {"calls": 2, "prompt_cut": 2, "reply_cut": 1}
    assert workflow_stats([ep])["truncation"]["totals"]["policy"]["prompt_cut"] == 1  # in metrics.json
    section = "\n".join(truncation_section(stats))
    assert "## Cut to fit" in section and "| policy | reader | 2 | 2 | 1 | 0 |" in section
    assert truncation_section(truncation_stats([])) == []  # nothing cut: no section


# ---------------------------------------------------------------------- no silent cuts under `paper`


class Replies(CountingModel):
    """A counting model that always replies `text` (and records each request's sampling)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self.requests += list(requests)
        return [[Completion(self.text, completion_tokens=3, prompt_tokens=5)] for _ in requests]


def budgets(workflow: str, profile: str, policy_text: str, **settings) -> tuple[dict, dict]:
    """{role: max_tokens} of every policy act and LLM call of one episode of `workflow` under `profile`."""
    cfg = TeamConfig(workflow=workflow, profile=profile, **settings)
    policy, llm = Replies(policy_text), Replies("Paris")
    engine = Engine(policy, llm, CountingRetriever(), cfg.rollout)
    (ep,) = engine.run(build_workflow(cfg), questions("Which city is the capital of France?")).episodes
    assert ep.status == "ok"
    acts = {n.role: n.sampling["max_tokens"] for n in ep.policy_nodes()}
    calls = {n.role: n.sampling["max_tokens"] for n in ep.nodes if n.kind == "llm"}
    return acts, calls


def test_paper_gives_c3po_acts_and_llm_calls_table_7s_2048_tokens():
    # "[Planning]" from every act: the router plans, the decider's invalid reply searches the question,
    # the filter keeps every document, the next decider hands over to the LLM (the fallbacks)
    acts, calls = budgets("c3po", "paper", "[Planning]")
    assert set(acts) == {"router", "decider", "filter"} and set(calls) == {"roadmap", "answer"}
    assert set(acts.values()) == {2048} and set(calls.values()) == {2048}
    acts, calls = budgets("c3po", "small", "[Planning]")  # the old budgets, unchanged
    assert acts == {"router": 64, "decider": 256, "filter": 256} and calls == {"roadmap": 128, "answer": 128}
    acts, _ = budgets("c3po", "paper", "[Planning]", role_caps=True)  # a flag still wins
    assert acts["router"] == 64


def test_paper_gives_rag_gym_summaries_and_the_direct_answer_2048_tokens():
    _, calls = budgets("gym:search-o1", "paper", "Search[capital of France]", max_steps=2)
    assert calls == {"summary": 2048}
    _, calls = budgets("gym:search-o1", "small", "Search[capital of France]", max_steps=2)
    assert calls == {"summary": 128}
    assert budgets("gym:direct", "paper", "Finish[Paris]")[0] == {"actor": 2048}
    assert budgets("gym:direct", "small", "Finish[Paris]")[0] == {"actor": 64}
    _, calls = budgets("standard-rag", "paper", "")
    assert calls == {"answer": 2048}  # the baselines answer under the same budget as c3po's LLM


def test_the_c3po_recipe_runs_the_papers_2048_budgets_unless_a_flag_says_small():
    cfg = PPOConfig(recipe="c3po", data="d", out="o")  # the recipe alone: its paper's profile
    r = cfg.rollout
    assert cfg.profile == "paper" and (r.max_tokens, r.llm_max_tokens, cfg.role_caps) == (2048, 2048, False)
    assert cfg.ppo.value_loss == "mse" and cfg.ppo.max_sample_tokens is None  # derived when the run builds
    small = PPOConfig(recipe="c3po", data="d", out="o", profile="small")
    assert (small.rollout.max_tokens, small.rollout.llm_max_tokens, small.role_caps) == (256, 128, True)


def test_paper_names_the_retriever_it_substitutes_and_how_to_point_at_the_papers():
    for fam, encoder in (("c3po", "contriever-msmarco"), ("mmoa", "Contriever"), ("gym", "BGE-Base")):
        (row,) = [s for s in profiles.PAPER[fam] if s.key == "retriever.dense_model"]
        assert row.value is None and encoder in row.source and "all-MiniLM-L6-v2" in row.source
        assert "--retriever.dense-model DIR" in row.source
    c3po = {s.key: s.source for s in profiles.PAPER["c3po"]}["retriever.dense_model"]
    assert "--retriever.pooling mean --no-retriever.normalize" in c3po
    gym = {s.key: s.source for s in profiles.PAPER["gym"]}["retriever.dense_model"]
    assert "Represent this sentence for searching relevant passages: " in gym
