"""Multi-agent PPO on episode trees: one policy playing every role of a workflow, one centralized critic.

    ragteam train ppo --recipe mmoa --data hotpotqa.jsonl --limit 400 --init runs/sft --out runs/ppo

Each iteration runs six named, timed phases, top to bottom in `train_ppo`:

1. rollout     - the engine plays the workflow on this iteration's questions with the current weights
                 (sampling at the recipe's temperature; C-3PO's recipe forks the tree), recording every act's
                 prompt ids, completion ids and log-probs;
2. credit      - a registered credit function (`ragteam.credit`: outcome, tree_mc, mmoa, process) turns
                 each tree into one reward per policy node; each credited node becomes a `Sample`;
3. advantages  - one pass without gradients gives old log-probs and values (current weights) and the
                 reference log-probs (the frozen initial model); the node's reward sits at its last token,
                 minus beta * KL at every token (`token_rewards`); GAE per act (`gae`); advantages
                 whitened over the iteration;
4. update      - `ppo.epochs` passes of shuffled token-budgeted minibatches: clipped policy loss + vf_coef *
                 clipped value loss - ent_coef * entropy, over every role's completion tokens (prompts,
                 and so observations, are never trained); one optimizer step per minibatch;
5. evaluate    - greedy rollouts on held-out questions (`--eval-data`), every `--eval-every` iterations and
                 after the last;
6. checkpoint  - every `--save-every` iterations: policy, critic, optimizer, scheduler, KL coefficient, RNG
                 states and the position in the data, written atomically. `--resume` continues after the
                 newest checkpoint: a killed run loses and repeats no update, because every random draw of
                 iteration i (question order, sampling seeds, minibatch order) derives from (seed, i).

Output in `--out`: the final policy (a model folder: `--policy.model OUT`) and its critic (`OUT/critic/`),
`log.jsonl` (one row per iteration, per-role statistics included), `runs/` (TensorBoard), `curves.png`,
`checkpoint-N/` and `config.yaml`.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ragteam.credit import get_credit
from ragteam.eval.folder import flatten
from ragteam.eval.scores import bootstrap_ci, episode_scores
from ragteam.rollout.traces import write_episodes
from ragteam.rollout.tree import Episode
from ragteam.train.actor_critic import ActorCritic, completion_logprobs
from ragteam.train.distributed import (
    SINGLE,
    Dist,
    from_env,
    gather_shares,
    load_optimizer_state,
    merge_meters,
    no_sync,
    optimizer_state,
    rank_device,
    save_actor_critic,
    sharded,
    share,
    split_tokens,
    wrap,
)
from ragteam.train.experience import Sample, micro_batches, minibatches, pack_samples, samples_from_episodes
from ragteam.train.losses import (
    KLController,
    gae,
    kl_penalty,
    masked_mean,
    masked_whiten,
    policy_loss,
    token_rewards,
    value_loss,
)
from ragteam.train.meters import PhaseTimer, RoleMeters
from ragteam.train.ppo_config import PPOConfig, PPOOptions, with_recipe
from ragteam.train.sync import (
    PushLoRAToVLLM,
    PushToCopy,
    PushToServer,
    PushToVLLM,
    PushToWorkers,
    SharedModule,
    WeightSync,
)

__all__ = ["PPOConfig", "train_ppo"]

PHASES = ("rollout", "credit", "advantages", "update", "evaluate", "checkpoint")


# ============================================================================ the run's live parts


@dataclass
class Run:
    """Everything `train_ppo` builds once and every phase reads."""

    cfg: PPOConfig
    out: Path
    workflow: Any
    engine: Any
    tokenizer: Any
    ac: ActorCritic
    ref: torch.nn.Module | None  # None: a LoRA policy, whose reference is itself with the adapter off
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    kl: KLController
    questions: list
    eval_questions: list
    device: torch.device
    sync: WeightSync
    tb: Any = None
    dist: Dist = SINGLE  # this process's rank under torchrun (train/distributed.py)
    model: Any = None  # what the update runs through: `ac`, or `ac` wrapped by DDP / FSDP
    judge: Any = None  # the LLM judge of --ppo.reward judge, built on first use
    state: dict[str, Any] = field(default_factory=lambda: {"iteration": 0, "generated_tokens": 0})


@dataclass
class Experience:
    """An iteration's samples and their per-token tensors, all [N, T] (N samples, T longest completion)."""

    samples: list[Sample]
    mask: Tensor
    old_logp: Tensor
    ref_logp: Tensor
    old_values: Tensor
    kl: Tensor
    advantages: Tensor
    returns: Tensor
    drift: float | None = None  # mean |old log-prob - the rollout backend's| per token (None: not recorded)


