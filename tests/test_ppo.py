"""Multi-agent PPO (`ragteam train ppo`): packing, the scored log-probs, one update, recipes, kill and resume.

Every test runs the real pieces: the tiny model playing MMOA-RAG's roles over BM25 on HotpotQA paragraphs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ragteam.credit import get_credit
from ragteam.data.questions import read_questions
from ragteam.metrics.rewards import get_reward
from ragteam.rollout.tree import Episode
from ragteam.train.experience import Sample, micro_batches, minibatches, pack_samples, samples_from_episodes
from ragteam.train.ppo_config import RECIPES, PPOConfig

TOKENS = 8192  # the tiny model's byte-level BPE makes long prompts: room for two samples per row


def tiny_cfg(data: Path, out: Path, **over) -> PPOConfig:
    values = dict(
        recipe="mmoa",
        data=str(data),
        out=str(out),
        policy={"model": "tiny"},
        limit=12,
        iterations=2,
        questions_per_iteration=3,
        variant="s-g",
        topk=2,
        candidates=2,
        retriever={"kind": "bm25"},
        progress=False,
        tensorboard=False,
        ppo={"max_sample_tokens": TOKENS, "micro_tokens": TOKENS, "minibatch_tokens": 2 * TOKENS},
    )
    values.update(over)
    if values["recipe"] != "mmoa":  # MMOA-RAG's own options: another recipe's workflow has none
        values = {k: v for k, v in values.items() if k not in ("variant", "candidates")}
    return PPOConfig.model_validate(values)


def fake_sample(prompt: int, completion: int, i: int = 0) -> Sample:
    return Sample("e", i, "r", list(range(1, prompt + 1)), list(range(100, 100 + completion)), reward=1.0)


# ---- packing -------------------------------------------------------------------------------------------


def test_pack_points_every_completion_token_at_the_position_that_predicts_it() -> None:
    samples = [fake_sample(5, 3, 0), fake_sample(4, 2, 1), fake_sample(7, 4, 2)]
    batch = pack_samples(samples, max_tokens=16)
    assert batch.input_ids.shape[0] == 2  # 8 + 6 fit one row, 11 starts another
    assert batch.mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    for b, s in enumerate(samples):
        for t, token in enumerate(s.completion_ids):
            r, c = batch.rows[b, t], batch.cols[b, t]
            assert batch.input_ids[r, c + 1] == token  # the logit at c predicts the token at c + 1
            assert batch.position_ids[r, c + 1] == len(s.prompt_ids) + t  # positions restart per sample
    with pytest.raises(ValueError, match="more than 10"):
        pack_samples([fake_sample(8, 3)], max_tokens=10)


def test_minibatches_respect_the_token_budget_and_the_seed() -> None:
    samples = [fake_sample(10, 5, i) for i in range(7)]
    split = minibatches(samples, 45, generator=torch.Generator().manual_seed(3))
    assert sorted(i for mb in split for i in mb) == list(range(7))
    assert all(sum(samples[i].length for i in mb) <= 45 for mb in split)
    again = minibatches(samples, 45, generator=torch.Generator().manual_seed(3))
    assert split == again


# ---- recipes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RECIPES)
def test_every_packaged_recipe_is_a_valid_config(name: str, tmp_path: Path) -> None:
    prm = {"model": "prm"} if name == "gym" else {}  # RAG-Gym's PPO needs its process reward model
    cfg = PPOConfig(recipe=name, data="q.jsonl", out=str(tmp_path), prm=prm)
    assert cfg.rollout.temperature == 1.0
    get_credit(cfg.ppo.credit)


def test_flags_override_the_recipe_and_a_recipe_inherits_its_base(tmp_path: Path) -> None:
    mmoa = PPOConfig.model_validate({"recipe": "mmoa", "data": "q", "out": "o", "ppo": {"lr": 3e-6}})
    assert mmoa.ppo.lr == 3e-6  # the flag
    assert (mmoa.ppo.kl_beta, mmoa.ppo.kl_anneal_to, mmoa.ppo.vf_coef) == (0.2, 0.06, 0.1)  # Table 2
    assert mmoa.ppo.credit == "mmoa" and mmoa.workflow == "mmoa"
    tree = PPOConfig(recipe="c3po", data="q", out="o")
    flat = PPOConfig(recipe="c3po-no-tree", data="q", out="o")
    assert tree.rollout.forks and not flat.rollout.forks
    assert (flat.ppo.lr, flat.ppo.value_lr, flat.topk) == (tree.ppo.lr, tree.ppo.value_lr, tree.topk)
    assert (tree.ppo.credit, flat.ppo.credit) == ("tree_mc", "outcome")
    # built in Python, a recipe's error surfaces through pydantic's validation (a ValueError)
    with pytest.raises(ValueError, match="not a packaged recipe"):
        PPOConfig(recipe="nope", data="q", out="o")
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"recipe: {loop}\n")
    with pytest.raises(ValueError, match="includes itself"):
        PPOConfig(recipe=str(loop), data="q", out="o")


# ---- the model side ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(hotpot_small: Path, tmp_path_factory):
    """A built run (tiny policy + critic + reference, MMOA-RAG over BM25) and one rollout's samples."""
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    cfg = tiny_cfg(hotpot_small, tmp_path_factory.mktemp("ppo") / "out")
    run = ppo.build(cfg)
    episodes = phases.play(run, 0)
    samples, skipped = phases.credit_samples(run, episodes)
    return run, episodes, samples, skipped


