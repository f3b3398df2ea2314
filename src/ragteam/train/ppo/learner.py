"""PPO's learner: the policy and its value model (`ActorCritic`), the frozen reference, the optimizer and its
learning-rate schedule, the KL coefficient, and the two learning phases of an iteration:

3. `Learner.score`, the pass without gradients: old log-probs (and values) under the current weights,
   reference log-probs, token rewards, the registered advantage estimator over the samples' groups, episodes
   and leaf trajectories, and the normalisation;
4. `Learner.update`, the PPO epochs: the registered policy loss, the clipped value loss, the entropy bonus and
   the KL term of the critic-free estimators, one optimizer step per minibatch.

It knows nothing of rollouts, workflows or output folders (`run.py` holds those), so a benchmark builds one
around any policy (`Learner.create`) and times the very update `ragteam train ppo` runs (bench/ppo.py).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor

from ragteam.train.actor_critic import ActorCritic, completion_logprobs
from ragteam.train.advantages import get_advantage, normalize, resolved
from ragteam.train.constrained import mask_structured, stop_ids, text_ids
from ragteam.train.distributed import SINGLE, Dist, merge_meters, no_sync, sharded, split_tokens
from ragteam.train.experience import Sample, micro_batches, minibatches, pack_samples
from ragteam.train.groups import GroupIds, group_ids
from ragteam.train.losses import (
    KLController,
    get_policy_loss,
    kl_penalty,
    masked_mean,
    token_rewards,
    value_loss,
)
from ragteam.train.meters import RoleMeters
from ragteam.train.ppo.stats import logprob_drift, role_stats
from ragteam.train.ppo_config import PPOOptions

__all__ = ["Experience", "Learner", "anneal_steps", "build_optimizer", "lr_factor"]


@dataclass
class Experience:
    """An iteration's samples and their per-token tensors, all [N, T] (N samples, T longest completion)."""

    samples: list[Sample]
    mask: Tensor
    old_logp: Tensor
    ref_logp: Tensor
    old_values: Tensor | None  # None: a critic-free estimator
    kl: Tensor
    advantages: Tensor
    returns: Tensor
    drift: float | None = None  # mean |old log-prob - the rollout backend's| per token (None: not recorded)


def lr_factor(opts: PPOOptions, iterations: int):
    """The schedule's factor of the peak learning rate at each iteration: `--ppo.warmup-iterations` of linear
    warm-up, then `--ppo.lr-schedule` (constant, linear or cosine to 0 at the last iteration)."""
    warm, total, kind = opts.warmup_iterations, iterations, opts.lr_schedule

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
    """AdamW with two groups: the policy's weights at `lr`, the value model's (value head, and its trunk when
    separate) at `value_lr` when there is one. `fused=False`: the foreach kernel (FSDP's sharded
    parameters)."""
    groups = [{"params": [p for p in ac.policy.parameters() if p.requires_grad], "lr": opts.lr}]
    if ac.has_critic:
        critic_params = [*ac.value_head.parameters()]
        if ac.critic_trunk is not None:
            critic_params += [p for p in ac.critic_trunk.parameters() if p.requires_grad]  # LoRA: its adapter
        groups.append({"params": critic_params, "lr": opts.value_lr})
    return torch.optim.AdamW(
        groups,
        weight_decay=opts.weight_decay,
        **(_fastest_adamw(device) if fused else {"foreach": True}),
    )


def anneal_steps(opts: PPOOptions, iterations: int) -> int:
    """The KL anneal's length in controller steps (one per iteration, taken after it): iterations - 1, so
    that the first iteration runs at --ppo.kl-beta and the last one at --ppo.kl-anneal-to (MMOA-RAG's
    beta_max .. beta_min); 0 without an anneal. A one-iteration run stays at --ppo.kl-beta."""
    if opts.kl_anneal_to is None:
        return 0
    return max(1, iterations - 1)