@dataclass
class Iteration:
    """What one iteration's phases produced, in order; its log row is built from it (`iteration_row`)."""

    index: int  # 0-based
    lrs: tuple[float, float]  # policy and critic learning rates this iteration (the update steps them)
    episodes: list[Episode] = field(default_factory=list)
    generated: int = 0  # policy tokens generated by this iteration's rollout
    samples: list[Sample] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    exp: Experience | None = None  # None when every act was skipped
    meters: RoleMeters = field(default_factory=RoleMeters)
    kl_mean: float = 0.0
    eval: dict[str, Any] = field(default_factory=dict)


def _lr_factor(cfg: PPOConfig):
    warm, total, kind = cfg.ppo.warmup_iterations, cfg.iterations, cfg.ppo.lr_schedule

    def factor(it: int) -> float:
        if it < warm:
            return (it + 1) / (warm + 1)
        if kind == "constant":
            return 1.0
        frac = (it - warm) / max(1, total - warm)
        return max(0.0, 1.0 - frac) if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))

    return factor


def _fastest_adamw(device: torch.device) -> dict[str, bool]:
    """AdamW's fused kernel where this torch has one for the device (CPU included since torch 2.4: one pass
    over each parameter instead of a loop of elementwise ops), else the multi-tensor `foreach` version."""
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError, TypeError):
        return {"foreach": True}
    return {"fused": True}


def build_optimizer(
    ac: ActorCritic, opts: PPOOptions, device: torch.device, fused: bool = True
) -> torch.optim.Optimizer:
    """AdamW with two groups: the policy's weights at `lr`, the critic's (value head, and its trunk when
    separate) at `critic_lr`. `fused=False`: the foreach kernel (FSDP's sharded parameters)."""
    critic_params = [*ac.value_head.parameters()]
    if ac.critic_trunk is not None:
        critic_params += [p for p in ac.critic_trunk.parameters() if p.requires_grad]  # LoRA: its adapter
    return torch.optim.AdamW(
        [
            {"params": [p for p in ac.policy.parameters() if p.requires_grad], "lr": opts.lr},
            {"params": critic_params, "lr": opts.critic_lr},
        ],
        weight_decay=opts.weight_decay,
        **(_fastest_adamw(device) if fused else {"foreach": True}),
    )


