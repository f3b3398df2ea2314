"""Per-token log-probabilities of given completions under a causal LM: one forward pass, no sampling.

This is the reference the local backend's returned log-probs must match, and the function PPO / DPO call
(with gradients) to score the policy's own samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ragteam.llm.sampling import gather_logprobs, mask_logits, whitelist_mask


def pack_prompt_completion(
    prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Layout `[left pads | prompt | completion | right pads]` per row.

    Returns input_ids [B, Lp+Tc], attention_mask [B, Lp+Tc], position_ids [B, Lp+Tc], completion_mask [B, Tc]
    and Lp (the padded prompt width): completion token t of every row sits at column Lp + t.
    """
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token")
    lp = max(len(p) for p in prompt_ids)
    tc = max((len(c) for c in completion_ids), default=0)
    b = len(prompt_ids)
    ids = torch.full((b, lp + tc), pad_id, dtype=torch.long)
    attn = torch.zeros((b, lp + tc), dtype=torch.long)
    cmask = torch.zeros((b, tc), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        ids[i, lp - len(p) : lp] = torch.tensor(list(p), dtype=torch.long)
        attn[i, lp - len(p) : lp + len(c)] = 1
        if c:
            ids[i, lp : lp + len(c)] = torch.tensor(list(c), dtype=torch.long)
            cmask[i, : len(c)] = True
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, pos, cmask, lp


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    pad_id: int,
    allowed: Sequence[Sequence[int] | None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(completion_t | prompt, completion_<t) at temperature 1. -> (logprobs [B, Tc] float32, mask [B, Tc]).

    Runs under whatever grad mode the caller chose; padded entries of `logprobs` are 0. `allowed[b]`: the
    token whitelist of a constrained row (its distribution is renormalized over those ids, as the local
    backend decoded it), None for an unconstrained one.
    """
    device = next(model.parameters()).device
    ids, attn, pos, cmask, lp = pack_prompt_completion(prompt_ids, completion_ids, pad_id)
    ids, attn, pos, cmask = ids.to(device), attn.to(device), pos.to(device), cmask.to(device)
    tc = cmask.shape[1]
    if tc == 0:
        return torch.zeros((len(prompt_ids), 0), device=device), cmask
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
    logits = out.logits[:, lp - 1 : lp - 1 + tc, :]
    if allowed is not None and any(a is not None for a in allowed):
        width = max(len(a or ()) for a in allowed)
        table = torch.full((len(allowed), max(1, width)), -1, dtype=torch.long)
        for i, a in enumerate(allowed):
            if a:
                table[i, : len(a)] = torch.tensor(list(a), dtype=torch.long)
        logits = mask_logits(logits, whitelist_mask(table.to(device), logits.shape[-1])[:, None, :])
    logp = gather_logprobs(logits, ids[:, lp : lp + tc])
    return logp * cmask, cmask


def top_logprobs(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[Sequence[int]],
    k: int,
    max_logits: int = 1 << 24,
) -> list[tuple[list[list[int]], list[list[float]]]]:
    """The `k` most likely tokens at every position of each completion of one prompt, at temperature 1.

    Returns, per completion, (ids [T][k], logprobs [T][k]), most likely first: what OpenAI's and vLLM's
    `top_logprobs` give for each generated token. Position t is predicted from the prompt and
    `completion[:t]`, as `completion_logprobs` scores it. Memory stays bounded whatever the length: the
    prompt runs once per completion keeping only its last logits, then the completion runs in pieces over
    the KV cache, at most `max_logits` logits (pieces x vocabulary) alive at a time. Call under
    `torch.inference_mode()`."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not prompt_ids:
        raise ValueError("the prompt needs at least one token")
    device = next(model.parameters()).device
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 1 << 17)
    piece = max(1, max_logits // vocab)
    out: list[tuple[list[list[int]], list[list[float]]]] = []
    for completion in completion_ids:
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []  # (log-probs [P, k], ids [P, k]) per forward
        if completion:
            seq = [*prompt_ids, *completion[:-1]]  # the inputs whose next-token predictions are wanted
            start = len(prompt_ids)
            o = model(input_ids=torch.tensor([seq[:start]], device=device), use_cache=True, logits_to_keep=1)
            parts.append(_top_k(o.logits[0, -1:], k))
            cache = o.past_key_values
            while start < len(seq):
                chunk = seq[start : start + piece]
                o = model(
                    input_ids=torch.tensor([chunk], device=device),
                    position_ids=torch.arange(start, start + len(chunk), device=device)[None],
                    past_key_values=cache,
                    use_cache=True,
                )
                parts.append(_top_k(o.logits[0], k))
                cache = o.past_key_values
                start += len(chunk)
        out.append(
            ([row for _, i in parts for row in i.tolist()], [row for v, _ in parts for row in v.tolist()])
        )
    return out


def _top_k(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The `k` largest log-probs of each row of `logits` [P, V] and their token ids, largest first."""
    return torch.log_softmax(logits.float(), dim=-1).topk(min(k, logits.shape[-1]), dim=-1)
