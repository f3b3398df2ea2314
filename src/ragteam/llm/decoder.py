"""The batched decoder under `LocalChatModel`: left-padded batches over the model's KV cache, our own loop.

Why our own loop (not `model.generate`): one batch mixes requests with different temperature / top_p /
max_tokens / stop strings / seeds / forced prefixes / token whitelists, rows that finish leave the batch, and
every token's log-probability comes out of the forward pass that ran on it. What the rows hold and how they
become completions: `ragteam.llm.local` (module docstring).

Shared prefill. Rows of a batch with identical input ids (the n samples of one request, the same prompt asked
twice) run the prompt's forward pass once; its KV cache is then copied to each row. This changes no token
(the rows would have computed the same cache, up to float round-off between batch shapes) and saves the
prompt's compute n - 1 times, which is most of the work when n continuations of a long prompt are short (tree
rollouts). `stats` counts the `prefill_rows` and `prefill_tokens` actually computed (`share_prefill=False`
turns sharing off, for benchmarks).

Seeds. Sample j of a request with seed s draws from its own generator seeded by mix(s, j), so a seeded
request gives the same samples whatever else shares its batch (up to float round-off between batch shapes).

Memory. A batch's memory grows with its rows times its longest row (prompt, forced prefix and completion:
the KV cache is left-padded to the longest). `plan_batches` cuts the rows, sorted by input length, into
batches of at most `max_batch_size` rows and, with a `max_batch_tokens` budget, at most that many padded
tokens (rows x (longest input + longest max_tokens)): a long request runs apart from the short ones instead of
multiplying their memory, and a row over the budget by itself runs alone. A batch that still runs out of
memory (`torch.OutOfMemoryError`, a RuntimeError "out of memory" / "can't allocate memory", MemoryError) is
run again row by row: the rows that had ended keep their result, the others restart from their prompt with
their generator reseeded (the same tokens), and only a row that does not fit alone fails, its request a
`ModelError` with `too_large` naming its size and the budget (a server answers it 413). `batch_hook(rows)`,
called before each batch decodes, lets tests watch the batches and simulate an out-of-memory error. The
failed attempt's memory is released before the rows are retried: its error is kept without its traceback,
whose frames would hold the attempt's cache and activations, and `gc` and `malloc_trim` run.

Prefill (chunked, and past a prefix cache): `ragteam.llm.prefill`.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ragteam.llm.base import TOO_LARGE, ModelError, Sampling
from ragteam.llm.constraint import Constraint
from ragteam.llm.prefill import PREFILL_CHUNK as PREFILL_CHUNK  # re-exported: its old home
from ragteam.llm.prefill import Prefill
from ragteam.llm.sampling import (
    find_stop,
    gather_logprobs,
    mask_logits,
    next_tokens,
    sample_seed,
    whitelist_mask,
)


def group_rows(inputs: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Group rows by identical input ids, so that each distinct prompt is prefilled once.

    Returns (first, group): `first[g]` is the first row with distinct input g and `group[i]` is row i's
    distinct input, so `inputs[first[group[i]]] == inputs[i]`.
    """
    index: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    group: list[int] = []
    for i, ids in enumerate(inputs):
        g = index.setdefault(tuple(ids), len(first))
        if g == len(first):
            first.append(i)
        group.append(g)
    return first, group


def _ungrouped(n: int) -> tuple[list[int], list[int]]:
    """`group_rows` when sharing is off: every row is its own group."""
    return list(range(n)), list(range(n))