def test_packed_scoring_equals_the_rollout_log_probs(tiny_run) -> None:
    """Log-probs of packed samples (several per row) equal what the rollout recorded for each act."""
    from ragteam.train.actor_critic import completion_logprobs

    run, _, samples, skipped = tiny_run
    assert len(samples) == 6 and not skipped  # 3 questions x (selector, generator)
    batch = pack_samples(samples, TOKENS)
    assert batch.input_ids.shape[0] < len(samples)  # really packed
    with torch.no_grad():
        logp, _, _ = completion_logprobs(run.learner.ac.policy, batch)
    for b, s in enumerate(samples):
        n = len(s.completion_ids)
        assert torch.allclose(logp[b, :n], torch.tensor(s.rollout_logprobs), atol=1e-4)
        assert torch.all(logp[b, n:] == 0)


def test_credit_follows_the_recipe(tiny_run) -> None:
    """MMOA credit: every act gets the shared F1 plus its own penalty (a malformed selector act: -1)."""
    _, episodes, samples, _ = tiny_run
    by_node = {(s.episode, s.node): s for s in samples}
    for ep in episodes:
        f1 = ep.leaves()[0].rewards["f1"]
        for node in ep.policy_nodes():
            assert by_node[(ep.id, node.id)].reward == pytest.approx(f1 + node.action.penalty)
    again, _ = samples_from_episodes(episodes, get_credit("outcome"), get_reward("f1"))
    assert [s.reward for s in again] == [ep.leaves()[0].rewards["f1"] for ep in episodes for _ in (0, 1)]


def test_first_advantages_start_from_the_reference(tiny_run) -> None:

    run, _, samples, _ = tiny_run
    exp = run.learner.score(samples)
    assert torch.allclose(exp.old_logp, exp.ref_logp, atol=1e-5)  # same weights before any update
    assert torch.count_nonzero(exp.old_values) == 0  # the value head starts at zero
    assert abs(float(exp.advantages[exp.mask].mean())) < 1e-4  # whitened


@pytest.mark.slow  # a PPO run of whole iterations
def test_an_update_lowers_the_ppo_loss_on_its_own_batch(tiny_run) -> None:
    from ragteam.train.losses import policy_loss, value_loss

    run, _, samples, _ = tiny_run
    exp = run.learner.score(samples)
    cfg = run.cfg.ppo

    def loss() -> float:
        batch = pack_samples(samples, TOKENS)
        t = batch.mask.shape[1]
        with torch.no_grad():
            out = run.learner.ac(batch)
            pg, _ = policy_loss(out.logp, exp.old_logp[:, :t], exp.advantages[:, :t], batch.mask, cfg.clip)
            vf, _ = value_loss(
                out.values, exp.old_values[:, :t], exp.returns[:, :t], batch.mask, cfg.value_clip
            )
        return float(pg + cfg.vf_coef * vf)

    before = loss()
    for group in run.learner.optimizer.param_groups:
        group["lr"] = 1e-3
    meters = run.learner.update(exp, 0)
    after = loss()
    assert after < before - 1e-3
    overall, roles = meters.means()
    assert set(roles) == {"selector", "generator"} and overall["grad_norm"] > 0


# ---- the command: a whole run, killed and resumed ------------------------------------------------------


