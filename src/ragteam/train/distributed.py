"""Data-parallel PPO under torchrun: which rank does what, and the few collectives it needs.

    torchrun --nproc_per_node 2 -m ragteam.cli.main train ppo ...        # gloo on CPU, nccl on GPUs

Every rank holds the whole policy, critic and reference (DDP; `--ppo.parallel fsdp` shards them instead, see
`wrap`). Per iteration:

- rollout and evaluation: each rank plays a contiguous share of the questions (`share`); the episodes are
  gathered in question order on every rank (`gather_shares`), so credit and the minibatch split, which
  depend only on the episodes and the seed, are the same everywhere;
- advantages: each rank scores every world-th micro-batch and the per-token tensors are summed over ranks
  (each row is filled by one rank, zeros elsewhere);
- update: each rank takes a token-balanced share of every minibatch (`split_tokens`); the loss is scaled so
  that the all-reduced gradient is the token mean over the whole minibatch, exactly as one process computes
  it; gradient clipping and the optimizer step then run on identical gradients, so the ranks' weights never
  diverge;
- rank 0 alone writes the output folder (config, checkpoints, log, TensorBoard, the final model).

One process (no torchrun) is `SINGLE`: every helper is then the identity.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ragteam.rollout.distributed import shares

__all__ = ["SINGLE", "Dist", "from_env", "gather_shares", "merge_meters", "share", "split_tokens", "wrap"]


@dataclass(frozen=True)
class Dist:
    """This process's place in the job: rank, world size, local rank (its GPU on a node)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def on(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.on:
            torch.distributed.barrier()

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (pickled; for episodes and statistics, not tensors)."""
        if not self.on:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def sum_(self, *tensors: torch.Tensor) -> None:
        """Sum each tensor over the ranks, in place."""
        if self.on:
            for t in tensors:
                torch.distributed.all_reduce(t)


SINGLE = Dist()


def from_env(device: torch.device) -> Dist:
    """The job torchrun started (RANK, WORLD_SIZE, LOCAL_RANK): joins its process group (gloo on CPU, nccl
    on CUDA) once; SINGLE without torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return SINGLE
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(rank, world, local)


def rank_device(device: torch.device, dist: Dist) -> torch.device:
    """The rank's own GPU (`cuda:LOCAL_RANK`) under torchrun; `device` otherwise."""
    if device.type == "cuda" and dist.on:
        torch.cuda.set_device(dist.local_rank)
        return torch.device("cuda", dist.local_rank)
    return device


def share(items: Sequence[Any], dist: Dist) -> list[Any]:
    """This rank's contiguous share of `items` (the same split as the Ray rollout workers')."""
    return [items[i] for i in shares(len(items), dist.world)[dist.rank]]


def gather_shares(mine: list[Any], dist: Dist) -> list[Any]:
    """Every rank's share concatenated in rank order: the whole list, in its original order, on every rank."""
    return [x for part in dist.all_gather(mine) for x in part]


def split_tokens(idx: Sequence[int], lengths: Sequence[int], parts: int) -> list[list[int]]:
    """`idx` dealt into `parts` shares of about equal tokens (longest first, each to the lightest share);
    each share keeps the order of `idx`. A share may be empty when there are fewer samples than parts."""
    load = [0] * parts
    owner: dict[int, int] = {}
    for i in sorted(idx, key=lambda i: (-lengths[i], i)):
        k = min(range(parts), key=lambda p: (load[p], p))
        owner[i] = k
        load[k] += lengths[i]
    return [[i for i in idx if owner[i] == k] for k in range(parts)]


def merge_meters(meters: Any, dist: Dist) -> Any:
    """The ranks' `RoleMeters` combined into one (weighted sums add up), on every rank."""
    if not dist.on:
        return meters
    from ragteam.train.meters import RoleMeters

    merged = RoleMeters()
    for m in dist.all_gather(meters):
        for target, source in [(merged.all, m.all)] + [(merged.roles[r], s) for r, s in m.roles.items()]:
            for name, total in source._sum.items():
                target._sum[name] += total
                target._weight[name] += source._weight[name]
    return merged