@dataclass
class Row:
    """One sequence being decoded: sample `sample` of request `request`."""

    request: int
    sample: int
    prompt_ids: list[int]  # the rendered chat template
    inputs: list[int]  # what the prefill runs on: prompt_ids + the forced prefix's ids
    prefix: str
    forced: int  # tokens of the forced prefix (the first `forced` of `ids`)
    close_after_prefix: bool  # sample nothing: the next token is end-of-turn
    sampling: Sampling
    max_new: int  # sampled tokens at most
    generator: torch.Generator | None
    ids: list[int] = field(default_factory=list)  # completion ids: the prefix's, then the sampled ones
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    text: str | None = None
    constraint: Constraint | None = None  # the request's constraint
    allowed: list[int] | None = None  # its token whitelist (sorted ids), None when unconstrained

    def restart(self) -> None:
        """Back to the state before decoding (forced prefix only, generator reseeded): a batch that ran out
        of memory runs its unfinished rows again, alone, and they sample the same tokens."""
        self.ids = self.ids[: self.forced]
        self.logprobs, self.finish, self.text = [], None, None
        if self.generator is not None:
            self.generator.manual_seed(sample_seed(self.sampling.seed, self.sample))


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` says an allocation failed (CUDA or CPU), not that the model or the request is wrong."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


class BatchedDecoder(Prefill):
    """Decoding `Row`s in batches; mixed into `LocalChatModel`, which sets what the methods read: `model`,
    `tokenizer`, `name`, `pad_id`, `eos_ids`, `eot_id`, `share_prefill`, `max_batch_size`,
    `max_batch_tokens` (None: no token budget), `prefill_chunk` (None: one pass), `batch_hook` (None),
    `prefix_cache` (None: off) and `stats`; the prefill is `Prefill`'s."""

    model: Any
    tokenizer: Any
    name: str
    pad_id: int
    eos_ids: frozenset[int]
    eot_id: int | None
    share_prefill: bool
    max_batch_size: int
    max_batch_tokens: int | None
    prefill_chunk: int | None
    batch_hook: Callable[[list[Row]], None] | None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def plan_batches(self, rows: list[Row]) -> list[list[Row]]:
        """`rows` (sorted by input length) cut into decoding batches (module docstring, "Memory")."""
        batches: list[list[Row]] = []
        batch: list[Row] = []
        width = new = 0
        for r in rows:
            w, n = max(width, len(r.inputs)), max(new, r.max_new)
            full = len(batch) >= self.max_batch_size
            over = self.max_batch_tokens is not None and (len(batch) + 1) * (w + n) > self.max_batch_tokens
            if batch and (full or over):
                batches.append(batch)
                batch, w, n = [], len(r.inputs), r.max_new
            batch.append(r)
            width, new = w, n
        if batch:
            batches.append(batch)
        return batches

    def decode_rows(
        self,
        rows: list[Row],
        finished: Callable[[Row], None] | None = None,
        cancelled: Callable[[int], bool] | None = None,
    ) -> dict[int, ModelError]:
        """Decode every row, batch by batch (`plan_batches`); the requests that failed, by request index.

        A batch that fails otherwise than by memory fails its requests; one out of memory is run again row
        by row, so only a row that cannot fit alone fails (module docstring)."""
        failed: dict[int, ModelError] = {}
        for batch in self.plan_batches(rows):
            if cancelled is not None:
                batch = [r for r in batch if not cancelled(r.request)]
                if not batch:
                    continue
            e = self._try_decode(batch, finished, cancelled)
            if e is None:
                continue
            if not is_out_of_memory(e) or len(batch) == 1:
                for r in batch:
                    failed[r.request] = self._failure(r, e)
                continue
            _release_memory()  # the failed attempt's cache and activations, before any row is retried
            for r in batch:
                if (
                    r.finish is not None or r.request in failed
                ):  # ended before the failure, or its request failed
                    continue
                if cancelled is not None and cancelled(r.request):
                    continue
                r.restart()
                own = self._try_decode([r], finished, cancelled)
                if own is not None:  # this row's own failure
                    failed[r.request] = self._failure(r, own)
                    _release_memory()
        return failed

    def _try_decode(
        self,
        rows: list[Row],
        finished: Callable[[Row], None] | None,
        cancelled: Callable[[int], bool] | None,
    ) -> Exception | None:
        """`_decode`, its failure returned rather than raised, with no traceback: a traceback holds the frames
        of the failed forward pass and with them its KV cache and activations, which would stay allocated
        while the rows are retried one by one and take the room a row that fits alone needs."""
        try:
            self._decode(rows, finished, cancelled)
        except Exception as e:  # noqa: BLE001 - fail these requests (or find the one too large), not the others
            return _without_traceback(e)
        return None

    def _failure(self, r: Row, e: Exception) -> ModelError:
        where = f"local:{self.name}"
        if not is_out_of_memory(e):
            return ModelError(f"{type(e).__name__}: {e}", where=where)
        budget = (
            f"the batch budget is {self.max_batch_tokens} tokens"
            if self.max_batch_tokens
            else "no batch budget set"
        )
        return ModelError(
            f"the request {TOO_LARGE}: a row of {len(r.inputs)} prompt tokens and up to {r.max_new} "
            f"completion tokens ({len(r.inputs) + r.max_new} tokens) ran out of memory alone ({budget}); "
            f"send a shorter prompt or a lower max_tokens ({type(e).__name__}: {e})",
            where=where,
            too_large=True,
        )

    def _decode(
        self,
        rows: list[Row],
        finished: Callable[[Row], None] | None = None,
        cancelled: Callable[[int], bool] | None = None,
    ) -> None:
        """Decode `rows` together until each hits EOS, a stop string or its max_new tokens (fills the rows).

        `finished(row)` is called as each row ends; a row whose request is `cancelled` leaves the batch."""
        if self.batch_hook is not None:
            self.batch_hook(rows)
        dev = self.device
        b = len(rows)
        cache, logits, attn, pos = self._prefill(rows)
        allowed = self._allowed_mask(rows, logits.shape[-1])  # [B, V] bool; None: no row is constrained
        temperature = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, device=dev)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, device=dev)
        # -1: the row samples its next token; else the token it must take (end-of-turn after a bare prefix)
        forced_next = torch.tensor(
            [self.eot_id if r.close_after_prefix else -1 for r in rows], dtype=torch.long, device=dev
        )
        next_pos = pos[:, -1:] + 1
        active = list(range(b))  # rows[active[k]] is batch row k
        self.stats["batches"] += 1
        self.stats["rows"] += b
        while True:
            uniforms = torch.tensor(
                [
                    float(torch.rand((), generator=rows[k].generator)) if rows[k].generator else 0.0
                    for k in active
                ],
                dtype=torch.float32,
                device=dev,
            )
            if allowed is not None:  # constrained rows: every token outside the whitelist is masked
                logits = mask_logits(logits, allowed)
            tokens = next_tokens(logits, temperature, top_p, uniforms)
            tokens = torch.where(forced_next >= 0, forced_next, tokens)
            token_lp = gather_logprobs(logits, tokens).tolist()
            token_list = tokens.tolist()
            self.stats["generated_tokens"] += len(active)  # before a finished row is reported
            keep: list[int] = []
            for k, row_index in enumerate(active):
                row = rows[row_index]
                if not self._append(row, token_list[k], token_lp[k]):
                    if finished is not None:
                        finished(row)
                elif cancelled is not None and cancelled(row.request):
                    row.finish = "cancelled"
                else:
                    keep.append(k)
            if not keep:
                break
            if len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long, device=dev)
                cache.reorder_cache(sel)
                tokens, attn, next_pos = tokens[sel], attn[sel], next_pos[sel]
                temperature, top_p, forced_next = temperature[sel], top_p[sel], forced_next[sel]
                allowed = allowed[sel] if allowed is not None else None
                active = [active[k] for k in keep]
            attn = torch.cat([attn, attn.new_ones((len(active), 1))], dim=-1)
            out = self.model(
                input_ids=tokens[:, None],
                attention_mask=attn,
                position_ids=next_pos,
                past_key_values=cache,
                use_cache=True,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float()
            next_pos = next_pos + 1

    def _prefill(self, rows: list[Row]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the rows' inputs through the model, each distinct input once and only past its cached prefix,
        and score the forced prefixes.

        Returns the KV cache, the next-token logits [B, V] float32, the attention mask [B, cached + width] and
        the position ids [B, width], one row per row of `rows` (rows with the same inputs get copies of one
        prefilled row). `ragteam.llm.prefill`: the layout of cached and computed columns.
        """
        dev = self.device
        first, group = group_rows([r.inputs for r in rows]) if self.share_prefill else _ungrouped(len(rows))
        inputs = [rows[i].inputs for i in first]
        forced_of = [rows[i].forced for i in first]
        hits = self._prefill_hits(inputs, forced_of)
        cached = [m for m, _ in hits]
        # A row's forced prefix is the end of its inputs: its f tokens are predicted by the f columns before the
        # last. A constrained row scores its prefix under its whitelist (rows sharing an input may differ in
        # that), so each (input, whitelist) is scored once, chunk by chunk as the logits come.
        keys = {
            (g, tuple(r.allowed) if r.allowed is not None else None): r.allowed for r, g in zip(rows, group)
        }
        prefix_lp: dict[tuple[int, tuple[int, ...] | None], list[float]] = {key: [] for key in keys}

        def scorer(part: list[int], ids: torch.Tensor) -> Callable[[int, torch.Tensor], None]:
            """The scoring of the pass over the distinct inputs `part` (its suffixes' ids [P, width])."""
            width = ids.shape[1]
            mine = [
                (j, key, allowed) for j, g in enumerate(part) for key, allowed in keys.items() if key[0] == g
            ]

            def score(col: int, logits: torch.Tensor) -> None:
                """Score the prefix tokens that logits [P, k, V], the predictions of columns col .. col + k - 1,
                predict."""
                for j, key, allowed in mine:
                    lo, hi = max(col, width - 1 - forced_of[key[0]]), min(col + logits.shape[1], width - 1)
                    if lo >= hi:
                        continue
                    logits_g = logits[j, lo - col : hi - col]
                    if allowed is not None:
                        table = torch.tensor([allowed], dtype=torch.long, device=dev)
                        logits_g = mask_logits(logits_g, whitelist_mask(table, logits_g.shape[-1]))
                    prefix_lp[key] += gather_logprobs(logits_g, ids[j, lo + 1 : hi + 1]).tolist()

            return score

        passes = []
        for part in self._prefill_passes([len(x) - m for x, m in zip(inputs, cached)]):
            part_inputs = [inputs[g] for g in part]
            ids, attn, pos, past = self._layout(part_inputs, [hits[g] for g in part])
            keep = max(forced_of[g] for g in part) + 1
            cache, logits = self._prefill_forward(ids, attn, pos, keep, scorer(part, ids), past)
            if self.prefix_cache is not None:
                self._remember(part_inputs, cache, attn)
            passes.append((part, cache, logits, attn, pos))
        self.stats["prefill_rows"] += len(inputs)
        self.stats["prefill_tokens"] += sum(len(x) - m for x, m in zip(inputs, cached))
        self.stats["prompt_tokens"] += sum(len(r.inputs) for r in rows)
        self.stats["cached_tokens"] += sum(cached)
        for r, g in zip(rows, group):
            r.logprobs = list(prefix_lp[(g, tuple(r.allowed) if r.allowed is not None else None)])
        order, cache, logits, attn, pos = self._join(passes)
        at = {g: k for k, g in enumerate(order)}
        sel = [at[g] for g in group]
        if sel != list(range(len(order))):
            index = torch.tensor(sel, dtype=torch.long, device=dev)
            cache.reorder_cache(index)  # index_select on the batch axis: copies of the shared rows
            logits, attn, pos = logits[index], attn[index], pos[index]
        return cache, logits, attn, pos

    def _allowed_mask(self, rows: list[Row], vocab: int) -> torch.Tensor | None:
        """[B, V] bool: the tokens each row may take (all, for an unconstrained row); None when none is."""
        if all(r.allowed is None for r in rows):
            return None
        table = torch.full((len(rows), max(len(r.allowed or ()) for r in rows)), -1, dtype=torch.long)
        for i, r in enumerate(rows):
            if r.allowed:
                table[i, : len(r.allowed)] = torch.tensor(r.allowed, dtype=torch.long)
        return whitelist_mask(table.to(self.device), vocab)

    def _append(self, r: Row, token: int, logprob: float) -> bool:
        """Record one sampled token; decide whether the row goes on (True) or has finished (False)."""
        r.ids.append(token)
        r.logprobs.append(logprob)
        sampled = r.ids[r.forced :]  # stop strings are looked for here only, never in the forced prefix
        if token in self.eos_ids or r.close_after_prefix:
            r.finish = "stop"
            r.text = r.prefix + self.tokenizer.decode(sampled[:-1], skip_special_tokens=True)
            return False
        if r.sampling.stop:
            text = self.tokenizer.decode(sampled, skip_special_tokens=True)
            cut = find_stop(text, r.sampling.stop)
            if cut >= 0:
                r.finish, r.text = "stop", r.prefix + text[:cut]
                return False
        if len(sampled) >= r.max_new:
            r.finish = "length"
            r.text = r.prefix + self.tokenizer.decode(sampled, skip_special_tokens=True)
            return False
        return True


def _without_traceback(e: Exception) -> Exception:
    """`e` and the exceptions it chains, their tracebacks (and the frames those hold) dropped."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        link = todo.pop()
        if link is not None and id(link) not in seen:
            seen.add(id(link))
            link.__traceback__ = None
            todo += [link.__cause__, link.__context__]
    return e


def _release_memory() -> None:
    """Give back what a failed batch held before the next one allocates: its tensors (freed once nothing
    refers to them; `gc` breaks the cycles), CUDA's cached blocks and the C heap's free pages (`malloc_trim`,
    glibc only)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc() -> Any:
    """The C library when it is glibc (it has `malloc_trim`), else None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()