def _argv(data: Path, out: Path, iterations: int) -> list[str]:
    return [
        sys.executable, "-m", "ragteam.cli.main", "train", "ppo", "--recipe", "mmoa", "--data", str(data),
        "--out", str(out), "--policy.model", "tiny", "--limit", "12", "--iterations", str(iterations),
        "--questions-per-iteration", "2", "--variant", "s-g", "--topk", "2", "--candidates", "2",
        "--retriever.kind", "bm25", "--no-progress", "--no-tensorboard", "--save-total-limit", "5",
        "--ppo.max-sample-tokens", str(TOKENS), "--ppo.micro-tokens", str(TOKENS),
        "--ppo.minibatch-tokens", str(TOKENS), "--ppo.lr", "1e-3", "--ppo.value-lr", "1e-3",
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1")


@pytest.mark.slow  # a training process killed and resumed
def test_kill_9_then_resume_loses_and_repeats_no_update(hotpot_small: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_argv(hotpot_small, whole, 3), check=True, env=_env(), capture_output=True)

    proc = subprocess.Popen(_argv(hotpot_small, killed, 3), env=_env(), stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (killed / "checkpoint-1").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoint-1").is_dir() and not (killed / "checkpoint-3").exists()
    resumed = subprocess.run(_argv(hotpot_small, killed, 3) + ["--resume"], env=_env(), capture_output=True)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]

    rows = [json.loads(x) for x in (killed / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # none lost, none repeated
    reference = [json.loads(x) for x in (whole / "log.jsonl").read_text().splitlines()]
    assert [r["train"]["policy_loss"] for r in rows] == pytest.approx(
        [r["train"]["policy_loss"] for r in reference], abs=1e-6
    )
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(killed / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert (killed / "critic" / "value_head.pt").is_file() and (killed / "curves.png").is_file()


@pytest.mark.slow  # a PPO run of whole iterations
def test_the_trained_policy_loads_back_as_a_policy(hotpot_small: Path, tmp_path: Path) -> None:
    from ragteam.llm.local import LocalChatModel
    from ragteam.train import ppo

    out = ppo.train_ppo(tiny_cfg(hotpot_small, tmp_path / "run", iterations=1, eval_data=str(hotpot_small),
                                 eval_offset=12, eval_limit=2, tensorboard=True))  # fmt: skip
    assert list((out / "runs").glob("events.out.tfevents.*"))  # per-role scalars for TensorBoard
    row = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    assert set(row["seconds"]) == set(ppo.PHASES)
    assert row["eval"]["questions"] == 2 and "selector" in row["eval"]["invalid"]["by_role"]
    held_out = [Episode.from_json(line) for line in (out / row["eval"]["trace"]).read_text().splitlines()]
    assert [ep.question.id for ep in held_out] == [
        q.id for q in read_questions(str(hotpot_small)).questions[12:14]
    ]
    assert set(row["roles"]) == {"selector", "generator"}
    assert {"reward", "kl", "clip_frac", "value_loss", "entropy", "length", "invalid"} <= set(
        row["roles"]["selector"]
    )
    model = LocalChatModel(out)
    assert model.chat  # a plain model folder
    with pytest.raises(ValueError, match="--resume"):
        ppo.train_ppo(tiny_cfg(hotpot_small, tmp_path / "run", iterations=1))


def test_judge_reward_comes_from_a_judge_server(tiny_run) -> None:
    """--ppo.reward judge: every answered leaf gets the judge's verdict over HTTP, and credit reads it."""
    from test_judge import RuleJudge

    from ragteam.llm.openai_http import OpenAIChatModel
    from ragteam.metrics.judge import LLMJudge
    from ragteam.serve.llm import make_app
    from ragteam.serve.testing import BackgroundServer
    from ragteam.train.ppo.tree_scores import judge_leaves

    run, episodes, _, _ = tiny_run
    first = episodes[0].leaves()[0]
    first.answer = f"it is {episodes[0].question.golden_answers[0]}"  # one answer the rule judge accepts
    with BackgroundServer(make_app(RuleJudge(), "judge")) as srv:
        run.judge = LLMJudge(OpenAIChatModel(srv.url, "judge", retries=0))
        try:
            judge_leaves(run, episodes)
        finally:
            run.judge = None
    verdicts = [ep.leaves()[0].rewards["judge"] for ep in episodes]
    assert verdicts[0] == 1.0 and set(verdicts) <= {0.0, 1.0}
    samples, _ = samples_from_episodes(episodes, get_credit("outcome"), get_reward("judge"))
    assert [s.reward for s in samples if s.episode == episodes[0].id] == [1.0, 1.0]
    with pytest.raises(ValueError, match="judge.base-url"):
        tiny_cfg(Path("q"), Path("o"), ppo={"reward": "judge"})


@pytest.mark.slow  # a PPO run of whole iterations
def test_a_served_policy_gets_the_trained_weights(hotpot_small: Path, tmp_path: Path, monkeypatch) -> None:
    """--policy.backend openai: rollouts come from `serve llm`, which loads the weights after each update
    (the server wants an API key: rollouts and weight pushes both send the policy's)."""
    from safetensors.torch import load_file

    from ragteam.llm.config import ModelConfig
    from ragteam.llm.local import LocalChatModel
    from ragteam.serve.llm import make_app
    from ragteam.serve.testing import BackgroundServer
    from ragteam.train import ppo

    served = LocalChatModel("tiny")
    monkeypatch.setenv("RAGTEAM_TEST_POLICY_KEY", "sesame")
    with BackgroundServer(make_app(served, "tiny", allow_weight_updates=True, api_key="sesame")) as srv:
        cfg = tiny_cfg(hotpot_small, tmp_path / "run", iterations=2)
        policy = ModelConfig(
            backend="openai", base_url=srv.url, model="tiny", api_key_env="RAGTEAM_TEST_POLICY_KEY"
        )
        cfg = cfg.model_copy(update={"policy": policy})
        cfg.ppo.lr = cfg.ppo.value_lr = 1e-3  # set explicitly: the recipe keeps its other values
        out = ppo.train_ppo(cfg)
        rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
        # the server rolled out with the weights the trainer had: its log-probs match the trainer's
        assert all(r["logprob_drift"] is not None and r["logprob_drift"] < 1e-3 for r in rows)
        pushed = load_file(str(out / "sync" / "model.safetensors"))
        served_state = served.model.state_dict()
        checkpoint = load_file(str(out / "checkpoint-1" / "model.safetensors"))
        assert all(torch.equal(pushed[k], served_state[k]) for k in pushed)  # the server holds the push
        assert all(
            torch.equal(pushed[k], checkpoint[k]) for k in pushed
        )  # = after update 1 (pushed for it 2)
        assert any(not torch.equal(pushed[k], load_file(str(out / "model.safetensors"))[k]) for k in pushed)


def test_load_weights_refuses_a_folder_that_does_not_fit(tmp_path: Path) -> None:
    import httpx
    from safetensors.torch import save_file

    from ragteam.llm.local import LocalChatModel
    from ragteam.serve.llm import make_app
    from ragteam.serve.testing import BackgroundServer

    save_file({"not.a.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with BackgroundServer(make_app(LocalChatModel("tiny"), "tiny", allow_weight_updates=True)) as srv:
        r = httpx.post(srv.url.rstrip("/") + "/v1/load_weights", json={"path": str(tmp_path)})
        assert r.status_code == 400 and "not.a.weight" in r.text
        r = httpx.post(srv.url.rstrip("/") + "/v1/load_weights", json={"path": str(tmp_path / "none")})
        assert r.status_code == 400 and "no *.safetensors" in r.text
        # one push per weight version: an evaluation's push is not repeated by the next rollout
        from ragteam.train.sync import PushToServer

        sync = PushToServer.for_base_url(srv.url, tmp_path / "sync")
        policy = LocalChatModel("tiny").model
        sync.push(policy, 1)
        sync.push(policy, 1)
        sync.push(policy, 2)
        assert sync.pushes == 2 and sync.pushed == 2
    with BackgroundServer(
        make_app(LocalChatModel("tiny"), "tiny", allow_weight_updates=True, api_key="k")
    ) as srv:
        with pytest.raises(RuntimeError, match="401"):  # a keyed server refuses a push without its key
            PushToServer.for_base_url(srv.url, tmp_path / "sync2").push(policy, 1)
        PushToServer.for_base_url(srv.url, tmp_path / "sync3", api_key="k").push(policy, 1)
    with BackgroundServer(make_app(LocalChatModel("tiny"), "tiny")) as srv:  # off by default
        assert httpx.post(srv.url.rstrip("/") + "/v1/load_weights", json={"path": "x"}).status_code == 404


def test_micro_batches_group_similar_lengths_and_rows_are_no_wider_than_the_longest() -> None:
    samples = [fake_sample(p, 4, i) for i, p in enumerate([30, 5, 28, 6, 29, 7])]
    split = micro_batches(samples, range(6), 70)
    assert split == [[0, 4], [2, 5, 3, 1]]  # longest first, about 70 tokens each
    batch = pack_samples([samples[i] for i in split[1]])  # widths 32, 11, 10, 9 -> rows of 32
    assert batch.input_ids.shape == (2, 32)  # the three short ones share the second row


def test_c3po_recipe_trains_on_its_tree_with_monte_carlo_credit(hotpot_small: Path, tmp_path: Path) -> None:
    """The c3po recipe: the router's three forced strategies fork the tree; each act's reward is the mean of
    the leaves below it (tree_mc); every role's acts are trained in one update."""
    from ragteam.credit import leaf_reward, leaves_below
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    cfg = tiny_cfg(
            hotpot_small, tmp_path / "run", recipe="c3po", iterations=1, questions_per_iteration=1,
            topk=1, max_rounds=1, llm={"model": "tiny"},
            rollout={"max_tokens": 12, "llm_max_tokens": 8, "forks": "c3po", "temperature": 1.0},
        )  # fmt: skip
    assert (cfg.ppo.credit, cfg.ppo.lr, cfg.ppo.kl_beta) == ("tree_mc", 5e-7, 0.005)  # Table 7
    run = ppo.build(cfg)
    (episode,) = phases.play(run, 0)
    routers = [n for n in episode.policy_nodes() if n.role == "router"]
    assert sorted(n.action.kind for n in routers) == ["no_retrieval", "planning", "retrieval"]
    samples, _ = phases.credit_samples(run, [episode])
    below = leaves_below(episode)
    for s in samples:
        leaves = below[s.node]
        assert s.reward == pytest.approx(
            sum(leaf_reward(lf, lambda leaf: get_reward("cover_em")(leaf, None)) for lf in leaves)
            / len(leaves)
        )
    meters = run.learner.update(run.learner.score(samples), 0)
    assert {"router", "filter", "decider"} <= set(meters.means()[1])


# ---- LoRA --------------------------------------------------------------------------------------------------


def _adapter(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter" / "adapter_model.safetensors"))


@pytest.mark.slow  # a PPO run of whole iterations
def test_lora_ppo_trains_an_adapter_against_its_own_base_and_resumes(
    hotpot_small: Path, tmp_path: Path
) -> None:
    """--ppo.lora: the reference is the model with its adapter off (KL exactly 0 before the first update,
    the adapter's B starting at zero); the output loads as a merged model and as base + adapter alike;
    checkpoints hold the adapter alone; resumed from its first checkpoint, the run ends where it ended."""
    from ragteam.llm.local import LocalChatModel
    from ragteam.train import ppo
    from ragteam.train.run_folder import resolve_init

    # the entropy bonus moves the adapter whatever the tiny model's rewards (often all 0) say
    lora = {"lora": True, "lora_r": 4, "lora_alpha": 8, "lr": 1e-3, "value_lr": 1e-3, "ent_coef": 0.1}
    opts = dict(tiny_cfg(hotpot_small, tmp_path / "x").ppo.model_dump(), **lora)
    straight = ppo.train_ppo(tiny_cfg(hotpot_small, tmp_path / "straight", ppo=opts))
    rows = [json.loads(x) for x in (straight / "log.jsonl").read_text().splitlines()]
    assert rows[0]["kl_mean"] == pytest.approx(0.0, abs=1e-7) and rows[1]["kl_mean"] != 0.0
    assert (straight / "adapter" / "adapter_config.json").is_file() and (
        straight / "model.safetensors"
    ).is_file()
    ckpt = straight / "checkpoint-2"
    assert (ckpt / "adapter" / "adapter_config.json").is_file() and not (ckpt / "model.safetensors").exists()

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[1, 5, 9, 14, 3, 7, 2]])
    with torch.no_grad():
        merged = AutoModelForCausalLM.from_pretrained(straight)(ids).logits
        base = AutoModelForCausalLM.from_pretrained(resolve_init("tiny"))
        untouched = base(ids).logits
        adapted = PeftModel.from_pretrained(base, str(straight / "adapter"))(ids).logits
    assert torch.allclose(merged, adapted, atol=1e-4) and not torch.allclose(merged, untouched, atol=1e-4)
    assert (
        LocalChatModel(straight).chat and LocalChatModel(resolve_init("tiny"), lora=straight / "adapter").chat
    )

    split = tmp_path / "split"  # the run as a kill after checkpoint 1 leaves it
    split.mkdir()
    shutil.copytree(straight / "checkpoint-1", split / "checkpoint-1")
    shutil.copy(straight / "config.yaml", split / "config.yaml")
    (split / "log.jsonl").write_text((straight / "log.jsonl").read_text().splitlines()[0] + "\n")
    ppo.train_ppo(tiny_cfg(hotpot_small, split, ppo=opts, resume=True))
    x, y = _adapter(straight), _adapter(split)
    assert x.keys() == y.keys() and all(torch.allclose(x[k], y[k], atol=1e-6) for k in x)


def test_vllm_lora_sync_needs_a_lora_policy_and_renames_the_rollout_model(
    hotpot_small: Path, tmp_path
) -> None:
    from types import SimpleNamespace

    from ragteam.train.ppo.run import weight_sync
    from ragteam.train.sync import PushLoRAToVLLM

    served = {"backend": "openai", "model": "tiny", "base_url": "http://127.0.0.1:9/v1"}
    sync = {"weight_sync": "vllm-lora", "served_name": "policy"}  # the start is tiny, served as "policy"
    engine = SimpleNamespace(policy=SimpleNamespace(model="policy"))
    cfg = tiny_cfg(hotpot_small, tmp_path, policy=served, ppo=sync)
    with pytest.raises(ValueError, match="--ppo.lora"):
        weight_sync(cfg, engine)
    cfg = tiny_cfg(hotpot_small, tmp_path, policy=served, ppo={**sync, "lora": True})
    sync = weight_sync(cfg, engine)
    assert isinstance(sync, PushLoRAToVLLM) and sync.base == "http://127.0.0.1:9/v1"
    assert sync.name == "policy" and cfg.served_policy().model == "policy" and cfg.policy.model == "tiny"
    sync.on_loaded("policy-v3")
    assert engine.policy.model == "policy-v3"


def test_a_full_weight_push_of_a_lora_policy_sends_the_merged_model() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from ragteam.llm.tiny import tiny_model_dir
    from ragteam.train.actor_critic import full_model

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir())
    assert full_model(model) is model
    plain = {k: v.clone() for k, v in model.state_dict().items()}
    peft = get_peft_model(
        model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], task_type="CAUSAL_LM")
    )
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    merged = full_model(peft).state_dict()
    assert merged.keys() == plain.keys()  # the base model's own names: a server can load it
    changed = {k for k in merged if not torch.equal(merged[k], plain[k])}
    assert changed and all("q_proj" in k for k in changed)
    assert any("lora_B" in k for k in peft.state_dict())  # the trained policy keeps its adapter


# ---- estimators, groups, roles, guards -------------------------------------------------------------------


def test_ppo_refuses_settings_that_cannot_learn(hotpot_small: Path, tmp_path: Path) -> None:
    from ragteam.train.ppo.run import check

    greedy = tiny_cfg(hotpot_small, tmp_path, rollout={"temperature": 0.0})
    with pytest.raises(ValueError, match="temperature 0"):
        check(greedy)
    lonely = tiny_cfg(hotpot_small, tmp_path, ppo={"advantage": "grpo"})
    with pytest.raises(ValueError, match="group-size"):
        check(lonely)
    stranger = tiny_cfg(hotpot_small, tmp_path, ppo={"train_roles": "selector,router"})
    with pytest.raises(ValueError, match="router not a role of mmoa"):
        check(stranger)
    assert stranger.ppo.train_roles == ["selector", "router"]  # one flag value, comma-separated


def test_a_group_estimator_trains_without_a_critic_on_groups_of_episodes(
    hotpot_small: Path, tmp_path: Path
) -> None:
    """grpo with --rollout.group-size 3: three episodes per question, each its own sampled act; no value
    head, no critic folder; the excluded role (--ppo.train-roles generator) acts but is not trained."""
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    cfg = tiny_cfg(
            hotpot_small,
            tmp_path / "out",
            questions_per_iteration=2,
            iterations=1,
            rollout={"group_size": 3},
            ppo={**tiny_cfg(hotpot_small, tmp_path).ppo.model_dump(), "advantage": "grpo",
                 "train_roles": ["generator"], "normalize": "none", "skip_uninformative": False},
        )  # fmt: skip
    run = ppo.start(cfg)
    assert not run.learner.ac.has_critic and len(run.learner.optimizer.param_groups) == 1
    episodes = phases.play(run, 0)
    assert len(episodes) == 6 and len({ep.id for ep in episodes}) == 6
    groups = {ep.question.metadata["group"] for ep in episodes}
    assert len(groups) == 2 and all(ep.id.split("#")[0] in groups for ep in episodes)
    selector_ids = {
        tuple(n.completion.completion_ids)
        for ep in episodes
        for n in ep.policy_nodes()
        if n.role == "selector"
    }
    assert len(selector_ids) > 2  # members are sampled apart, not copies of one sample
    samples, skipped = phases.credit_samples(run, episodes)
    train, ids = phases.trained_samples(run, samples, skipped)
    assert {s.role for s in train} == {"generator"} and skipped["role_not_trained"] == 6
    exp = run.learner.score(train, ids)
    assert exp.old_values is None
    for g in {s.group for s in train}:  # grpo: advantages sum to 0 within each question's group
        rows = [i for i, s in enumerate(train) if s.group == g]
        assert abs(float(exp.advantages[rows][:, 0].sum())) < 1e-4
    meters = run.learner.update(exp, 0)
    overall, per_role = meters.means()
    assert set(per_role) == {"generator"} and "value_loss" not in overall and "grad_norm" in overall
    out = ppo.train_ppo(cfg.model_copy(update={"out": str(tmp_path / "full")}))
    assert (out / "config.json").exists() and not (out / "critic").exists()


def test_log_probs_are_scored_at_the_sampling_temperature(tiny_run) -> None:
    from ragteam.train.actor_critic import completion_logprobs

    run, _, samples, _ = tiny_run
    s = next(x for x in samples if not x.allowed_ids)  # an unconstrained act (the Selector's is masked)
    hot = Sample(**{**s.__dict__, "temperature": 0.5})
    with torch.no_grad():
        at_one = completion_logprobs(run.learner.ac.policy, pack_samples([s]))[0][0, : len(s.completion_ids)]
        at_half = completion_logprobs(run.learner.ac.policy, pack_samples([hot]))[0][
            0, : len(s.completion_ids)
        ]
        full = run.learner.ac.policy(torch.tensor([s.prompt_ids + s.completion_ids])).logits[0].float()
    p = len(s.prompt_ids)
    logits = full[p - 1 : p - 1 + len(s.completion_ids)] / 0.5
    expect = (
        torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.completion_ids).unsqueeze(-1)).squeeze(-1)
    )
    assert torch.allclose(at_half, expect, atol=1e-4) and not torch.allclose(at_half, at_one, atol=1e-3)


