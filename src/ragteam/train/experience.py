"""From credited episode trees to training tensors: one `Sample` per policy node, packed into rows.

A PPO sample is one act of one role: the prompt the policy saw (observations, retrieved documents and all)
and the completion it produced. Only the completion is trained; the prompt is context. The node's credit
(`ragteam.credit`) is its sequence-level reward, placed at its last completion token by `token_rewards`.

Packing: a forward batch's samples are laid end to end in rows no wider than its longest sample, with
position ids restarting at 0 for each sample (transformers then keeps attention within each sample). Short
acts share a row; long ones get a row each. Why not wider rows: on CPU, attention within a packed row runs
over the whole row under a block mask, so a row of four 800-token samples pays 4x the attention of four
rows; the rows' width is what padding is traded against, and sorting a minibatch by length
(`micro_batches`) keeps that padding small. Every per-token quantity the losses need is then gathered back
into a [B, T] layout, B samples by T = the longest completion, with `mask` marking real completion tokens.
The losses in `train/losses.py` work on that layout unchanged, so GAE runs per sample along its own
completion.

Shared prompts (`--ppo.share-prefix`): under a group estimator (`--rollout.group-size K`) the K episodes' first
acts share one prompt, and a tree fork's siblings share their parent's; RAG prompts are ~20x longer than the
acts. With `share_prefix` such samples are packed as one segment, the prompt once and then each completion
(position ids continuing from the prompt's length), under a 4D attention mask that keeps each completion to
the prompt and its own tokens: the same scores as unshared, for about 1/K of the prompt's compute.
`micro_batches` and `minibatches` then keep a prompt's samples in one batch.

Constrained acts (MMOA-RAG's Selector, `ragteam.llm.constraint`): a completion the backend decoded under a
token whitelist (`Completion.constraint["allowed_ids"]`) is scored under the same whitelist, so the trainer's
log-probs are those of the masked policy that sampled it (`Sample.allowed_ids`, `Packed.allowed`; the
scorer masks the logits, `ragteam.train.actor_critic.completion_logprobs`). A completion constrained by a
server's grammar without its whitelist (vLLM, SGLang: their log-probs are the raw model's) is scored under
the whitelist its regex spells (`constraint.whitelist_texts`), tokenized by the trainer's tokenizer
(`train/constrained.py`): it was sampled from the constrained policy, so its old and new log-probs are those of
the masked one too (only the rollout-drift statistic, which compares with the server's raw log-probs, sees
the difference).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ragteam.credit import CreditFn, leaf_outcomes
from ragteam.metrics.rewards import RewardFn, for_question
from ragteam.rollout.groups import group_of
from ragteam.rollout.tree import Episode

__all__ = [
    "Packed",
    "Sample",
    "micro_batches",
    "minibatches",
    "pack_samples",
    "packed_tokens",
    "prompt_groups",
    "samples_from_episodes",
    "shared_tokens",
]


@dataclass
class Sample:
    """One trained act: a policy node with its prompt and completion ids, rollout log-probs and credit."""

    episode: str
    node: int
    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float
    rollout_logprobs: list[float] | None = None  # as recorded by the backend that sampled it
    invalid: bool = False  # the parser could not read the act (a fallback was taken)
    kind: str = ""  # the parsed action kind (C-3PO's strategy for the router)
    cut: bool = False  # max tokens cut the completion
    group: str = ""  # the question group: episodes sampled for one question (--rollout.group-size)
    parent: int | None = None  # its parent node: acts with one parent in one episode are siblings (a fork)
    temperature: float = 1.0  # the temperature it was sampled at (log-probs are scored at it)
    allowed_ids: list[int] | None = None  # the token whitelist it was decoded under (None: unconstrained)
    outcomes: dict[int, float] | None = None  # the answer leaves below it: leaf node id -> reward (Tree-GRPO)
    constraint: dict | None = None  # what constrained its decoding (`Completion.constraint`), None: nothing

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def samples_from_episodes(
    episodes: Iterable[Episode], credit: CreditFn, reward: RewardFn, max_tokens: int | None = None
) -> tuple[list[Sample], dict[str, int]]:
    """One `Sample` per credited policy node; returns (samples, skipped counts by reason). `reward` is a
    registered reward (`metrics.rewards.get_reward`), bound to each episode's question for its credit.

    Skipped, and counted: nodes the credit function gave no reward (no answer leaf below them), nodes whose
    completion has no token ids (an HTTP backend that did not return them), empty completions, and samples
    longer than `max_tokens` (`too_long`). The trainer passes `--ppo.max-sample-tokens`, by default the
    rollout's own prompt + act limit (`ppo_config.sample_token_limit`), so `too_long` counts only acts
    over a limit the user set below what the rollout makes.
    """
    samples: list[Sample] = []
    skipped: dict[str, int] = {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for ep in episodes:
        worth = for_question(reward, ep.question)
        credited = credit(ep, worth)
        below = leaf_outcomes(ep, worth)
        for node in ep.policy_nodes():
            if node.id not in credited:
                skip("no_credit")
                continue
            c = node.completion
            if c is None or c.prompt_ids is None or c.completion_ids is None:
                skip("no_token_ids")
                continue
            if not c.completion_ids:
                skip("empty_completion")
                continue
            s = Sample(
                episode=ep.id,
                node=node.id,
                role=node.role,
                prompt_ids=list(c.prompt_ids),
                completion_ids=list(c.completion_ids),
                reward=float(credited[node.id]),
                rollout_logprobs=list(c.logprobs) if c.logprobs is not None else None,
                invalid=node.action is not None and not node.action.valid,
                kind=node.action.kind if node.action is not None else "",
                cut=c.cut,
                group=group_of(ep.question),
                parent=node.parent,
                temperature=float((node.sampling or {}).get("temperature") or 1.0),
                allowed_ids=_allowed_ids(c.constraint, c.completion_ids),
                outcomes=below.get(node.id) if below is not None else None,
                constraint=c.constraint,
            )
            if max_tokens is not None and s.length > max_tokens:
                skip("too_long")
                continue
            samples.append(s)
    return samples, skipped


def _allowed_ids(constraint: dict | None, completion_ids: list[int]) -> list[int] | None:
    """The whitelist a completion is scored under: the one it was decoded under, with its own tokens (a
    whitelist always holds them when it masked the decoding; never a token scored at probability 0)."""
    allowed = (constraint or {}).get("allowed_ids")
    if not allowed:
        return None
    return sorted({int(i) for i in allowed} | set(completion_ids))


@dataclass
class Packed:
    """A forward batch of samples packed into rows, with the gather indices back to a [B, T] layout.

    input_ids, position_ids: [R, L] (R packed rows of L tokens; the tail of a row is padding, never read).
    rows, cols: [B, T] long; the logits that predict completion token t of sample b sit at
    (rows[b, t], cols[b, t]) (one position before the token). mask: [B, T] bool, True on real completion
    tokens. completion_ids: [B, T] long (0 where masked). temperature: [B], each sample's sampling
    temperature (its logits are divided by it before they are scored, as they were when it was sampled).
    allowed: [B, A] long, the token whitelist of each constrained sample (-1 pads; a row of -1 is
    unconstrained), or None when no sample of the batch is constrained.
    attention_mask: [R, 1, L, L] bool (True: the query may attend to the key), set only when the batch shares
    prompts (`pack_samples(share_prefix=True)`); None: the trunk's own causal mask over position-id segments.
    """

    samples: list[Sample]
    input_ids: Tensor
    position_ids: Tensor
    rows: Tensor
    cols: Tensor
    mask: Tensor
    completion_ids: Tensor
    temperature: Tensor
    allowed: Tensor | None = None
    attention_mask: Tensor | None = None

    def to(self, device: torch.device | str) -> Packed:
        return Packed(
            self.samples,
            *(t.to(device) for t in (self.input_ids, self.position_ids, self.rows, self.cols)),
            self.mask.to(device),
            self.completion_ids.to(device),
            self.temperature.to(device),
            self.allowed.to(device) if self.allowed is not None else None,
            self.attention_mask.to(device) if self.attention_mask is not None else None,
        )


def pack_samples(
    samples: Sequence[Sample], max_tokens: int | None = None, pad_id: int = 0, share_prefix: bool = False
) -> Packed:
    """Pack `samples` (in the given order) into rows of at most `max_tokens` tokens (default: the longest
    sample's length), first fit.

    Every sample must fit a row on its own (`samples_from_episodes(max_tokens=...)` drops the rest).
    `share_prefix`: samples with identical prompt ids share one copy of the prompt (`_pack_shared`); a batch
    where no prompt repeats is packed as without it (no attention mask).
    """
    if not samples:
        raise ValueError("pack_samples: no samples")
    for s in samples:
        if max_tokens is not None and s.length > max_tokens:
            raise ValueError(f"sample {s.episode}/{s.node} has {s.length} tokens, more than {max_tokens}")
    if share_prefix:
        groups = prompt_groups(samples, range(len(samples)))
        if len(groups) < len(samples):  # some prompt repeats: it runs once
            return _pack_shared(samples, groups, max_tokens, pad_id)
    if max_tokens is None:
        max_tokens = max(s.length for s in samples)
    row_of, start_of, fill = _first_fit([s.length for s in samples], max_tokens)
    ids, pos = _rows(fill, pad_id)
    rows, cols, mask, comp = _completion_layout(samples)
    for b, (s, r, start) in enumerate(zip(samples, row_of, start_of)):
        seq = s.prompt_ids + s.completion_ids
        ids[r, start : start + len(seq)] = torch.tensor(seq)
        pos[r, start : start + len(seq)] = torch.arange(len(seq))
        n, p = len(s.completion_ids), len(s.prompt_ids)
        rows[b, :n] = r
        cols[b, :n] = torch.arange(start + p - 1, start + p - 1 + n)
        mask[b, :n] = True
        comp[b, :n] = torch.tensor(s.completion_ids)
    temperature, allowed = _per_sample(samples)
    return Packed(list(samples), ids, pos, rows, cols, mask, comp, temperature, allowed)


def _first_fit(costs: Sequence[int], max_tokens: int) -> tuple[list[int], list[int], list[int]]:
    """Each item's row and start when placed in order into the first row of `max_tokens` with room (a new
    row when none has), and every row's fill."""
    row_of: list[int] = []
    start_of: list[int] = []
    fill: list[int] = []
    for n in costs:
        r = next((i for i, used in enumerate(fill) if used + n <= max_tokens), len(fill))
        if r == len(fill):
            fill.append(0)
        row_of.append(r)
        start_of.append(fill[r])
        fill[r] += n
    return row_of, start_of, fill