def build(cfg: PPOConfig) -> Run:
    """Questions, output folder, models (policy + critic, reference, rollout backends), engine, optimizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.config import save_resolved
    from ragteam.data.questions import read_questions
    from ragteam.eval.folder import select_questions
    from ragteam.eval.setup import build_workflow
    from ragteam.llm.local import DTYPES, LocalChatModel, resolve_device
    from ragteam.train.common import prepare_out_dir, resolve_init

    get_credit(cfg.ppo.credit)  # an unknown name fails before anything loads
    workflow = build_workflow(cfg)
    qset = read_questions(cfg.data, cfg.format)
    questions = select_questions(qset.questions, cfg.offset, cfg.limit)
    eval_questions: list = []
    if cfg.eval_data is not None:
        eset = read_questions(cfg.eval_data)
        eval_questions = select_questions(eset.questions, cfg.eval_offset, cfg.eval_limit)
    if not questions:
        raise ValueError(f"{cfg.data}: no training questions at offset {cfg.offset}")

    device = resolve_device(cfg.device)
    dist = from_env(device)  # torchrun: one rank of a data-parallel job (train/distributed.py)
    device = rank_device(device, dist)
    shard = dist.on and cfg.ppo.parallel == "fsdp"
    if shard and cfg.ppo.lora:
        raise ValueError(
            "--ppo.lora with --ppo.parallel fsdp is not supported: use ddp (the adapter is small)"
        )
    if dist.on and cfg.rollout.workers > 1:
        raise ValueError("under torchrun every rank rolls out its share itself: drop --rollout.workers")
    if dist.main:  # rank 0 alone writes the output folder
        resume_from = prepare_out_dir(cfg)  # type: ignore[arg-type]  (duck-typed: .out, .resume)
        save_resolved(cfg, cfg.out, "train ppo")
    dist.barrier()
    if not dist.main:
        from ragteam.train.common import checkpoints

        resume_from = checkpoints(cfg.out)[-1] if cfg.resume else None
    init = resolve_init(cfg.init)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    dtype = DTYPES[cfg.policy.dtype]

    tokenizer = AutoTokenizer.from_pretrained(init)
    if cfg.ppo.lora:  # the adapter trains; the reference is the same model with it switched off
        policy, ref = (
            lora_policy(AutoModelForCausalLM.from_pretrained(init, dtype=dtype), cfg, resume_from),
            None,
        )
        policy.to(device)
    else:
        source = resume_from if resume_from is not None else init
        policy = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device)
        ref = AutoModelForCausalLM.from_pretrained(init, dtype=dtype).to(device).eval().requires_grad_(False)
    ac = ActorCritic.from_policy(policy, shared=cfg.ppo.shared_critic)
    if resume_from is not None:
        ac.load_critic(resume_from)
    ac.eval()  # no dropout in rollouts or updates; PPO ratios compare like with like
    if cfg.ppo.gradient_checkpointing:
        policy.gradient_checkpointing_enable()

    if cfg.rollout.workers > 1:  # Ray actors, each with its own copy of the policy (rollout/distributed.py)
        from ragteam.rollout.distributed import RayEngine

        engine = RayEngine.from_config(partial(rollout_engine, cfg, qset.format), cfg.rollout)
    elif cfg.policy.backend == "local":  # the trained module itself (FSDP shards it: a whole copy, then)
        module = copy.deepcopy(policy) if shard else policy
        engine = rollout_engine(
            cfg,
            qset.format,
            LocalChatModel.from_model(
                module, tokenizer, name="policy", max_batch_size=cfg.policy.max_batch_size
            ),
        )
    else:  # a server
        engine = rollout_engine(cfg, qset.format)
    sync = PushToCopy(module) if shard and cfg.policy.backend == "local" else weight_sync(cfg, engine)

    model = wrap(ac, dist, cfg.ppo.parallel)  # before the optimizer: FSDP replaces the parameters
    optimizer = build_optimizer(ac, cfg.ppo, device, fused=not shard)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(cfg))
    kl = KLController(
        beta=cfg.ppo.kl_beta,
        target=cfg.ppo.kl_target,
        horizon=cfg.ppo.kl_horizon,
        beta_min=cfg.ppo.kl_beta_min,
        beta_max=cfg.ppo.kl_beta_max,
        anneal_to=cfg.ppo.kl_anneal_to,
        anneal_steps=cfg.iterations if cfg.ppo.kl_anneal_to is not None else 0,
    )
    run = Run(
        cfg, Path(cfg.out), workflow, engine, tokenizer, ac, ref, optimizer, scheduler, kl,
        questions, eval_questions, device, sync,
    )  # fmt: skip
    run.dist, run.model = dist, model
    if resume_from is not None:
        load_checkpoint(run, resume_from)
    run.tb = _tensorboard(run) if dist.main else None
    return run


def lora_policy(base: Any, cfg: PPOConfig, resume_from: Path | None) -> Any:
    """`base` with a fresh LoRA adapter (`--ppo.lora-*`), or with the adapter of the checkpoint resumed."""
    from peft import PeftModel, get_peft_model

    from ragteam.train.common import lora_config

    if resume_from is not None:
        return PeftModel.from_pretrained(base, str(resume_from / "adapter"), is_trainable=True)
    return get_peft_model(base, lora_config(cfg.ppo, "CAUSAL_LM"))


def rollout_engine(cfg: PPOConfig, fmt: str | None, policy: Any = None) -> Any:
    """The rollout engine: `policy` (the trained module, in process), else the policy as configured: a
    server, or, in a Ray rollout worker, a copy of `--init` that gets the trained weights pushed before
    every rollout. The fixed LLM and the retriever are built here too (once per worker)."""
    from ragteam.eval.setup import build_retriever, build_workflow
    from ragteam.llm.factory import build_chat_model
    from ragteam.llm.local import LocalChatModel
    from ragteam.rollout.engine import Engine
    from ragteam.rollout.select import build_scorer
    from ragteam.train.common import resolve_init

    needs = build_workflow(cfg).needs
    if policy is None and cfg.policy.backend == "local":
        p = cfg.policy
        policy = LocalChatModel(
            resolve_init(cfg.init),
            device=p.device,
            dtype=p.dtype,
            max_batch_size=p.max_batch_size,
            name="policy",
        )
    elif policy is None:
        policy = build_chat_model(cfg.policy)
    llm = build_chat_model(cfg.llm) if "llm" in needs else None  # never the policy: that one is trained
    retriever = build_retriever(cfg, data=cfg.data, fmt=fmt) if "retriever" in needs else None
    scorer = build_scorer(cfg.rollout, policy, llm, retriever, None)
    return Engine(policy, llm, retriever, cfg.rollout, scorer=scorer)


def weight_sync(cfg: PPOConfig, engine: Any) -> WeightSync:
    """How the rollout backend gets the trained weights before each rollout (train/sync.py)."""
    folder = Path(cfg.ppo.sync_folder) if cfg.ppo.sync_folder else Path(cfg.out) / "sync"
    if cfg.policy.backend == "local":
        return PushToWorkers(engine) if cfg.rollout.workers > 1 else SharedModule()
    key = os.environ.get(cfg.policy.api_key_env) or None  # the key the rollout client sends, if any
    if cfg.ppo.weight_sync == "vllm":
        return PushToVLLM(cfg.policy.base_url or "", folder, api_key=key)
    if cfg.ppo.weight_sync == "vllm-lora":
        if not cfg.ppo.lora:
            raise ValueError("--ppo.weight-sync vllm-lora pushes a LoRA adapter: add --ppo.lora")
        rename = partial(setattr, engine.policy, "model")  # rollouts then ask for the new adapter by name
        return PushLoRAToVLLM(cfg.policy.base_url or "", folder, cfg.policy.model, rename, api_key=key)
    return PushToServer.for_base_url(cfg.policy.base_url or "", folder, api_key=key)


# ============================================================================ the phases


def iteration_questions(questions: list, iteration: int, per_iteration: int, seed: int) -> list:
    """Iteration i's questions: slice i of an endless stream of seeded shuffles of the training set (one
    shuffle per pass), so the data position is a function of (seed, i) and a resumed run reads on."""
    n = len(questions)
    out = []
    for k in range(iteration * per_iteration, (iteration + 1) * per_iteration):
        epoch, pos = divmod(k, n)
        order = np.random.default_rng([seed, epoch]).permutation(n)
        out.append(questions[int(order[pos])])
    return out


def rollout(run: Run, iteration: int) -> list[Episode]:
    """Phase 1: play the workflow on this iteration's questions with the current weights."""
    from ragteam.metrics.answer import score_answer

    cfg = run.cfg
    push(run, iteration)  # a served policy gets the weights after `iteration` updates
    batch = iteration_questions(run.questions, iteration, cfg.questions_per_iteration, cfg.seed)
    run.engine.config = cfg.rollout.model_copy(update={"seed": cfg.seed * 1_000_003 + iteration})
    report = run.engine.run(
        run.workflow,
        share(batch, run.dist),  # under torchrun, this rank's share; the episodes are then gathered
        reward=lambda q, a: score_answer(a, q),
        progress=cfg.progress and run.dist.main,
    )
    return gather_shares(report.episodes, run.dist)