def test_a_runaway_role_is_warned_about() -> None:
    from types import SimpleNamespace

    from ragteam.train.ppo.log import runaway

    run = SimpleNamespace(state={})
    assert runaway(run, {"roles": {"generator": {"entropy": 1.4, "length": 5.2, "kl": 0.0}}}) == []
    warned = runaway(run, {"roles": {"generator": {"entropy": 3.3, "length": 19.5, "kl": 0.6}}})
    assert len(warned) == 3 and all(w.startswith("generator:") for w in warned)


def test_the_runaway_baseline_is_the_median_of_the_first_iterations() -> None:
    """A low first iteration (other questions) no longer sets the baseline alone: against the median of the
    first three, 2.3 nats is no runaway (against the first alone it was); a doubling of that median is."""
    from types import SimpleNamespace

    from ragteam.train.ppo.log import runaway

    def warnings(entropies: list[float]) -> list[list[str]]:
        run = SimpleNamespace(state={})
        return [runaway(run, {"roles": {"generator": {"entropy": e, "length": 5.0}}}) for e in entropies]

    assert warnings([1.1, 1.0]) == [[], []]
    assert warnings([1.1, 2.3])[1]  # from iteration 2 on, against what is known so far
    quiet = warnings([0.6, 1.3, 1.4, 2.0, 2.3, 2.5])  # the first iteration alone would warn at 2.0 and on
    assert quiet == [[]] * 6
    assert warnings([0.6, 1.3, 1.4, 2.0, 2.8])[-1] == ["generator: entropy 1.30 -> 2.80 nats/token"]
    run = SimpleNamespace(
        state={"baseline": {"generator": {"entropy": 0.6, "length": 5.0}}}
    )  # an old checkpoint
    assert runaway(run, {"roles": {"generator": {"entropy": 1.7, "length": 5.0}}})  # keeps its baseline


