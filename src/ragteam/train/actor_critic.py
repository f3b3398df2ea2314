"""The policy, its centralized critic and the frozen reference, scoring packed samples token by token.

One policy plays every role, so one critic serves them all (C-3PO's and MMOA-RAG's centralized value
function): `V(s)` reads the same prompt the acting role read, whichever role it was. As in both papers the
critic starts from the policy's own weights with the language-model head replaced by a scalar value head
(a separate network; `shared=True` puts the head on the policy's trunk instead, half the memory and compute,
at the price of value gradients reaching the policy's weights).

Only completion positions are scored: the trunk runs over the packed rows, the hidden states that predict
completion tokens are gathered into [B, T], and the vocabulary head (49k words for SmolLM2) runs on those
alone. Prompts are often 10x longer than the acts, so this is most of the saving over scoring every position.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ragteam.llm.sampling import mask_logits, whitelist_mask
from ragteam.train.experience import Packed
from ragteam.train.losses import entropy_from_logits, token_logprobs

__all__ = [
    "ActorCritic",
    "Scored",
    "completion_logprobs",
    "full_model",
    "is_lora",
    "trunk_mask",
    "MASKED_ATTENTION",
    "attention_of",
]

VALUE_HEAD = "value_head.pt"
CRITIC_ADAPTER = "trunk_adapter.pt"  # a LoRA critic trunk: its adapter weights (the base is the init model)


def is_lora(model: nn.Module) -> bool:
    """A peft model: an adapter trains on top of frozen base weights."""
    return hasattr(model, "peft_config")


def full_model(model: nn.Module) -> nn.Module:
    """The model as one plain model: itself, or for a LoRA (peft) model a copy with its adapter merged in (for
    whatever loads full weights: a model folder, a server; the copy costs one model's memory)."""
    return copy.deepcopy(model).merge_and_unload() if is_lora(model) else model


@dataclass
class Scored:
    """Per-token outputs on a batch's [B, T] layout (0 where the batch mask is False)."""

    logp: Tensor  # log pi(token | prefix), at the temperature the sample was drawn at
    values: Tensor | None = None  # V(state before the token)
    entropy: Tensor | None = None  # entropy of the next-token distribution


def _gathered_hidden(trunk: nn.Module, batch: Packed) -> Tensor:
    """Final hidden states at the positions that predict completion tokens: [B, T, H]."""
    extra = {}
    if batch.attention_mask is not None:  # shared prompts: the packing's own mask, not segments of positions
        extra["attention_mask"] = trunk_mask(trunk, batch.attention_mask)
    hidden = trunk(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False, **extra)
    return hidden.last_hidden_state[batch.rows, batch.cols]


MASKED_ATTENTION = ("sdpa", "eager")
"""The attention implementations that take a packed batch's own 4D mask (`trunk_mask`); flash does not."""


def attention_of(model: nn.Module) -> str:
    """The attention implementation a transformers model was loaded with (sdpa when it does not say)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"


def trunk_mask(trunk: nn.Module, allowed: Tensor) -> Tensor:
    """A packed batch's [R, 1, L, L] bool mask (True: may attend) in the form the trunk's attention takes:
    transformers passes a 4D mask through unchanged, sdpa reads a bool mask, eager adds its mask to the
    scores (0 where allowed, the dtype's minimum elsewhere). Flash attention takes no such mask."""
    impl = attention_of(trunk)
    if impl == "sdpa":
        return allowed
    if impl == "eager":
        dtype = next(trunk.parameters()).dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
            ~allowed, torch.finfo(dtype).min
        )
    raise ValueError(f"--ppo.share-prefix needs {' or '.join(MASKED_ATTENTION)} attention, not {impl}")


def completion_logprobs(
    model: nn.Module, batch: Packed, entropy: bool = False
) -> tuple[Tensor, Tensor | None, Tensor]:
    """(logp [B, T], entropy [B, T] or None, hidden [B, T, H]) of a causal LM on the batch's completions.

    A constrained sample (`batch.allowed`) is scored under its token whitelist, as it was decoded: the logits
    of every other token are masked before the softmax (its log-probs and entropy are the masked policy's)."""
    h = _gathered_hidden(model.get_decoder(), batch)
    logits = model.get_output_embeddings()(h).float()  # the softmax in float32, whatever the matmul ran in
    if bool((batch.temperature != 1).any()):  # scored as sampled: pi_T = softmax(z / T)
        logits = logits / batch.temperature.to(logits.dtype).clamp_min(1e-4).view(-1, 1, 1)
    if batch.allowed is not None:  # constrained acts: the whitelist they were sampled under
        logits = mask_logits(logits, whitelist_mask(batch.allowed, logits.shape[-1])[:, None, :])
    logp = token_logprobs(logits, batch.completion_ids) * batch.mask
    ent = entropy_from_logits(logits) * batch.mask if entropy else None
    return logp, ent, h


class ActorCritic(nn.Module):
    """The trained pair: `policy` (a causal LM) and the critic (`critic_trunk` + `value_head`, or the head on
    the policy's trunk when `critic_trunk` is None)."""

    def __init__(
        self, policy: nn.Module, critic_trunk: nn.Module | None, value_head: nn.Linear | None
    ) -> None:
        super().__init__()
        self.policy = policy
        self.critic_trunk = critic_trunk
        self.value_head = value_head

    @property
    def has_critic(self) -> bool:
        return self.value_head is not None

    @property
    def shared(self) -> bool:
        return self.has_critic and self.critic_trunk is None

    @classmethod
    def from_policy(cls, policy: nn.Module, shared: bool = False, value_model: bool = True) -> ActorCritic:
        """Critic initialised from the policy: a copy of its trunk (or the trunk itself) and a zero value
        head, so every state is worth 0 before the first update. `value_model=False`: the policy alone (a
        critic-free estimator: no value head, no second trunk, no value pass)."""
        if not value_model:
            return cls(policy, None, None)
        trunk = None if shared else copy.deepcopy(policy.get_decoder())
        hidden = policy.config.hidden_size
        head = nn.Linear(hidden, 1)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        head.to(device=next(policy.parameters()).device, dtype=next(policy.parameters()).dtype)
        return cls(policy, trunk, head)

    def forward(self, batch: Packed, entropy: bool = False) -> Scored:
        logp, ent, h = completion_logprobs(self.policy, batch, entropy=entropy)
        if self.value_head is None:
            return Scored(logp=logp, entropy=ent)
        if self.critic_trunk is not None:
            h = _gathered_hidden(self.critic_trunk, batch)
        values = self.value_head(h).squeeze(-1).float() * batch.mask
        return Scored(logp=logp, values=values, entropy=ent)

    @property
    def lora(self) -> bool:
        """The policy is a peft model: its adapter trains, its base weights stay frozen."""
        return is_lora(self.policy)

    def reference_logprobs(self, batch: Packed) -> Tensor:
        """log pi_ref [B, T] of a LoRA policy: the same model with its adapter switched off."""
        with self.policy.disable_adapter():
            return completion_logprobs(self.policy, batch)[0]

    # ---- saving ----------------------------------------------------------------------------------------

    def save(self, out: str | Path, tokenizer=None, merged: bool = True) -> None:
        """`out/` the policy (a model folder: `--policy.model OUT`), `out/critic/` the critic. A LoRA policy
        writes its adapter to `out/adapter/` (`--policy.lora OUT/adapter`) and, with `merged`, the model with
        the adapter merged into it to `out/` (checkpoints skip that: the adapter is what resuming needs);
        its critic trunk writes only its own adapter's weights."""
        out = Path(out)
        if self.lora:
            self.policy.save_pretrained(out / "adapter")
            if merged:
                full_model(self.policy).save_pretrained(out)
        else:
            self.policy.save_pretrained(out)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        if self.value_head is None:
            return
        critic = out / "critic"
        critic.mkdir(parents=True, exist_ok=True)
        if self.critic_trunk is not None and self.lora:
            adapter = {k: v for k, v in self.critic_trunk.state_dict().items() if "lora_" in k}
            torch.save(adapter, critic / CRITIC_ADAPTER)
        elif self.critic_trunk is not None:
            self.critic_trunk.save_pretrained(critic)
        torch.save(self.value_head.state_dict(), critic / VALUE_HEAD)

    def load_critic(self, folder: str | Path) -> None:
        """Load the critic saved by `save` (its trunk weights and value head) into this module."""
        from ragteam.llm.local import read_weights

        if self.value_head is None:
            return
        critic = Path(folder) / "critic"
        if self.critic_trunk is not None and self.lora:
            adapter = torch.load(critic / CRITIC_ADAPTER, map_location="cpu")
            missing, unexpected = self.critic_trunk.load_state_dict(adapter, strict=False)
            if unexpected or any("lora_" in k for k in missing):
                raise ValueError(
                    f"{critic / CRITIC_ADAPTER}: not this critic's adapter ({unexpected or missing})"
                )
        elif self.critic_trunk is not None:
            self.critic_trunk.load_state_dict(read_weights(critic))
        self.value_head.load_state_dict(torch.load(critic / VALUE_HEAD, map_location="cpu"))