def _rows(fill: Sequence[int], pad_id: int) -> tuple[Tensor, Tensor]:
    """Input ids (all `pad_id`) and position ids [R, L] of rows filled to `fill`; each row's padding tail
    counts up from 0 as one more (unread) segment."""
    width = max(fill)
    ids = torch.full((len(fill), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(fill), width), dtype=torch.long)
    for r, used in enumerate(fill):
        pos[r, used:] = torch.arange(width - used)
    return ids, pos


def _completion_layout(samples: Sequence[Sample]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Empty [B, T] rows, cols, mask and completion ids, T the longest completion."""
    shape = (len(samples), max(len(s.completion_ids) for s in samples))
    zeros = [torch.zeros(shape, dtype=torch.long) for _ in range(3)]
    return zeros[0], zeros[1], torch.zeros(shape, dtype=torch.bool), zeros[2]


def _per_sample(samples: Sequence[Sample]) -> tuple[Tensor, Tensor | None]:
    """The batch's sampling temperatures [B] and token whitelists [B, A] (None: no sample constrained)."""
    temperature = torch.tensor([s.temperature for s in samples], dtype=torch.float32)
    allowed = None
    if any(s.allowed_ids for s in samples):
        allowed = torch.full((len(samples), max(len(s.allowed_ids or ()) for s in samples)), -1)
        for b, s in enumerate(samples):
            if s.allowed_ids:
                allowed[b, : len(s.allowed_ids)] = torch.tensor(s.allowed_ids)
    return temperature, allowed


# ---- shared prompts ----------------------------------------------------------------------------------------


def prompt_groups(samples: Sequence[Sample], idx: Iterable[int]) -> list[list[int]]:
    """`idx` grouped by identical prompt ids: groups in order of first appearance, members in `idx` order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in idx:
        groups.setdefault(tuple(samples[i].prompt_ids), []).append(i)
    return list(groups.values())


def shared_tokens(samples: Sequence[Sample], members: Sequence[int]) -> int:
    """What a segment of samples sharing one prompt costs a packed row: the prompt once, every completion."""
    return len(samples[members[0]].prompt_ids) + sum(len(samples[i].completion_ids) for i in members)


def packed_tokens(samples: Sequence[Sample], share_prefix: bool = False) -> int:
    """The real (unpadded) tokens a forward over `samples` runs on: every sample's prompt and completion, or
    with `share_prefix` each distinct prompt once."""
    if not share_prefix:
        return sum(s.length for s in samples)
    return sum(shared_tokens(samples, g) for g in prompt_groups(samples, range(len(samples))))


def _split_group(group: list[int], tokens: int, cost: Callable[[list[int]], int]) -> list[list[int]]:
    """`group` in consecutive parts of at most `tokens` by `cost` (a member that does not fit goes alone)."""
    parts: list[list[int]] = [[]]
    for i in group:
        if parts[-1] and cost(parts[-1] + [i]) > tokens:
            parts.append([])
        parts[-1].append(i)
    return parts


def _pack_shared(
    samples: Sequence[Sample], groups: list[list[int]], max_tokens: int | None, pad_id: int
) -> Packed:
    """`pack_samples` with shared prompts: the samples with one prompt form one segment of a row, the prompt
    once (positions 0..p-1), then each member's completion (positions p.., as if it followed the prompt
    alone). The attention mask keeps a completion to its segment's prompt and its own earlier tokens, so
    every score equals the unshared layout's; the logits predicting a member's first token sit at the
    prompt's last position. A group too big for a row is split into parts that each repeat the prompt.
    Each padding position attends to itself alone (a query that attends to nothing gives NaN under sdpa)."""

    def cost(members: list[int]) -> int:
        return shared_tokens(samples, members)

    if max_tokens is None:
        max_tokens = max(cost(g) for g in groups)
    segments = [part for g in groups for part in _split_group(g, max_tokens, cost)]
    row_of, start_of, fill = _first_fit([cost(seg) for seg in segments], max_tokens)
    ids, pos = _rows(fill, pad_id)
    width, n_rows = ids.shape[1], len(fill)
    segment = len(segments) + torch.arange(width).repeat(n_rows, 1)  # padding: a segment per position
    member = torch.full((n_rows, width), -1, dtype=torch.long)  # -1: the prompt (every member reads it)
    rows, cols, mask, comp = _completion_layout(samples)
    for k, (seg, r, start) in enumerate(zip(segments, row_of, start_of)):
        prompt = samples[seg[0]].prompt_ids
        p = len(prompt)
        ids[r, start : start + p] = torch.tensor(prompt)
        pos[r, start : start + p] = torch.arange(p)
        segment[r, start : start + cost(seg)] = k
        at = start + p
        for j, b in enumerate(seg):
            c = samples[b].completion_ids
            n = len(c)
            ids[r, at : at + n] = torch.tensor(c)
            pos[r, at : at + n] = torch.arange(p, p + n)
            member[r, at : at + n] = j
            rows[b, :n] = r
            cols[b, 0] = start + p - 1  # the prompt's last position predicts every member's first token
            cols[b, 1:n] = torch.arange(at, at + n - 1)
            mask[b, :n] = True
            comp[b, :n] = torch.tensor(c)
            at += n
    temperature, allowed = _per_sample(samples)
    attend = _segment_mask(segment, member)
    return Packed(list(samples), ids, pos, rows, cols, mask, comp, temperature, allowed, attend)


def _segment_mask(segment: Tensor, member: Tensor) -> Tensor:
    """[R, 1, L, L] bool: a query attends to earlier-or-same keys of its own segment that are the prompt
    (member -1) or its own member's tokens."""
    width = segment.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    same = segment[:, :, None] == segment[:, None, :]
    readable = (member[:, None, :] == -1) | (member[:, :, None] == member[:, None, :])
    return (causal & same & readable)[:, None]