def wrap(module: torch.nn.Module, dist: Dist, parallel: str) -> torch.nn.Module:
    """The module the update runs through: itself (one process), DDP (gradients all-reduced in backward),
    or FSDP2 (`fully_shard`: each decoder layer's parameters, gradients and optimizer state sharded
    over the ranks, gathered layer by layer for its forward and backward)."""
    if not dist.on:
        return module
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [dist.local_rank] if next(module.parameters()).is_cuda else None
        return DistributedDataParallel(module, device_ids=ids)
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in _decoder_layers(module):
            fully_shard(layer)
        fully_shard(module)
        return module
    raise ValueError(f"parallel must be ddp or fsdp, got {parallel!r}")


def _decoder_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of every trunk in `module` (`model.layers` of a llama-style decoder)."""
    out = []
    for name, child in module.named_modules():
        if name.endswith("layers") and isinstance(child, torch.nn.ModuleList):
            out.extend(child)
    return out


def no_sync(model: torch.nn.Module, last: bool):
    """DDP's `no_sync()` for every micro-batch of a minibatch but the last (one all-reduce per step)."""
    from contextlib import nullcontext

    sync_off = getattr(model, "no_sync", None)
    return nullcontext() if last or sync_off is None else sync_off()


# ---- FSDP: full weights out of sharded modules -------------------------------------------------------------


def sharded(module: torch.nn.Module) -> bool:
    """Whether FSDP sharded this module's parameters (they are DTensors)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def full_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The module's state dict with every sharded tensor gathered whole (a collective under FSDP: every rank
    must call it, in the same order); a plain module's own state dict otherwise."""
    from torch.distributed.tensor import DTensor

    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach() for k, v in module.state_dict().items()
    }


def save_actor_critic(ac: Any, out: Any, tokenizer: Any, dist: Dist, merged: bool = True) -> None:
    """`ac.save(out)` by rank 0; under FSDP every rank first helps gather the full weights, and rank 0
    writes the same layout `ActorCritic.save` does (policy folder, `critic/` trunk and value head).
    `merged=False`: a LoRA policy writes its adapter alone (checkpoints)."""
    from pathlib import Path

    from ragteam.train.actor_critic import VALUE_HEAD

    if not sharded(ac):
        if dist.main:
            ac.save(out, tokenizer, merged=merged)
        return
    state = full_state_dict(ac)
    if not dist.main:
        return
    out = Path(out)

    # a tied weight (SmolLM2's output head is its input embedding) is saved once, as save_pretrained does
    tied = {n for n, _ in ac.named_parameters(remove_duplicate=False)} - {n for n, _ in ac.named_parameters()}

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v.cpu() for k, v in state.items() if k.startswith(prefix) and k not in tied}

    ac.policy.save_pretrained(out, state_dict=part("policy."))
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    if ac.value_head is None:  # a critic-free estimator: no critic to write
        return
    critic = out / "critic"
    critic.mkdir(parents=True, exist_ok=True)
    if ac.critic_trunk is not None:
        ac.critic_trunk.save_pretrained(critic, state_dict=part("critic_trunk."))
    torch.save(part("value_head."), critic / VALUE_HEAD)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """What a checkpoint keeps of the optimizer: its own state dict, or under FSDP the full (unsharded)
    state keyed by parameter names, gathered on rank 0 (None on the other ranks; every rank must call)."""
    if not sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    full = get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return {"fsdp_full": full} if full else None


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]
) -> None:
    """Restore `optimizer_state`'s output (the same kind of run: sharded or not)."""
    if not sharded(model):
        if "fsdp_full" in saved:
            raise ValueError("this checkpoint was written by an FSDP run: resume it with --ppo.parallel fsdp")
        optimizer.load_state_dict(saved)
        return
    if "fsdp_full" not in saved:
        raise ValueError("this checkpoint was written without FSDP: resume it with --ppo.parallel ddp")
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(
        model, optimizer, optim_state_dict=saved["fsdp_full"], options=StateDictOptions(full_state_dict=True)
    )
