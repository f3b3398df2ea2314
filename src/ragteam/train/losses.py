"""PPO's losses as small pure torch functions: clipped policy and value losses, KL penalties, an
adaptive/annealed KL coefficient. (DPO and the process reward model's Bradley-Terry loss run through TRL.)

Shapes: B rows (samples), T token positions, V vocabulary. A `mask` [B, T] (bool or 0/1 float) is 1 on the
trained completion tokens and 0 on prompt, padding and observation tokens; every reduction is over mask-1
positions only. Log-probs are per token, already gathered for the sampled ids (`token_logprobs`). Scalar
losses are 0-dim tensors; stats are python floats (detached) for logging.

Policy losses are registered by name (`POLICY_LOSSES`, `--ppo.loss`) so a trainer picks one from its
config; advantage estimators live in `train/advantages.py` under the same scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "KL_KINDS",
    "POLICY_LOSSES",
    "VALUE_LOSSES",
    "KLController",
    "entropy_from_logits",
    "get_policy_loss",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "policy_loss",
    "register_policy_loss",
    "token_logprobs",
    "token_rewards",
    "value_loss",
]

POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {}
"""Policy losses by name: `(logp, old_logp, advantages, mask, **cfg) -> (loss, stats)`."""


def _registrar(registry: dict[str, Any], what: str) -> Callable[[str], Callable[[Any], Any]]:
    def register(name: str) -> Callable[[Any], Any]:
        def deco(fn: Any) -> Any:
            if name in registry:
                raise ValueError(f"{what} {name!r} is already registered")
            registry[name] = fn
            return fn

        return deco

    return register


def _getter(registry: dict[str, Any], what: str) -> Callable[[str], Any]:
    def get(name: str) -> Any:
        if name not in registry:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(sorted(registry))}")
        return registry[name]

    return get


register_policy_loss = _registrar(POLICY_LOSSES, "policy loss")
get_policy_loss = _getter(POLICY_LOSSES, "policy loss")


# ------------------------------------------------------------------------------------------ reductions


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over mask-1 positions: sum(x * mask) / sum(mask), over all positions (dim=None) or `dim`.

    x, mask: same shape (e.g. [B, T]). A float mask weights positions. All-masked -> 0, not NaN.
    """
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp_min(1e-8)
    return (x * m).sum(dim) / m.sum(dim).clamp_min(1e-8)


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise `x` [B, T] to mean 0, variance 1 over the mask-1 positions (population variance), so that
    advantages have one scale across batches; masked positions come out 0. `shift_mean=False`: rescale only.
    """
    m = mask.to(x.dtype)
    mean = masked_mean(x, m)
    var = masked_mean((x - mean) ** 2, m)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * m


# ------------------------------------------------------------------------------------------ PPO pieces


def token_logprobs(logits: Tensor, ids: Tensor) -> Tensor:
    """Log-prob of each given token: logits [B, T, V] (already aligned: position t predicts ids[:, t]),
    ids [B, T] -> [B, T]. Computed as log_softmax + gather in float32 for precision."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the next-token distribution at each position: logits [B, T, V] -> [B, T] (nats).

    H = logsumexp(z) - sum_v softmax(z)_v * z_v, stable for any logits.
    """
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)


KL_KINDS = ("k1", "k2", "k3", "abs")


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k1") -> Tensor:
    """Per-token estimate of KL(pi || ref) from tokens sampled from pi: logp, ref_logp [B, T] -> [B, T].

    With r = logp - ref_logp (log-ratio of the sampled token):
    - k1  = r: unbiased, but any sign per token and high variance (InstructGPT's penalty).
    - k2  = r^2 / 2: biased (close to KL when pi ~ ref), nonnegative, low variance.
    - k3  = exp(-r) + r - 1 = exp(ref - logp) - (ref - logp) - 1: unbiased and nonnegative (Schulman's).
    - abs = |r|: biased, nonnegative.
    Unmasked: multiply by the mask (or use `masked_mean`) to drop prompt and padding tokens.
    """
    r = logp - ref_logp
    if kind == "k1":
        return r
    if kind == "k2":
        return 0.5 * r**2
    if kind == "k3":
        return torch.exp(-r) + r - 1.0
    if kind == "abs":
        return r.abs()
    raise ValueError(f"unknown KL estimator {kind!r}; known: {', '.join(KL_KINDS)}")


def token_rewards(scores: Tensor, kl: Tensor, mask: Tensor, beta: float) -> Tensor:
    """PPO-RLHF per-token reward: -beta * kl at every mask-1 token, plus the sequence score at the last
    mask-1 token of each row (InstructGPT; MMOA-RAG eq. 16 with score = R_shared + P_i).

    scores [B], kl [B, T] (from `kl_penalty`, normally detached), mask [B, T] -> rewards [B, T], 0 where
    masked. A row with no mask-1 token gets no score.
    """
    valid = mask.bool()
    out = torch.where(valid, -beta * kl, torch.zeros_like(kl))
    pos = torch.arange(kl.shape[1], device=kl.device).expand_as(kl)
    last = torch.where(valid, pos, torch.full_like(pos, -1)).max(dim=1).values  # [B]
    has = last >= 0
    rows = torch.arange(kl.shape[0], device=kl.device)[has]
    out[rows, last[has]] += scores.to(out.dtype)[has]
    return out


@register_policy_loss("ppo")
def policy_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, clip: float = 0.2
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate, token-mean over mask-1 tokens: mean max(-A * rho, -A * clip(rho, 1-c, 1+c)),
    rho = exp(logp - old_logp). Minimising it raises the probability of positive-advantage tokens until rho
    leaves [1-c, 1+c], where the gradient stops.

    logp [B, T] (with grad), old_logp, advantages, mask [B, T] -> (loss scalar, stats): `clip_frac`, the
    share of tokens where the clipped term is the larger (no gradient), and `approx_kl`, the mean k3
    estimate of KL(old || new), nonnegative.
    """
    log_ratio = logp - old_logp
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        clip_frac = masked_mean((clipped > unclipped).float(), mask)
        approx_kl = masked_mean(torch.expm1(log_ratio) - log_ratio, mask)
    return loss, {"clip_frac": clip_frac.item(), "approx_kl": approx_kl.item()}


VALUE_LOSSES = ("clipped", "mse")
"""The value losses `value_loss` computes (`--ppo.value-loss`)."""


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float = 0.2,
    kind: str = "clipped",
) -> tuple[Tensor, dict[str, float]]:
    """The critic's loss, token-mean over mask-1 tokens.

    clipped (PPO2 / MMOA-RAG eq. 17): 0.5 * mean max((V - R)^2, (V_clip - R)^2), V_clip = old_V + clip(V -
    old_V, -c, c), so the critic cannot move further than c from its old estimate.
    mse (C-3PO eq. 10): 0.5 * mean (V - R)^2, the plain squared error; `old_values` and `clip` are unused.
    The 0.5 is the same in both (OpenRLHF's form, C-3PO's trainer), so `vf_coef` means the same for either,
    and `clipped` with a clip range wider than every error is `mse`.

    values [B, T] (with grad), old_values, returns, mask [B, T] -> (loss scalar, stats: `clip_frac`, the share
    of tokens where the clipped error is the larger; 0 for mse).
    """
    if kind not in VALUE_LOSSES:
        raise ValueError(f"unknown value loss {kind!r}; choose one of: {', '.join(VALUE_LOSSES)}")
    err = (values - returns) ** 2
    if kind == "mse":
        return 0.5 * masked_mean(err, mask), {"clip_frac": 0.0}
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    err_clipped = (v_clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
    with torch.no_grad():
        clip_frac = masked_mean((err_clipped > err).float(), mask)
    return loss, {"clip_frac": clip_frac.item()}


# ------------------------------------------------------------------------------------------ KL coefficient


@dataclass
class KLController:
    """The KL coefficient beta of `token_rewards`, updated once per PPO batch: `update(observed_kl, n_steps)`.

    Three modes, beta always clamped to [beta_min, beta_max]:
    - fixed (no `target`, no `anneal_to`): beta never changes.
    - adaptive (`target`): Ziegler et al. 2019 proportional control, e = clip(kl / target - 1, -0.2, 0.2),
      beta *= 1 + e * n_steps / horizon (beta grows when the policy drifts past the target KL).
    - linear anneal (`anneal_to`, `anneal_steps`): beta goes from its initial value to `anneal_to` over
      `anneal_steps` steps, then stays (MMOA-RAG's Table 2 gives beta 0.2 .. 0.06; its schedule is not
      published, a linear anneal is one reading). The trainer updates once after each iteration with
      `anneal_steps` = iterations - 1, so the first iteration runs at the initial beta and the last at
      `anneal_to` (`ppo.learner.anneal_steps`).
    Where beta applies: as -beta * KL in the token rewards (`token_rewards`, `--ppo.kl-in reward`) or as
    beta * KL in the loss (`--ppo.kl-in loss`, DeepSeekMath's GRPO); the controller is the same for both.
    `n_steps` counts samples (or whatever unit `horizon` and `anneal_steps` are in).
    """

    beta: float
    target: float | None = None
    horizon: int = 10_000
    beta_min: float = 0.0
    beta_max: float = math.inf
    anneal_to: float | None = None
    anneal_steps: int = 0
    steps: int = 0
    beta_start: float = field(init=False)

    def __post_init__(self) -> None:
        if self.target is not None and self.anneal_to is not None:
            raise ValueError("KLController: set `target` (adaptive) or `anneal_to` (anneal), not both")
        if self.target is not None and self.target <= 0:
            raise ValueError(f"KLController: target must be > 0, got {self.target}")
        if self.anneal_to is not None and self.anneal_steps <= 0:
            raise ValueError(f"KLController: anneal_steps must be > 0 to anneal, got {self.anneal_steps}")
        if self.horizon <= 0:
            raise ValueError(f"KLController: horizon must be > 0, got {self.horizon}")
        if self.beta_min > self.beta_max:
            raise ValueError(f"KLController: beta_min {self.beta_min} > beta_max {self.beta_max}")
        self.beta_start = self.beta
        self.beta = self._clamp(self.beta)

    def _clamp(self, beta: float) -> float:
        return min(max(beta, self.beta_min), self.beta_max)

    def current(self) -> float:
        """The scheduled beta at the current step, for the modes that have a schedule (fixed: the initial
        value; anneal: the linear point); the adaptive beta is state, returned as it is."""
        if self.anneal_to is not None:
            frac = min(1.0, self.steps / self.anneal_steps)
            return self._clamp(self.beta_start + (self.anneal_to - self.beta_start) * frac)
        if self.target is not None:
            return self.beta
        return self._clamp(self.beta_start)

    def update(self, observed_kl: float, n_steps: int) -> float:
        """Advance by `n_steps` having observed mean KL `observed_kl`; returns the new beta."""
        self.steps += n_steps
        if self.anneal_to is not None:
            self.beta = self.current()
        elif self.target is not None:
            err = min(max(observed_kl / self.target - 1.0, -0.2), 0.2)
            self.beta = self._clamp(self.beta * (1.0 + err * n_steps / self.horizon))
        return self.beta