def test_trained_computes_the_group_ids_once_for_the_kept_samples() -> None:
    """The uninformative-group filter drops whole question groups, so the ids `trained` keeps name the same
    groups and forks as `group_ids` of the kept samples."""
    from types import SimpleNamespace

    from ragteam.train.groups import group_ids
    from ragteam.train.ppo import phases

    def sample(episode: str, group: str, reward: float, parent: int | None = None) -> Sample:
        return Sample(episode, 0, "actor", [1], [2], reward, group=group, parent=parent)

    samples = [
        sample("a#0", "a", 1.0), sample("a#1", "a", 0.0),  # differ: kept
        sample("b#0", "b", 0.5), sample("b#1", "b", 0.5),  # alike: dropped
        sample("c", "c", 0.0, parent=4), sample("c", "c", 1.0, parent=4),  # a fork that differs: kept
        sample("d", "d", 1.0, parent=2), sample("d", "d", 1.0, parent=2),  # a fork alike: dropped
    ]  # fmt: skip
    opts = SimpleNamespace(train_roles=[], skip_uninformative=True, advantage="sibling")
    skipped: dict[str, int] = {}
    kept, ids = phases.trained_samples(SimpleNamespace(cfg=SimpleNamespace(ppo=opts)), samples, skipped)
    assert [s.episode for s in kept] == ["a#0", "a#1", "c", "c"] and skipped == {"uninformative_group": 4}

    def partition(x: torch.Tensor) -> list[list[bool]]:
        return [[bool(a == b and a >= 0) for b in x.tolist()] for a in x.tolist()]

    want = group_ids(kept)
    for name in ("index", "siblings", "roles", "episodes"):
        assert partition(getattr(ids, name)) == partition(getattr(want, name))


