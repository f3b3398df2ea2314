"""The prefill of `BatchedDecoder` (`ragteam.llm.decoder`): distinct inputs through the model in one left-padded
batch, in chunks, each past the prefix the prefix cache holds of it; and the cache's setting.

Chunked prefill. The token budget bounds the KV cache, not the prefill's working memory: one pass over an
n-token input holds every layer's activations for all n positions at once, attention scores n x n per head
where the attention kernel materializes them (eager attention), and a forced prefix of f tokens its [f, V]
logits twice (with their log-softmax: for SmolLM2, V = 49,152, an 8k-token prefix took 3.6 GB). Inputs longer
than `prefill_chunk` tokens (`PREFILL_CHUNK` by default) therefore run in chunks of that many, each attending
to the KV cache of the ones before, and a forced prefix is scored chunk by chunk, so the prefill's memory
grows linearly with the input (docs/serving.md has the measured peaks). The result is the one-pass result up
to float round-off (the same greedy tokens; tests/test_prefill_chunks.py); inputs no longer than a chunk run
in one pass, as before.

Prefix cache. With a `prefix_cache` (`ragteam.llm.prefix_cache`, a radix tree of KV keyed by token ids), a
distinct input reads the longest prefix the tree holds and computes only the rest: the batch's KV cache holds,
per row, its cached prefix right-aligned in the first `cached` columns (zeros, masked, before it), then its
computed suffix left-padded in the next `width` columns; the attention mask covers both and the position ids
count the row's own tokens, so a row may have masked columns in the middle. The computed suffixes range from
one token to a whole prompt and a pass computes every row to its longest, so rows run in passes of similar
suffix length (`_prefill_passes`), joined into one batch for decoding (`_join`). Each row leaves its last prompt
token and its forced prefix to compute (their logits are needed), and puts its whole input in the tree after
its prefill. Prefixes that several distinct inputs of one batch share and the tree lacks (the members of a
group after their first act, a fork's children with different forced prefixes) are prefilled first, once
(`shared_stems`). Identical inputs still prefill once and are copied (`ragteam.llm.decoder`, shared
prefill): one mechanism, the tree generalizing it across batches, turns and group members. Tokens and
log-probs are those without the cache up to float round-off, as between two batch shapes
(tests/test_prefix_cache.py; ~1e-5 on SmolLM2, where a sampled token can rarely flip). `stats` adds
`prompt_tokens` (every row's input, what a cache-less engine would prefill), `cached_tokens` (read from the
tree) and `prefill_tokens` counts what was computed, stems included; pads are never counted, though a batch
without the cache computes them too (every row is padded to the longest input).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ragteam.llm.prefix_cache import KV, PrefixCache, full_attention, shared_stems

PREFILL_CHUNK = 1024  # prefill tokens per forward pass (module docstring, "Chunked prefill")
PREFIX_CACHE_MB = 512  # the prefix cache's default budget (`--rollout.prefix-cache-mb`); SmolLM2: ~11k tokens


class Prefill:
    """Mixed into `BatchedDecoder`; reads `model`, `pad_id`, `device`, `prefill_chunk`, `prefix_cache` and
    `stats`."""

    model: Any
    pad_id: int
    device: torch.device
    prefill_chunk: int | None
    prefix_cache: PrefixCache | None
    stats: dict[str, int]

    def set_prefix_cache(self, mb: float) -> None:
        """Cache prompt prefixes' KV in a radix tree of at most `mb` MB (0: off; `ragteam.llm.prefix_cache`).

        Why: a rollout's prompts repeat (group members, templates, later turns); each prompt then prefills only
        its uncached suffix. Changing the budget empties the cache. The KV is valid for the weights it was
        computed with: whoever changes them clears it (`clear_prefix_cache`: a weight load, the PPO trainer at
        every push); as a safety net `LocalChatModel.chat` also checks a key of the parameters' storage and
        in-place version counters (which a fused optimizer step does not bump) and empties the tree when it
        changed. A model whose cache layers are not plain full-attention layers (sliding windows) runs
        without it."""
        if mb < 0:
            raise ValueError(f"prefix cache budget must be >= 0 MB (0: off), got {mb}")
        budget = int(mb * 2**20)
        if budget and not full_attention(self.model):
            budget = 0
        if budget == 0:
            self.prefix_cache = None
        elif self.prefix_cache is None or self.prefix_cache.budget_bytes != budget:
            self.prefix_cache = PrefixCache(budget)

    def _prefill_hits(self, inputs: list[list[int]], forced: list[int]) -> list[tuple[int, KV]]:
        """Each distinct input's cached prefix (length, KV), (0, []) without a cache; the shared stems the cache
        lacks are prefilled first (module docstring). The prefix a row reads leaves its last prompt token and
        its forced prefix (`forced[i]` tokens) to compute: their logits are the next token's and the prefix's
        scores."""
        tree = self.prefix_cache
        if tree is None:
            return [(0, [])] * len(inputs)
        self._prefill_stems(shared_stems(inputs, forced, tree))
        return [tree.match(x, len(x) - 1 - f) for x, f in zip(inputs, forced)]

    def _prefill_passes(self, suffixes: list[int]) -> list[list[int]]:
        """The distinct inputs (by index) each prefill pass runs, given the tokens each computes. Without a
        cache, one pass (inputs of a batch have similar lengths: `plan_batches` sorts them). With one, the
        computed suffixes range from one token (a prompt seen before) to a whole prompt, and a pass computes
        every row to its longest: rows are cut, longest first, into passes whose shortest suffix is at least
        half their longest, so padding at most doubles a pass's work."""
        if self.prefix_cache is None:
            return [list(range(len(suffixes)))]
        passes: list[list[int]] = []
        for i in sorted(range(len(suffixes)), key=lambda i: -suffixes[i]):
            if passes and 2 * suffixes[i] >= suffixes[passes[-1][0]]:
                passes[-1].append(i)
            else:
                passes.append([i])
        return passes

    def _join(self, passes: list[tuple[list[int], Any, torch.Tensor, torch.Tensor, torch.Tensor]]) -> tuple:
        """One batch from the prefill passes (part, cache, logits, attn, pos): their rows stacked, each pass's
        KV columns, mask and positions left-padded (zeros, masked) to the widest. Returns the distinct inputs'
        order, the cache, logits, attention mask and position ids."""
        from transformers import DynamicCache

        if len(passes) == 1:
            part, cache, logits, attn, pos = passes[0]
            return part, cache, logits, attn, pos
        width = max(p[3].shape[1] for p in passes)
        steps = max(p[4].shape[1] for p in passes)

        def left(t: torch.Tensor, n: int, dim: int) -> torch.Tensor:
            pad = [0, 0] * (t.dim() - 1 - dim % t.dim()) + [n - t.shape[dim], 0]
            return torch.nn.functional.pad(t, pad)

        layers = [
            (
                torch.cat([left(p[1].layers[i].keys, width, -2) for p in passes]),
                torch.cat([left(p[1].layers[i].values, width, -2) for p in passes]),
            )
            for i in range(len(passes[0][1].layers))
        ]
        return (
            [g for p in passes for g in p[0]],
            DynamicCache(layers, config=self.model.config),
            torch.cat([p[2] for p in passes]),
            torch.cat([left(p[3], width, -1) for p in passes]),
            torch.cat([left(p[4], steps, -1) for p in passes]),
        )

    def _layout(
        self, inputs: list[list[int]], hits: list[tuple[int, KV]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """A prefill pass's tensors for distinct `inputs` and the tree's `hits` on them: the computed
        suffixes' ids [G, width] left-padded, the attention mask [G, cached + width], the suffixes' position ids
        [G, width] and the KV cache of the cached prefixes (None: none)."""
        cached = [m for m, _ in hits]
        past_width = max(cached)
        suffixes = [x[m:] for x, m in zip(inputs, cached)]
        width = max(map(len, suffixes))
        ids = torch.full((len(inputs), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(inputs), past_width + width), dtype=torch.long)
        for i, (x, m) in enumerate(zip(suffixes, cached)):
            ids[i, width - len(x) :] = torch.tensor(x)
            attn[i, past_width - m : past_width] = 1
            attn[i, past_width + width - len(x) :] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, past_width:]  # a cached prefix's tokens come first
        past = self._past(hits, past_width) if past_width else None
        return ids, attn, pos, past

    def _past(self, hits: list[tuple[int, KV]], width: int) -> Any:
        """A KV cache [G, heads, width, dim] per layer holding each row's cached prefix right-aligned (zeros,
        masked, before it), from the tree's `hits`."""
        from transformers import DynamicCache

        ref = next(kv for m, kv in hits if m)
        layers = []
        for layer, (k0, v0) in enumerate(ref):
            k = k0.new_zeros((len(hits), k0.shape[0], width, k0.shape[2]))
            v = v0.new_zeros((len(hits), v0.shape[0], width, v0.shape[2]))
            for i, (m, kv) in enumerate(hits):
                if m:
                    k[i, :, width - m :] = kv[layer][0]
                    v[i, :, width - m :] = kv[layer][1]
            layers.append((k, v))
        return DynamicCache(layers, config=self.model.config)

    def _remember(self, inputs: list[list[int]], cache: Any, attn: torch.Tensor) -> None:
        """Put each prefilled row's KV in the prefix cache: row i's positions are its unmasked columns."""
        assert self.prefix_cache is not None
        for i, x in enumerate(inputs):
            cols = attn[i].nonzero().squeeze(1)

            def kv_of(a: int, b: int, i: int = i, cols: torch.Tensor = cols) -> KV:
                idx = cols[a:b]
                return [
                    (c.keys[i].index_select(1, idx), c.values[i].index_select(1, idx)) for c in cache.layers
                ]

            self.prefix_cache.insert(x, kv_of)

    def _prefill_stems(self, stems: list[list[int]]) -> None:
        """Prefill, into the prefix cache only, the prefixes several distinct inputs of a batch share and the
        cache lacks (`shared_stems`): the rows then read them instead of each computing its own copy."""
        if not stems:
            return
        assert self.prefix_cache is not None
        hits = [self.prefix_cache.match(x, len(x) - 1) for x in stems]
        cached = [m for m, _ in hits]
        for part in self._prefill_passes([len(x) - m for x, m in zip(stems, cached)]):
            ids, attn, pos, past = self._layout([stems[i] for i in part], [hits[i] for i in part])
            cache, _ = self._prefill_forward(ids, attn, pos, 1, lambda col, logits: None, past)
            self._remember([stems[i] for i in part], cache, attn)
        self.stats["prefill_rows"] += len(stems)
        self.stats["prefill_tokens"] += sum(len(x) - m for x, m in zip(stems, cached))
        self.stats["cached_tokens"] += sum(cached)

    def _prefill_forward(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        pos: torch.Tensor,
        keep: int,
        score: Callable[[int, torch.Tensor], None],
        past: Any = None,
    ) -> tuple[Any, torch.Tensor]:
        """The prefill's forward pass over [G, width] left-padded inputs after `past` (a KV cache of the
        cached prefixes, or None) whose columns the attention mask `attn` [G, cached + width] covers first:
        the KV cache and the next-token logits [G, V] float32; `score(col, logits)` is shown the logits of the
        last `keep` columns as they come.

        Inputs longer than `prefill_chunk` tokens run in chunks of that many, each attending to the cache of
        the ones before (module docstring, "Chunked prefill"); shorter ones in one pass, as before chunking."""
        width = ids.shape[1]
        offset = attn.shape[1] - width  # columns of the cached prefixes
        chunk = self.prefill_chunk if self.prefill_chunk is not None else width
        cache, last = past, None
        for start in range(0, width, chunk):
            end = min(start + chunk, width)
            want = min(end - start, end - (width - keep))  # this chunk's columns among the last `keep`
            whole = start == 0 and end == width  # one pass: the call made before chunking, unchanged
            out = self.model(
                input_ids=ids if whole else ids[:, start:end],
                attention_mask=attn if whole else attn[:, : offset + end],
                position_ids=pos if whole else pos[:, start:end],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=max(want, 1),  # 0 would keep them all
            )
            cache = out.past_key_values
            if want > 0:
                score(end - want, out.logits[:, -want:])
            if end == width:
                last = out.logits[:, -1, :].float()
            del out
        return cache, last
