"""Per-token log-probabilities of given completions under a causal LM: one forward pass, no sampling.

This is the reference the local backend's returned log-probs must match, and the function PPO / DPO call
(with gradients) to score the policy's own samples.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ragteam.llm.sampling import gather_logprobs


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(completion_t | prompt, completion_<t) at temperature 1. -> (logprobs [B, Tc] float32, mask [B, Tc]).

    Runs under whatever grad mode the caller chose; padded entries of `logprobs` are 0.
    """
    device = next(model.parameters()).device
    ids, attn, pos, cmask, lp = pack_prompt_completion(prompt_ids, completion_ids, pad_id)
    ids, attn, pos, cmask = ids.to(device), attn.to(device), pos.to(device), cmask.to(device)
    tc = cmask.shape[1]
    if tc == 0:
        return torch.zeros((len(prompt_ids), 0), device=device), cmask
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False)
    logits = out.logits[:, lp - 1 : lp - 1 + tc, :]
    logp = gather_logprobs(logits, ids[:, lp : lp + tc])
    return logp * cmask, cmask