@dataclass
class Learner:
    """What PPO learns with: the models, the optimizer, the schedule, the KL coefficient, and the update.

    `model` is what the update runs through: `ac` itself, or `ac` wrapped by DDP / FSDP under torchrun
    (`dist`); `ref` is None for a LoRA policy, whose reference is itself with the adapter off."""

    opts: PPOOptions
    ac: ActorCritic
    ref: torch.nn.Module | None
    tokenizer: Any  # the policy's: the advantage pass masks structured replies with it
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    kl: KLController
    device: torch.device
    seed: int = 0  # the run's --seed: each update's minibatch shuffle derives from (seed, iteration)
    dist: Dist = SINGLE  # this process's rank under torchrun (train/distributed.py)
    model: Any = None  # None: `ac`
    share_prefix: bool = False  # --ppo.share-prefix, where the policy's attention takes its mask
    progress: bool = False  # progress bars over the phases' tokens (on the main process)

    def __post_init__(self) -> None:
        if self.model is None:
            self.model = self.ac

    @classmethod
    def create(
        cls,
        ac: ActorCritic,
        ref: torch.nn.Module | None,
        tokenizer: Any,
        opts: PPOOptions,
        device: torch.device,
        iterations: int,
        fused: bool = True,
        **more: Any,
    ) -> Learner:
        """A learner around `ac`: its optimizer (`build_optimizer`), the schedule over `iterations`
        (`lr_factor`) and the KL controller of `opts`; `more` sets the other fields (seed, dist, model,
        share_prefix, progress). Under FSDP, wrap `ac` before (the wrapper replaces the parameters) and pass
        `fused=False`."""
        optimizer = build_optimizer(ac, opts, device, fused=fused)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(opts, iterations))
        kl = KLController(
            beta=opts.kl_beta,
            target=opts.kl_target,
            horizon=opts.kl_horizon,
            beta_min=opts.kl_beta_min,
            beta_max=opts.kl_beta_max,
            anneal_to=opts.kl_anneal_to,
            anneal_steps=anneal_steps(opts, iterations),
        )
        return cls(opts, ac, ref, tokenizer, optimizer, scheduler, kl, device, **more)

    def precision(self) -> torch.autocast:
        """The context every trainer forward runs in: bfloat16 autocast under --ppo.bf16 (the same for the
        old, reference and updated log-probs, so the first step's ratio is exactly 1), else a no-op."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.opts.bf16)

    def lrs(self) -> tuple[float, ...]:
        """The policy (and value model) learning rates of this iteration (the update steps them)."""
        return tuple(g["lr"] for g in self.optimizer.param_groups)

    def bar(self, phase: str, tokens: int):
        """A progress bar over a phase's tokens (prompt + completion), its rate in tokens/s: the advantage
        pass and the update take minutes on CPU (SmolLM2: 148 s and 571 s), where a silent terminal looks
        hung. Shown on the main process under `--progress`, as the rollout's bar is (its seconds are also on
        the iteration's line)."""
        from tqdm.auto import tqdm

        on = self.progress and self.dist.main
        return tqdm(total=tokens, desc=f"ppo {phase}", unit="tok", unit_scale=True, disable=not on)

    def kl_loss_coef(self) -> float:
        """The KL coefficient of the loss term: the controller's beta where the KL goes in the loss
        (`--ppo.kl-in`, resolved for the estimator), 0 where it sits in the reward (it is paid there)."""
        in_loss = resolved(self.opts.kl_in, get_advantage(self.opts.advantage), "kl_in") == "loss"
        return self.kl.beta if in_loss else 0.0

    def skip_update(self) -> None:
        """An iteration whose every act was left out: nothing to learn, the schedule still advances."""
        with warnings.catch_warnings():  # "scheduler stepped before optimizer": intended here
            warnings.simplefilter("ignore", UserWarning)
            self.scheduler.step()

    def end_iteration(self, kl_mean: float) -> None:
        """The KL controller's step after an iteration (adaptive or annealed beta): the next one's beta."""
        self.kl.update(kl_mean, 1)

    @torch.no_grad()
    def score(self, samples: list[Sample], ids: GroupIds | None = None) -> Experience:
        """Phase 3: old log-probs (and values) under the current weights, reference log-probs, token
        rewards, then the configured estimator over the samples' groups, episodes and leaves (`ids`, from
        `phases.trained_samples`; computed when not given) and the configured normalisation. The token rewards
        hold -beta * KL only where the KL goes in the reward (`--ppo.kl-in`, by default the estimator's: gae
        and reinforce_pp); elsewhere the update adds beta * KL to the loss."""
        cfg, dev = self.opts, self.device
        critic = self.ac.has_critic
        # a reply decoded under a server's grammar is scored under the whitelist it spells
        mask_structured(samples, partial(text_ids, self.tokenizer), stop_ids(self.tokenizer, self.ac.policy))
        n, longest = len(samples), max(len(s.completion_ids) for s in samples)
        old_logp, ref_logp, values = (torch.zeros(n, longest, device=dev) for _ in range(3))
        mask = torch.zeros(n, longest, dtype=torch.bool, device=dev)
        dist = self.dist
        every = micro_batches(samples, range(n), cfg.micro_tokens, self.share_prefix)
        mine = every[
            dist.rank :: dist.world
        ]  # torchrun: every world-th micro-batch; the others score the rest
        # FSDP gathers weights inside each forward: every rank runs as many (one scores a batch for nothing)
        steps = -(-len(every) // dist.world) if sharded(self.ac) else len(mine)
        bar = self.bar("advantages", sum(samples[i].length for idx in mine for i in idx))
        for k in range(steps):
            idx = mine[k] if k < len(mine) else None
            batch = pack_samples([samples[i] for i in idx or every[0]], share_prefix=self.share_prefix).to(
                dev
            )
            t = batch.mask.shape[1]
            with self.precision():
                scored = self.ac(batch)
                if idx is None:
                    continue
                ref = (
                    completion_logprobs(self.ref, batch)[0]
                    if self.ref is not None
                    else self.ac.reference_logprobs(batch)
                )
            rows = torch.tensor(idx, device=dev)
            old_logp[rows, :t], ref_logp[rows, :t] = scored.logp, ref
            if critic:
                values[rows, :t] = scored.values
            mask[rows, :t] = batch.mask
            bar.update(sum(samples[i].length for i in idx))
        bar.close()
        if dist.on:  # each row was filled by one rank, zeros elsewhere: the sum is the whole table
            filled = mask.to(torch.int32)
            dist.sum_(old_logp, ref_logp, values, filled)
            mask = filled.bool()
        drift = logprob_drift(samples, old_logp)
        kl = kl_penalty(old_logp, ref_logp, cfg.kl_estimator) * mask
        scores = torch.tensor([s.reward for s in samples], dtype=torch.float32, device=dev)
        estimator = get_advantage(cfg.advantage)
        in_reward = resolved(cfg.kl_in, estimator, "kl_in") == "reward"
        rewards = token_rewards(scores, kl, mask, self.kl.beta if in_reward else 0.0)
        g = (ids if ids is not None else group_ids(samples)).to(dev)
        adv, returns = estimator.fn(
            rewards,
            mask,
            values if critic else None,
            g.index,
            siblings=g.siblings,
            episodes=g.episodes,
            leaves=g.leaves,
            gamma=cfg.gamma,
            lam=cfg.lam,
        )
        adv = normalize(adv, mask, g.roles, resolved(cfg.normalize, estimator, "normalize"))
        return Experience(
            samples, mask, old_logp, ref_logp, values if critic else None, kl, adv, returns, drift
        )

    def update(self, exp: Experience, iteration: int) -> RoleMeters:
        """Phase 4: PPO epochs over shuffled minibatches; returns token-weighted statistics, overall and per
        role. With `--ppo.target-kl`, the update stops before a step once a minibatch's KL(old || current) per
        token passes 1.5 x the target (as Stable-Baselines3 does): Adam moves every weight by about the
        learning rate whatever the batch, so on a few samples one step can already move the policy a long way.

        Under torchrun each rank takes a token-balanced share of every minibatch; its loss is scaled by the
        world size because DDP averages the ranks' gradients, so the gradient is the token mean over the
        whole minibatch, as in one process (train/distributed.py).

        Where the KL goes in the loss (`--ppo.kl-in loss`, the critic-free estimators' default:
        DeepSeekMath's GRPO), the loss adds beta * the token mean of `--ppo.kl-loss-estimator` (k3) of the
        current policy against the reference, with its gradient; beta is the KL controller's (`self.kl`:
        fixed, adaptive or annealed), as it would scale the in-reward penalty."""
        cfg, dev, dist = self.opts, self.device, self.dist
        pg_loss = get_policy_loss(cfg.loss)
        kl_coef = self.kl_loss_coef()
        meters = RoleMeters()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + iteration)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        lengths = [s.length for s in exp.samples]
        if cfg.gradient_checkpointing:
            self.ac.policy.train()
        steps_taken, stopped = 0, False
        bar = self.bar("update", cfg.epochs * sum(lengths) // dist.world)
        for _ in range(cfg.epochs):
            if stopped:
                break
            for mb in minibatches(
                exp.samples, cfg.minibatch_tokens, generator=gen, share_prefix=self.share_prefix
            ):
                self.optimizer.zero_grad(set_to_none=True)
                mb_tokens = exp.mask[mb].sum().clamp_min(1)
                drift = torch.zeros(
                    1, device=dev
                )  # this minibatch's sum of k3 KL(old || current) over tokens
                split = [
                    micro_batches(exp.samples, part, cfg.micro_tokens, self.share_prefix)
                    for part in split_tokens(mb, lengths, dist.world)
                ]
                micro = split[dist.rank]
                # every rank runs as many forward/backward passes (the collectives pair up): a rank with fewer
                # micro-batches pads with zero-loss passes
                steps = max(len(m) for m in split)
                for k in range(steps):
                    idx = micro[k] if k < len(micro) else mb[:1]
                    weight = float(dist.world) if k < len(micro) else 0.0
                    batch = pack_samples([exp.samples[i] for i in idx], share_prefix=self.share_prefix).to(
                        dev
                    )
                    t, rows = batch.mask.shape[1], torch.tensor(idx, device=dev)
                    old, adv, ret = (x[rows, :t] for x in (exp.old_logp, exp.advantages, exp.returns))
                    old_v = exp.old_values[rows, :t] if exp.old_values is not None else None
                    with no_sync(self.model, last=k == steps - 1):
                        with self.precision():
                            out = self.model(batch, entropy=True)
                        pg, _ = pg_loss(out.logp, old, adv, batch.mask, clip=cfg.clip)
                        with torch.no_grad():
                            r = (out.logp - old) * batch.mask
                            drift += ((torch.expm1(r) - r) * batch.mask).sum() * (weight > 0)
                        loss = pg - cfg.ent_coef * masked_mean(out.entropy, batch.mask)
                        if kl_coef:
                            ref = exp.ref_logp[rows, :t]
                            kl_term = masked_mean(
                                kl_penalty(out.logp, ref, cfg.kl_loss_estimator), batch.mask
                            )
                            loss = loss + kl_coef * kl_term
                            if weight:
                                meters.add(None, "kl_loss", float(kl_term.detach()), float(batch.mask.sum()))
                        if old_v is not None:
                            loss = (
                                loss
                                + cfg.vf_coef
                                * value_loss(
                                    out.values,
                                    old_v,
                                    ret,
                                    batch.mask,
                                    clip=cfg.value_clip,
                                    kind=cfg.value_loss,
                                )[0]
                            )
                        # token mean over the whole minibatch (all ranks' shares)
                        (loss * batch.mask.sum() / mb_tokens * weight).backward()
                    if weight:
                        role_stats(meters, batch, out, old, adv, ret, old_v, cfg, pg_loss)
                        bar.update(sum(lengths[i] for i in idx))
                dist.sum_(drift)
                if cfg.target_kl is not None and float(drift) / float(mb_tokens) > 1.5 * cfg.target_kl:
                    # the policy already moved this far from the rollout's: no more steps this iteration
                    meters.add(None, "early_stop_kl", float(drift) / float(mb_tokens))
                    stopped = True
                    break
                norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                self.optimizer.step()
                steps_taken += 1
                if hasattr(norm, "full_tensor"):  # FSDP: a DTensor
                    norm = norm.full_tensor()
                meters.add(None, "grad_norm", float(norm))
        bar.close()
        meters.add(None, "optimizer_steps", steps_taken)
        self.ac.eval()
        self.scheduler.step()
        return merge_meters(meters, dist)