def micro_batches(
    samples: Sequence[Sample], idx: Sequence[int], tokens: int, share_prefix: bool = False
) -> list[list[int]]:
    """Split the samples `idx` into forward batches of about `tokens` tokens each (a sample longer than that
    goes alone), longest first, so that the rows of one batch have similar lengths (little padding).

    `share_prefix`: the samples of one prompt stay together (split only when they cost more than `tokens`),
    and a group costs its prompt once (`shared_tokens`), as `pack_samples(share_prefix=True)` packs it."""
    if not share_prefix:
        return _fill(sorted(idx, key=lambda i: (-samples[i].length, i)), samples, tokens)
    groups = prompt_groups(samples, idx)
    groups.sort(key=lambda g: (-max(samples[i].length for i in g), g[0]))
    return _fill_groups(groups, samples, tokens, lambda g: shared_tokens(samples, g))


def minibatches(
    samples: Sequence[Sample],
    max_tokens: int,
    generator: torch.Generator | None = None,
    share_prefix: bool = False,
) -> list[list[int]]:
    """Split sample indices into minibatches of at most `max_tokens` tokens each, in a shuffled order
    (`generator`: seeded, so a resumed run draws the same split); None keeps the order.

    `share_prefix`: prompt groups are shuffled, not samples, and kept whole in one minibatch (split only when
    they hold more than `max_tokens`), so that its micro-batches can share their prompts. The budget still
    counts every sample's prompt: an optimizer step sees as many tokens as without sharing."""
    if not share_prefix:
        order = list(range(len(samples)))
        if generator is not None:
            order = torch.randperm(len(samples), generator=generator).tolist()
        return _fill(order, samples, max_tokens)
    groups = prompt_groups(samples, range(len(samples)))
    if generator is not None:
        groups = [groups[g] for g in torch.randperm(len(groups), generator=generator).tolist()]
    return _fill_groups(groups, samples, max_tokens, lambda g: sum(samples[i].length for i in g))


def _fill(order: Sequence[int], samples: Sequence[Sample], tokens: int) -> list[list[int]]:
    """Consecutive groups of `order` holding at most `tokens` tokens each (a longer sample goes alone)."""
    return _fill_groups([[i] for i in order], samples, tokens, lambda g: samples[g[0]].length)


def _fill_groups(
    groups: Sequence[list[int]], samples: Sequence[Sample], tokens: int, cost: Callable[[list[int]], int]
) -> list[list[int]]:
    """`_fill` over whole groups of samples, each costing `cost(group)` (a group costing more than `tokens`
    is split first, `_split_group`)."""
    out: list[list[int]] = []
    current: list[int] = []
    used = 0
    for group in groups:
        for part in _split_group(group, tokens, cost):
            n = cost(part)
            if current and used + n > tokens:
                out.append(current)
                current, used = [], 0
            current += part
            used += n
    if current:
        out.append(current)
    return out
