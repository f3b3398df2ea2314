"""PPO's learning phases (`train/ppo.py` runs them in its loop): 3, `advantages`, the scoring pass without
gradients and the advantage estimator; 4, `update`, the PPO epochs. Kept apart from the loop so that each
reads whole: what goes into an advantage (token rewards, the KL where the estimator puts it, the groups,
episodes and leaf trajectories it compares, the normalisation) and what goes into the loss (the clipped
surrogate, the value loss, the entropy bonus, the KL term of the critic-free estimators).
"""

from __future__ import annotations

from functools import partial

import torch

from ragteam.train.actor_critic import completion_logprobs
from ragteam.train.advantages import get_advantage, normalize, resolved
from ragteam.train.constrained import mask_structured, stop_ids, text_ids
from ragteam.train.distributed import merge_meters, no_sync, sharded, split_tokens
from ragteam.train.experience import Sample, micro_batches, minibatches, pack_samples
from ragteam.train.groups import GroupIds, group_ids
from ragteam.train.losses import get_policy_loss, kl_penalty, masked_mean, token_rewards, value_loss
from ragteam.train.meters import RoleMeters
from ragteam.train.ppo_log import logprob_drift, role_stats
from ragteam.train.ppo_run import Experience, Trainer

__all__ = ["advantages", "kl_loss_coef", "phase_bar", "update"]


def phase_bar(trainer: Trainer, phase: str, tokens: int):
    """A progress bar over a phase's tokens (prompt + completion), its rate in tokens/s: the advantage pass
    and the update take minutes on CPU (SmolLM2: 148 s and 571 s), where a silent terminal looks hung. Shown
    on the main process under `--progress`, as the rollout's bar is (its seconds are also on the iteration's
    line)."""
    from tqdm.auto import tqdm

    on = trainer.cfg.progress and trainer.dist.main
    return tqdm(total=tokens, desc=f"ppo {phase}", unit="tok", unit_scale=True, disable=not on)