def push(run: Run, iteration: int) -> None:
    """The current weights to the rollout backend (rank 0 pushes to a server; every rank then waits)."""
    if run.dist.main or isinstance(run.sync, SharedModule) or getattr(run.sync, "collective", False):
        run.sync.push(run.ac.policy, iteration)
    run.dist.barrier()


def judge_leaves(run: Run, episodes: list[Episode]) -> None:
    """`--ppo.reward judge`: the LLM judge's verdict (1/0) on every answered leaf, as its `judge` reward, in
    one batched call per iteration; failed and truncated leaves stay unjudged (worth 0 in credit)."""
    from ragteam.metrics.judge import LLMJudge

    if run.judge is None:
        run.judge = LLMJudge(run.cfg.judge.chat_model())
    leaves = [(ep, lf) for ep in episodes for lf in ep.leaves() if lf.status == "ok"]
    verdicts = run.judge.judge([ep.question for ep, _ in leaves], [lf.answer or "" for _, lf in leaves])
    for (_, leaf), v in zip(leaves, verdicts):
        leaf.rewards["judge"] = v


def credit(run: Run, episodes: list[Episode]) -> tuple[list[Sample], dict[str, int]]:
    """Phase 2: one reward per policy node (the recipe's credit function), one Sample per credited node."""
    if run.cfg.ppo.reward == "judge":
        judge_leaves(run, episodes)
    fn = get_credit(run.cfg.ppo.credit)
    return samples_from_episodes(episodes, fn, run.cfg.ppo.reward, max_tokens=run.cfg.ppo.max_sample_tokens)


