"""Pure functions of decoding: next-token choice (greedy, temperature, top-p), seeds, stop strings, log-probs,
and the token whitelist of a constrained reply (`whitelist_mask`, `mask_logits`)."""

from __future__ import annotations

import random

import torch

_MASK64 = (1 << 63) - 1


def sample_seed(seed: int | None, index: int) -> int:
    """Seed of the `index`-th sample of a request: a fixed mix of `(seed, index)`, or fresh entropy if None."""
    if seed is None:
        return random.SystemRandom().getrandbits(63)
    x = (int(seed) * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 31
    return (x * 0x94D049BB133111EB) & _MASK64


def next_tokens(
    logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, uniforms: torch.Tensor
) -> torch.Tensor:
    """Choose one token per row. logits [B, V] float; temperature, top_p, uniforms [B] -> token ids [B] long.

    A row with temperature 0 takes the argmax. Otherwise the row samples from softmax(logits / temperature) by
    inverting its cumulative distribution at its uniform draw in [0, 1) (so the draw, not the batch, fixes the
    sample): in vocabulary order when top_p is 1, else over the tokens sorted by probability and restricted to
    the smallest most-likely set whose mass reaches top_p (nucleus sampling).
    """
    out = logits.argmax(dim=-1)
    sampled = temperature > 0
    full = (sampled & (top_p >= 1.0)).nonzero(as_tuple=True)[0]
    nucleus = (sampled & (top_p < 1.0)).nonzero(as_tuple=True)[0]
    if len(full):
        probs = torch.softmax(logits[full] / temperature[full, None], dim=-1)
        out[full] = _invert_cdf(probs, uniforms[full])
    if len(nucleus):
        probs = torch.softmax(logits[nucleus] / temperature[nucleus, None], dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the strictly more likely tokens
        keep = before < top_p[nucleus, None]
        keep[:, 0] = True
        pick = _invert_cdf(sorted_probs * keep, uniforms[nucleus])
        pick = torch.minimum(pick, keep.sum(dim=-1) - 1)  # never a cut token through round-off at the end
        out[nucleus] = order.gather(-1, pick[:, None]).squeeze(-1)
    return out


def _invert_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i] per row. weights [B, V] >= 0, uniforms [B] -> [B] long."""
    cdf = weights.cumsum(dim=-1)
    target = uniforms[:, None].to(cdf.dtype) * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1).squeeze(-1)


def find_stop(text: str, stops: tuple[str, ...] | list[str]) -> int:
    """Index of the earliest occurrence of any non-empty stop string in `text`, or -1 when none occurs."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else -1


def gather_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] in float32. logits [..., V], tokens [...] -> [...]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def whitelist_mask(allowed: torch.Tensor, vocab: int) -> torch.Tensor:
    """The tokens each row may take: allowed [B, A] long token ids (-1 pads) -> [B, V] bool.

    A row without any id (all -1) is unconstrained: every token is allowed. Ids outside the vocabulary are
    ignored."""
    valid = (allowed >= 0) & (allowed < vocab)
    index = torch.where(valid, allowed, torch.full_like(allowed, vocab))
    mask = torch.zeros((allowed.shape[0], vocab + 1), dtype=torch.bool, device=allowed.device)
    mask.scatter_(1, index, True)
    mask = mask[:, :vocab]
    mask[~valid.any(dim=-1)] = True
    return mask


def mask_logits(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """`logits` with every token outside `allowed` (bool, broadcastable to logits) set to the dtype's lowest
    finite value: softmax gives them probability 0 and the allowed tokens their renormalized mass.

    Finite, not -inf, so that entropies stay defined (0 * -inf is NaN) and gradients reach only the allowed
    logits. The allowed logits are left exactly as they were, so log-probs computed from masked logits by the
    decoder and by the trainer agree as unmasked ones do."""
    return logits.masked_fill(~allowed, torch.finfo(logits.dtype).min)