@torch.no_grad()
def advantages(trainer: Trainer, samples: list[Sample], ids: GroupIds | None = None) -> Experience:
    """Phase 3: old log-probs (and values) under the current weights, reference log-probs, token rewards,
    then the configured estimator over the samples' groups, episodes and leaves (`ids`, from `trained`;
    computed when not given) and the configured normalisation. The token rewards hold -beta * KL only where
    the KL goes in the reward (`--ppo.kl-in`, by default the estimator's: gae and reinforce_pp); elsewhere
    the update adds beta * KL to the loss."""
    cfg, dev = trainer.cfg.ppo, trainer.device
    critic = trainer.ac.has_critic
    # a reply decoded under a server's grammar is scored under the whitelist it spells
    mask_structured(
        samples, partial(text_ids, trainer.tokenizer), stop_ids(trainer.tokenizer, trainer.ac.policy)
    )
    n, longest = len(samples), max(len(s.completion_ids) for s in samples)
    old_logp, ref_logp, values = (torch.zeros(n, longest, device=dev) for _ in range(3))
    mask = torch.zeros(n, longest, dtype=torch.bool, device=dev)
    dist = trainer.dist
    every = micro_batches(samples, range(n), cfg.micro_tokens, trainer.share_prefix)
    mine = every[dist.rank :: dist.world]  # torchrun: every world-th micro-batch; the others score the rest
    # FSDP gathers weights inside each forward: every rank runs as many (one scores a batch for nothing)
    steps = -(-len(every) // dist.world) if sharded(trainer.ac) else len(mine)
    bar = phase_bar(trainer, "advantages", sum(samples[i].length for idx in mine for i in idx))
    for k in range(steps):
        idx = mine[k] if k < len(mine) else None
        batch = pack_samples([samples[i] for i in idx or every[0]], share_prefix=trainer.share_prefix).to(dev)
        t = batch.mask.shape[1]
        with trainer.precision():
            scored = trainer.ac(batch)
            if idx is None:
                continue
            ref = (
                completion_logprobs(trainer.ref, batch)[0]
                if trainer.ref is not None
                else trainer.ac.reference_logprobs(batch)
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
    rewards = token_rewards(scores, kl, mask, trainer.kl.beta if in_reward else 0.0)
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
    return Experience(samples, mask, old_logp, ref_logp, values if critic else None, kl, adv, returns, drift)


def kl_loss_coef(trainer: Trainer) -> float:
    """The KL coefficient of the loss term: the controller's beta where the KL goes in the loss
    (`--ppo.kl-in`, resolved for the estimator), 0 where it sits in the reward (it is paid there)."""
    cfg = trainer.cfg.ppo
    return trainer.kl.beta if resolved(cfg.kl_in, get_advantage(cfg.advantage), "kl_in") == "loss" else 0.0


def update(trainer: Trainer, exp: Experience, iteration: int) -> RoleMeters:
    """Phase 4: PPO epochs over shuffled minibatches; returns token-weighted statistics, overall and per role.
    With `--ppo.target-kl`, the update stops before a step once a minibatch's KL(old || current) per token
    passes 1.5 x the target (as Stable-Baselines3 does): Adam moves every weight by about the learning rate
    whatever the batch, so on a few samples one step can already move the policy a long way.

    Under torchrun each rank takes a token-balanced share of every minibatch; its loss is scaled by the
    world size because DDP averages the ranks' gradients, so the gradient is the token mean over the whole
    minibatch, as in one process (train/distributed.py).

    Where the KL goes in the loss (`--ppo.kl-in loss`, the critic-free estimators' default: DeepSeekMath's
    GRPO), the loss adds beta * the token mean of `--ppo.kl-loss-estimator` (k3) of the current policy
    against the reference, with its gradient; beta is the KL controller's (`trainer.kl`: fixed, adaptive or
    annealed), as it would scale the in-reward penalty."""
    cfg, dev, dist = trainer.cfg.ppo, trainer.device, trainer.dist
    pg_loss = get_policy_loss(cfg.loss)
    kl_coef = kl_loss_coef(trainer)
    meters = RoleMeters()
    gen = torch.Generator().manual_seed(trainer.cfg.seed * 1_000_003 + iteration)
    params = [p for g in trainer.optimizer.param_groups for p in g["params"]]
    lengths = [s.length for s in exp.samples]
    if cfg.gradient_checkpointing:
        trainer.ac.policy.train()
    steps_taken, stopped = 0, False
    bar = phase_bar(trainer, "update", cfg.epochs * sum(lengths) // dist.world)
    for _ in range(cfg.epochs):
        if stopped:
            break
        for mb in minibatches(
            exp.samples, cfg.minibatch_tokens, generator=gen, share_prefix=trainer.share_prefix
        ):
            trainer.optimizer.zero_grad(set_to_none=True)
            mb_tokens = exp.mask[mb].sum().clamp_min(1)
            drift = torch.zeros(1, device=dev)  # this minibatch's sum of k3 KL(old || current) over tokens
            split = [
                micro_batches(exp.samples, part, cfg.micro_tokens, trainer.share_prefix)
                for part in split_tokens(mb, lengths, dist.world)
            ]
            micro = split[dist.rank]
            # every rank runs as many forward/backward passes (the collectives pair up): a rank with fewer
            # micro-batches pads with zero-loss passes
            steps = max(len(m) for m in split)
            for k in range(steps):
                idx = micro[k] if k < len(micro) else mb[:1]
                weight = float(dist.world) if k < len(micro) else 0.0
                batch = pack_samples([exp.samples[i] for i in idx], share_prefix=trainer.share_prefix).to(dev)
                t, rows = batch.mask.shape[1], torch.tensor(idx, device=dev)
                old, adv, ret = (x[rows, :t] for x in (exp.old_logp, exp.advantages, exp.returns))
                old_v = exp.old_values[rows, :t] if exp.old_values is not None else None
                with no_sync(trainer.model, last=k == steps - 1):
                    with trainer.precision():
                        out = trainer.model(batch, entropy=True)
                    pg, _ = pg_loss(out.logp, old, adv, batch.mask, clip=cfg.clip)
                    with torch.no_grad():
                        r = (out.logp - old) * batch.mask
                        drift += ((torch.expm1(r) - r) * batch.mask).sum() * (weight > 0)
                    loss = pg - cfg.ent_coef * masked_mean(out.entropy, batch.mask)
                    if kl_coef:
                        ref = exp.ref_logp[rows, :t]
                        kl_term = masked_mean(kl_penalty(out.logp, ref, cfg.kl_loss_estimator), batch.mask)
                        loss = loss + kl_coef * kl_term
                        if weight:
                            meters.add(None, "kl_loss", float(kl_term.detach()), float(batch.mask.sum()))
                    if old_v is not None:
                        loss = (
                            loss
                            + cfg.vf_coef
                            * value_loss(
                                out.values, old_v, ret, batch.mask, clip=cfg.value_clip, kind=cfg.value_loss
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
            trainer.optimizer.step()
            steps_taken += 1
            if hasattr(norm, "full_tensor"):  # FSDP: a DTensor
                norm = norm.full_tensor()
            meters.add(None, "grad_norm", float(norm))
    bar.close()
    meters.add(None, "optimizer_steps", steps_taken)
    trainer.ac.eval()
    trainer.scheduler.step()
    return merge_meters(meters, dist)