@torch.no_grad()
def advantages(run: Run, samples: list[Sample]) -> Experience:
    """Phase 3: old log-probs and values (current weights), reference log-probs, token rewards, GAE."""
    cfg, dev = run.cfg.ppo, run.device
    n, longest = len(samples), max(len(s.completion_ids) for s in samples)
    old_logp, ref_logp, values = (torch.zeros(n, longest, device=dev) for _ in range(3))
    mask = torch.zeros(n, longest, dtype=torch.bool, device=dev)
    dist = run.dist
    every = micro_batches(samples, range(n), cfg.micro_tokens)
    mine = every[dist.rank :: dist.world]  # torchrun: every world-th micro-batch; the others score the rest
    # FSDP gathers weights inside each forward: every rank runs as many (one scores a batch for nothing)
    steps = -(-len(every) // dist.world) if sharded(run.ac) else len(mine)
    for k in range(steps):
        idx = mine[k] if k < len(mine) else None
        batch = pack_samples([samples[i] for i in idx or every[0]]).to(dev)
        t = batch.mask.shape[1]
        scored = run.ac(batch)
        if idx is None:
            continue
        ref = (
            completion_logprobs(run.ref, batch)[0]
            if run.ref is not None
            else run.ac.reference_logprobs(batch)
        )
        rows = torch.tensor(idx, device=dev)
        old_logp[rows, :t], ref_logp[rows, :t], values[rows, :t] = scored.logp, ref, scored.values
        mask[rows, :t] = batch.mask
    if dist.on:  # each row was filled by one rank, zeros elsewhere: the sum is the whole table
        filled = mask.to(torch.int32)
        dist.sum_(old_logp, ref_logp, values, filled)
        mask = filled.bool()
    drift = _logprob_drift(samples, old_logp)
    kl = kl_penalty(old_logp, ref_logp, cfg.kl_estimator) * mask
    scores = torch.tensor([s.reward for s in samples], dtype=torch.float32, device=dev)
    rewards = token_rewards(scores, kl, mask, run.kl.beta)
    adv, returns = gae(rewards, values, mask, gamma=cfg.gamma, lam=cfg.lam)
    if cfg.whiten_advantages and mask.sum() > 1:
        adv = masked_whiten(adv, mask)
    return Experience(samples, mask, old_logp, ref_logp, values, kl, adv, returns, drift)


def _logprob_drift(samples: list[Sample], old_logp: Tensor) -> float | None:
    """Mean absolute gap per token between the trainer's log-probs and the rollout backend's: ~1e-6 in
    process, larger from a server (other kernels, bf16) or when its weights lag the trainer's."""
    total, count = 0.0, 0
    for b, s in enumerate(samples):
        if s.rollout_logprobs is not None and len(s.rollout_logprobs) == len(s.completion_ids):
            ours = old_logp[b, : len(s.completion_ids)].cpu()
            total += float((ours - torch.tensor(s.rollout_logprobs)).abs().sum())
            count += len(s.completion_ids)
    return total / count if count else None


def update(run: Run, exp: Experience, iteration: int) -> RoleMeters:
    """Phase 4: PPO epochs over shuffled minibatches; returns token-weighted statistics, overall and per role.

    Under torchrun each rank takes a token-balanced share of every minibatch; its loss is scaled by the
    world size because DDP averages the ranks' gradients, so the gradient is the token mean over the whole
    minibatch, as in one process (train/distributed.py)."""
    cfg, dev, dist = run.cfg.ppo, run.device, run.dist
    meters = RoleMeters()
    gen = torch.Generator().manual_seed(run.cfg.seed * 1_000_003 + iteration)
    params = [p for g in run.optimizer.param_groups for p in g["params"]]
    lengths = [s.length for s in exp.samples]
    if cfg.gradient_checkpointing:
        run.ac.policy.train()
    for _ in range(cfg.epochs):
        for mb in minibatches(exp.samples, cfg.minibatch_tokens, generator=gen):
            run.optimizer.zero_grad(set_to_none=True)
            mb_tokens = exp.mask[mb].sum().clamp_min(1)
            split = [
                micro_batches(exp.samples, part, cfg.micro_tokens)
                for part in split_tokens(mb, lengths, dist.world)
            ]
            micro = split[dist.rank]
            # every rank runs as many forward/backward passes (the collectives pair up): a rank with fewer
            # micro-batches pads with zero-loss passes
            steps = max(len(m) for m in split)
            for k in range(steps):
                idx = micro[k] if k < len(micro) else mb[:1]
                weight = float(dist.world) if k < len(micro) else 0.0
                batch = pack_samples([exp.samples[i] for i in idx]).to(dev)
                t, rows = batch.mask.shape[1], torch.tensor(idx, device=dev)
                old, adv, ret, old_v = (
                    x[rows, :t] for x in (exp.old_logp, exp.advantages, exp.returns, exp.old_values)
                )
                with no_sync(run.model, last=k == steps - 1):
                    out = run.model(batch, entropy=True)
                    pg, _ = policy_loss(out.logp, old, adv, batch.mask, clip=cfg.clip)
                    vf, _ = value_loss(out.values, old_v, ret, batch.mask, clip=cfg.value_clip)
                    ent = masked_mean(out.entropy, batch.mask)
                    loss = pg + cfg.vf_coef * vf - cfg.ent_coef * ent
                    # token mean over the whole minibatch (all ranks' shares)
                    (loss * batch.mask.sum() / mb_tokens * weight).backward()
                if weight:
                    _role_stats(meters, batch, out, old, adv, ret, old_v, cfg)
            norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            run.optimizer.step()
            if hasattr(norm, "full_tensor"):  # FSDP: a DTensor
                norm = norm.full_tensor()
            meters.add(None, "grad_norm", float(norm))
    run.ac.eval()
    run.scheduler.step()
    return merge_meters(meters, dist)


@torch.no_grad()
def _role_stats(meters: RoleMeters, batch, out, old, adv, ret, old_v, cfg) -> None:
    """Token-weighted PPO statistics of one micro-batch: overall and for each role in it."""
    roles = sorted({s.role for s in batch.samples})
    role_of = [s.role for s in batch.samples]
    for role in [None, *roles]:
        m = (
            batch.mask
            if role is None
            else batch.mask
            & torch.tensor([r == role for r in role_of], device=batch.mask.device).unsqueeze(1)
        )
        n = float(m.sum())
        if n == 0:
            continue
        pg, pstats = policy_loss(out.logp, old, adv, m, clip=cfg.clip)
        vf, vstats = value_loss(out.values, old_v, ret, m, clip=cfg.value_clip)
        for name, value in (
            ("policy_loss", pg.item()),
            ("value_loss", vf.item()),
            ("clip_frac", pstats["clip_frac"]),
            ("approx_kl", pstats["approx_kl"]),
            ("value_clip_frac", vstats["clip_frac"]),
            ("entropy", masked_mean(out.entropy, m).item()),
        ):
            meters.add(role, name, value, n)


def evaluate(run: Run) -> dict[str, Any]:
    """Phase 5: greedy rollouts on the held-out questions; mean EM / F1 / cover-EM with 95% intervals. The
    episodes go to OUT/eval/iteration-N.jsonl, in the format of `ragteam eval`'s episodes.jsonl."""
    from ragteam.eval.stats import invalid_action_stats, strategy_stats
    from ragteam.metrics.answer import score_answer

    if not run.eval_questions:
        return {}
    push(run, run.state["iteration"])
    greedy = run.cfg.rollout.model_copy(update={"temperature": 0.0, "forks": [], "seed": run.cfg.seed})
    saved, run.engine.config = run.engine.config, greedy
    t0 = time.perf_counter()
    try:
        report = run.engine.run(
            run.workflow,
            share(run.eval_questions, run.dist),
            reward=lambda q, a: score_answer(a, q),
            progress=run.cfg.progress and run.dist.main,
        )
    finally:
        run.engine.config = saved
    episodes = gather_shares(report.episodes, run.dist)
    trace = run.out / "eval" / f"iteration-{run.state['iteration']}.jsonl"  # for paired comparisons
    if run.dist.main:
        trace.parent.mkdir(parents=True, exist_ok=True)
        write_episodes(trace, episodes)
    scores = [episode_scores(ep) or {} for ep in episodes]
    out: dict[str, Any] = {"questions": len(scores), "seconds": round(time.perf_counter() - t0, 1)}
    out["trace"] = str(trace.relative_to(run.out))
    for metric in ("em", "f1", "cover_em"):
        values = [100.0 * s.get(metric, 0.0) for s in scores]
        lo, hi = bootstrap_ci(values)
        out[metric] = {"mean": float(np.mean(values)), "ci95": [lo, hi]}
    out["invalid"] = invalid_action_stats(episodes)
    strategy = strategy_stats(episodes)
    if strategy:
        out["strategy"] = strategy
    return out


# ---- checkpoints -------------------------------------------------------------------------------------------


def save_checkpoint(run: Run, iteration: int, row: dict[str, Any] | None = None) -> Path:
    """Phase 6: `checkpoint-<iteration>/`, written under a temporary name and renamed when complete. It
    holds the iteration's log row too: a run killed between the checkpoint and its log line gets the line
    back on resume."""
    final = run.out / f"checkpoint-{iteration}"
    tmp = run.out / f".checkpoint-{iteration}.tmp"
    if run.dist.main:
        shutil.rmtree(tmp, ignore_errors=True)
    save_actor_critic(run.ac, tmp, run.tokenizer, run.dist, merged=False)  # every torchrun rank calls this...
    optimizer = optimizer_state(run.model, run.optimizer)
    if not run.dist.main:  # ...and rank 0 alone writes
        return final
    torch.save({"optimizer": optimizer, "scheduler": run.scheduler.state_dict()}, tmp / "optimizer.pt")
    torch.save(
        {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        },
        tmp / "rng.pt",
    )
    state = dict(run.state, global_step=iteration, iteration=iteration, log_row=row)
    state["kl"] = {"beta": run.kl.beta, "steps": run.kl.steps, "beta_start": run.kl.beta_start}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    _prune_checkpoints(run)
    return final


def _prune_checkpoints(run: Run) -> None:
    from ragteam.train.common import checkpoints

    limit = run.cfg.save_total_limit
    if limit is not None:
        for old in checkpoints(run.out)[:-limit]:
            shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(run: Run, folder: Path) -> None:
    """Restore what `save_checkpoint` wrote (the weights are loaded by `build`)."""
    opt = torch.load(folder / "optimizer.pt", map_location=run.device, weights_only=False)
    load_optimizer_state(run.model, run.optimizer, opt["optimizer"])
    run.scheduler.load_state_dict(opt["scheduler"])
    rng = torch.load(folder / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    kl = state.pop("kl")
    run.kl.beta, run.kl.steps, run.kl.beta_start = kl["beta"], kl["steps"], kl["beta_start"]
    row = state.pop("log_row", None)
    logged = [json.loads(x) for x in (run.out / "log.jsonl").read_text(encoding="utf-8").splitlines() if x]
    if row is not None and run.dist.main and not any(r.get("step") == row["step"] for r in logged):
        with (run.out / "log.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    run.state = {k: state[k] for k in ("iteration", "generated_tokens")}


# ============================================================================ logging


def rollout_stats(episodes: list[Episode], exp: Experience | None, samples: list[Sample]) -> dict[str, Any]:
    """Training-batch statistics: answer rewards over leaves, and per role: credited reward, KL to the
    reference, response length, invalid and cut rates, action kinds (C-3PO's router: its strategy ratio)."""
    leaves = [lf for ep in episodes for lf in ep.leaves()]
    row: dict[str, Any] = {"episodes": len(episodes), "leaves": len(leaves), "samples": len(samples)}
    metrics = ("em", "f1", "cover_em") + (("judge",) if any("judge" in lf.rewards for lf in leaves) else ())
    row["reward"] = {
        m: float(np.mean([lf.rewards.get(m, 0.0) for lf in leaves])) if leaves else 0.0 for m in metrics
    }
    roles: dict[str, dict[str, Any]] = {}
    for i, s in enumerate(samples):
        r = roles.setdefault(
            s.role, {"n": 0, "reward": 0.0, "length": 0.0, "invalid": 0.0, "cut": 0.0, "kinds": {}}
        )
        r["n"] += 1
        r["reward"] += s.reward
        r["length"] += len(s.completion_ids)
        r["invalid"] += s.invalid
        r["cut"] += s.cut
        r["kinds"][s.kind] = r["kinds"].get(s.kind, 0) + 1
        if exp is not None:
            m = exp.mask[i]
            r["kl"] = r.get("kl", 0.0) + float(exp.kl[i][m].sum() / m.sum().clamp_min(1))
    for r in roles.values():
        n = r.pop("n")
        for key in ("reward", "length", "invalid", "cut", "kl"):
            if key in r:
                r[key] /= n
        r["n"] = n
    row["roles"] = roles
    return row


def iteration_row(run: Run, step: Iteration) -> dict[str, Any]:
    """The log row of one iteration: rollout statistics, PPO statistics (overall and per role), schedule."""
    overall, per_role = step.meters.means()
    row: dict[str, Any] = {"step": step.index + 1, "iteration": step.index + 1, "time": round(time.time(), 3)}
    row |= rollout_stats(step.episodes, step.exp, step.samples)
    for role, stats in per_role.items():
        row["roles"].setdefault(role, {}).update(stats)
    row |= {
        "skipped": step.skipped,
        "generated_tokens": step.generated,
        "generated_tokens_total": run.state["generated_tokens"],
        "kl_mean": step.kl_mean,
        "kl_beta": run.kl.beta,
        "logprob_drift": step.exp.drift if step.exp is not None else None,
        "lr": step.lrs[0],
        "critic_lr": step.lrs[1],
        "train": overall,
    }
    if step.eval:
        row["eval"] = step.eval
    return row


def _tensorboard(run: Run):
    from ragteam.train.common import tensorboard_available

    if not run.cfg.tensorboard or not tensorboard_available():
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run.out / "runs"))


def log_iteration(run: Run, row: dict[str, Any]) -> None:
    with (run.out / "log.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    if run.tb is not None:
        for key, value in flatten(row, sep="/").items():
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if numeric and key not in ("step", "iteration", "time"):
                run.tb.add_scalar(key, value, row["step"])
        run.tb.flush()
    r, t = row["reward"], row.get("train", {})
    ev = row.get("eval") or {}
    print(
        f"ppo it {row['iteration']}: reward f1 {r['f1']:.3f} cover_em {r['cover_em']:.3f} | "
        f"kl {row.get('kl_mean', 0):.4f} beta {row['kl_beta']:.3f} | pg {t.get('policy_loss', 0):.4f} "
        f"vf {t.get('value_loss', 0):.4f} clip {t.get('clip_frac', 0):.3f} | "
        + (f"eval f1 {ev['f1']['mean']:.1f} | " if ev else "")
        + " ".join(f"{k} {v:.0f}s" for k, v in row["seconds"].items()),
        file=sys.stderr,
        flush=True,
    )


# ============================================================================ the loop


def train_ppo(cfg: PPOConfig) -> Path:
    """Run (or resume) PPO as configured; returns the output folder holding the final policy and critic."""
    from ragteam.train.curves import write_curves

    cfg = with_recipe(cfg)
    run = build(cfg)
    start = run.state["iteration"]
    for it in range(start, cfg.iterations):
        timer = PhaseTimer()
        groups = run.optimizer.param_groups  # policy, critic: this iteration's rates (the update steps them)
        step = Iteration(it, (groups[0]["lr"], groups[1]["lr"]))

        with timer("rollout"):
            step.episodes = rollout(run, it)
            step.generated = sum(
                len(n.completion.completion_ids or [])
                for ep in step.episodes for n in ep.policy_nodes() if n.completion is not None
            )  # fmt: skip
            run.state["generated_tokens"] += step.generated
        spent = cfg.budget_tokens is not None and run.state["generated_tokens"] >= cfg.budget_tokens
        last = it + 1 == cfg.iterations or spent

        with timer("credit"):
            step.samples, step.skipped = credit(run, step.episodes)

        if step.samples:
            with timer("advantages"):
                step.exp = advantages(run, step.samples)

            with timer("update"):
                step.meters = update(run, step.exp, it)
            step.kl_mean = float(masked_mean(step.exp.kl, step.exp.mask))
        else:
            with warnings.catch_warnings():  # "scheduler stepped before optimizer": intended here
                warnings.simplefilter("ignore", UserWarning)
                run.scheduler.step()  # every act skipped: nothing to learn, the schedule still advances
        run.kl.update(step.kl_mean, 1)
        run.state["iteration"] = it + 1  # updates done

        with timer("evaluate"):
            due = bool(cfg.eval_every) and (it + 1) % cfg.eval_every == 0
            step.eval = evaluate(run) if due or last else {}

        row = iteration_row(run, step)
        with timer("checkpoint"):
            if (it + 1) % cfg.save_every == 0 or last:
                save_checkpoint(run, it + 1, row)
        row["seconds"] = {k: round(v, 2) for k, v in timer.seconds.items()}
        if run.dist.main:
            log_iteration(run, row)
        if spent:
            if run.dist.main:
                print(
                    f"ppo: token budget {cfg.budget_tokens} spent after {it + 1} iterations", file=sys.stderr
                )
            break

    save_actor_critic(run.ac, run.out, run.tokenizer, run.dist)
    if run.dist.main:
        write_curves(run.out)
    run.dist.barrier()  # the output is complete when any rank returns
    close = getattr(run.engine, "close", None)  # Ray rollout workers (--rollout.workers)
    if close is not None:
        close()
    if run.tb is not None:
        run.tb.close()
    return run.out