def test_target_kl_stops_the_update_once_the_policy_has_moved(hotpot_small: Path, tmp_path: Path) -> None:
    """The first step starts at ratio 1 (KL 0) and is taken; the next minibatch already measures the move
    and, with a target of ~0, stops the update there."""
    from ragteam.train import ppo
    from ragteam.train.ppo import phases

    base = tiny_cfg(hotpot_small, tmp_path / "out", iterations=1).ppo.model_dump()
    base |= {"target_kl": 1e-9, "epochs": 3, "minibatch_tokens": 64, "lr": 1e-3, "ent_coef": 1.0}  # it moves
    run = ppo.start(tiny_cfg(hotpot_small, tmp_path / "out", iterations=1, ppo=base))
    samples, _ = phases.credit_samples(run, phases.play(run, 0))
    overall, _ = run.learner.update(run.learner.score(samples), 0).means()
    assert overall["optimizer_steps"] == 1 and overall["early_stop_kl"] > 0


def test_the_value_loss_setting_reaches_the_update(tiny_run, monkeypatch) -> None:
    """`--ppo.value-loss mse` (C-3PO eq. 10) is the loss the update trains and logs: no token clipped."""
    from ragteam.train import losses
    from ragteam.train.ppo import learner as ppo_learner

    run, _, samples, _ = tiny_run
    kinds: list[str] = []

    def spy(*args, **kwargs):
        kinds.append(kwargs.get("kind", "clipped"))
        return losses.value_loss(*args, **kwargs)

    monkeypatch.setattr(ppo_learner, "value_loss", spy)  # the update phase computes it
    exp = run.learner.score(samples)
    before = run.learner.opts
    run.learner.opts = before.model_copy(update={"value_loss": "mse", "value_clip": 1e-6})
    try:
        overall, roles = run.learner.update(exp, 0).means()
    finally:
        run.learner.opts = before
    assert kinds and set(kinds) == {"mse"}  # the loss of the update and of the per-role statistics
    assert overall["value_clip_frac"] == 0.0 and overall["value_loss"] > 0


def test_a_spent_budget_names_itself_and_a_fresh_one_does_not() -> None:
    from ragteam.train.ppo import budget_spent

    cfg = PPOConfig.model_validate(dict(data="d", out="o", budget_tokens=100, budget_seconds=60))
    assert budget_spent(cfg, {"generated_tokens": 99, "seconds": 59.9}) is None
    assert budget_spent(cfg, {"generated_tokens": 100, "seconds": 0}).startswith("token")
    assert budget_spent(cfg, {"generated_tokens": 0, "seconds": 60}).startswith("time")


@pytest.mark.slow  # a PPO run of whole iterations
def test_a_time_budget_ends_the_run_with_its_checkpoint_and_final_policy(
    hotpot_small: Path, tmp_path: Path
) -> None:
    """A lease's time limit: `--budget-seconds` stops after the iteration that passes it (here the first),
    and the run still ends as a finished one does: checkpoint, final policy, the time kept in the state."""
    from ragteam.train import ppo

    out = ppo.train_ppo(tiny_cfg(hotpot_small, tmp_path / "run", iterations=5, budget_seconds=0.001))
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert (out / "checkpoint-1").is_dir() and (out / "model.safetensors").is_file()
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["seconds"] > 0
