"""Local chat backend on transformers: loading a model, the chat template, token ids and log-probs.

Log-probs. `Completion.logprobs[t]` is log p(completion_ids[t] | prompt, completion_ids[:t]) under the *raw
model distribution* (temperature 1, no top-p), whatever temperature the token was sampled at. That is what
PPO's ratio and DPO's reference terms need, and it equals a plain forward pass over the same tokens
(`LocalChatModel.logprobs`).

Token ids. `prompt_ids` are the chat template's rendering (assistant header included). `completion_ids` are
the forced prefix's tokens (`ChatRequest.prefix`, tokenized on its own: the first `forced_tokens` ids, scored
from the prompt's forward pass), then exactly the sampled tokens, including the end-of-turn token when the
model emitted one and the token that completed a stop string. `text` is the prefix followed by the sampled
text without the end-of-turn token or a stop string (and everything after it), as the OpenAI API does; stop
strings are looked for in the sampled part only. `max_tokens` bounds the sampled tokens, not the prefix. With
`sample_after_prefix=False` nothing is sampled: the prefix is closed by the end-of-turn token, scored too.
`completion_tokens == len(completion_ids)`.

Decoding: `ragteam.llm.decoder` (shared prefill, seeds, batches cut by `max_batch_size` and the
`max_batch_tokens` budget, a batch out of memory run again row by row).

Serving hooks. `chat(..., cancelled=, on_result=)` lets a server (`ragteam.serve.llm`) schedule by step:
`cancelled(i)` is asked before each chunk of rows and at every decoding step, and once it says yes request i's
rows leave the batch (a client that went away costs no more compute); `on_result(i, result)` is called as
soon as request i's rows have all finished, so a short request decoded beside a long one is answered when it
ends, not when the batch does. Both run in the decoding thread, under the model's lock: keep them cheap.

Constrained replies. A request with a `constraint` (`ragteam.llm.constraint`: MMOA-RAG's Selector may write
only `Document`, the candidate numbers and `,`) decodes under a token whitelist: the ids of its allowed texts,
each tokenized on its own, the end-of-turn / EOS ids it stops on and the ids of its forced prefix. Every other
token's logit is masked (set to the lowest float) at every step, per row, so the rows of one batch may carry
different whitelists or none. Its `logprobs` are those of the masked distribution (the same logits
renormalized over the whitelist), and `Completion.constraint` records the constraint and the exact
`allowed_ids`, which a trainer masks with to score the completion the same way. Rows without a constraint
compute exactly what they computed before.

Special-token text. A message (or forced prefix) that spells a special token, e.g. a user writing
"<|im_end|>\n<|im_start|>assistant", is tokenized as the characters it is, never as the control token: else
one user could close their own turn and write the assistant's (prompt injection by the chat template). The
template's own tokens stay special. Text without such strings is tokenized exactly as before (the same ids).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from ragteam.llm.base import ChatRequest, ChatResult, Completion, ModelError
from ragteam.llm.constraint import Constraint, constraint_record, token_whitelist
from ragteam.llm.decoder import BatchedDecoder, Row
from ragteam.llm.logprobs import completion_logprobs
from ragteam.llm.prefill import PREFILL_CHUNK, PREFIX_CACHE_MB
from ragteam.llm.prefix_cache import PrefixCache, weights_key
from ragteam.llm.sampling import (
    sample_seed,
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_model_path(name_or_path: str | Path) -> Path:
    """Resolve a model name: `smollm2` (converted packaged model), `tiny` (test model), else an existing folder."""
    if str(name_or_path) == "smollm2":
        from ragteam.llm.smollm2 import smollm2_model_dir

        return smollm2_model_dir()
    if str(name_or_path) == "tiny":
        from ragteam.llm.tiny import tiny_model_dir

        return tiny_model_dir()
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model {str(name_or_path)!r}: not 'smollm2', not 'tiny', and not a Hugging Face model folder "
            f"(no config.json in {path})"
        )
    return path


def resolve_device(device: str) -> torch.device:
    """The torch device for `auto` (cuda when available, else cpu), `cpu` or `cuda`."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return torch.device(device)


def read_weights(folder: str | Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Every tensor of the `*.safetensors` files in `folder` (a model saved by `save_pretrained`, sharded
    or not); FileNotFoundError when there are none."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors weights to load")
    if odd := [f.name for f in files if not f.is_file()]:  # opening a FIFO would block, holding the GIL
        raise ValueError(f"{folder}: {odd[0]} is not a regular file (a pipe, a device or a folder?)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f), device=device))
    return state


class LocalChatModel(BatchedDecoder):
    """A Hugging Face causal LM answering `ChatRequest`s in left-padded batches of up to `max_batch_size` rows
    and, with `max_batch_tokens`, that many padded tokens (`ragteam.llm.decoder`)."""

    supports_constraints = True  # enforces `ChatRequest.constraint` by a token whitelist (module docstring)

    def __init__(
        self,
        path_or_name: str | Path = "smollm2",
        device: str = "auto",
        dtype: str = "float32",
        lora: str | Path | None = None,
        max_batch_size: int = 32,
        name: str | None = None,
        merge_lora: bool = True,
        share_prefill: bool = True,
        max_batch_tokens: int | None = None,
        prefill_chunk: int | None = PREFILL_CHUNK,
        prefix_cache_mb: float = PREFIX_CACHE_MB,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        path = resolve_model_path(path_or_name)
        dev = resolve_device(device)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
        if lora is not None:
            from peft import PeftModel

            if not Path(lora).is_dir():
                raise FileNotFoundError(f"LoRA adapter folder not found: {lora}")
            model = PeftModel.from_pretrained(model, str(lora))
            if merge_lora:
                model = model.merge_and_unload()
        model.to(dev)
        model.eval()
        default_name = Path(path).name if str(path_or_name) not in ("smollm2", "tiny") else str(path_or_name)
        self._setup(
            model,
            tokenizer,
            name or default_name,
            max_batch_size,
            share_prefill,
            max_batch_tokens,
            prefill_chunk,
            prefix_cache_mb,
        )
        self.path = path

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        name: str = "policy",
        max_batch_size: int = 32,
        share_prefill: bool = True,
        max_batch_tokens: int | None = None,
        prefill_chunk: int | None = PREFILL_CHUNK,
        prefix_cache_mb: float = PREFIX_CACHE_MB,
    ) -> LocalChatModel:
        """Wrap an already loaded model + tokenizer (e.g. the policy being trained); shares its weights (the
        prefix cache notices when they change: `set_prefix_cache`)."""
        self = cls.__new__(cls)
        self._setup(
            model,
            tokenizer,
            name,
            max_batch_size,
            share_prefill,
            max_batch_tokens,
            prefill_chunk,
            prefix_cache_mb,
        )
        self.path = None
        return self

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        name: str,
        max_batch_size: int,
        share_prefill: bool,
        max_batch_tokens: int | None,
        prefill_chunk: int | None = PREFILL_CHUNK,
        prefix_cache_mb: float = PREFIX_CACHE_MB,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1 (or None: no budget), got {max_batch_tokens}")
        if prefill_chunk is not None and prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1 (or None: one pass), got {prefill_chunk}")
        if tokenizer.chat_template is None:
            raise ValueError(f"model {name!r}: the tokenizer has no chat template")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens  # padded tokens per decoding batch (ragteam.llm.decoder)
        self.prefill_chunk = prefill_chunk  # prefill tokens per forward pass (ragteam.llm.decoder)
        self.batch_hook = None  # called with each decoding batch's rows before it runs (tests)
        self.share_prefill = share_prefill
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        im_end = (
            tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        )
        eos.add(im_end)
        self.eos_ids = frozenset(i for i in eos if i is not None)
        self.eot_id = im_end if im_end is not None else tokenizer.eos_token_id  # closes a forced-only reply
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20)
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self._special_texts = sorted(
            {str(t) for t in tokenizer.all_special_tokens}
            | {t.content for t in decoder.values() if getattr(t, "special", False)}
        )
        self._whitelists: dict[Constraint, list[int]] = {}
        self._lock = threading.Lock()
        self.stats = {
            "batches": 0,
            "rows": 0,
            "prefill_rows": 0,
            "prefill_tokens": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "generated_tokens": 0,
        }
        self.prefix_cache: PrefixCache | None = None
        self.set_prefix_cache(prefix_cache_mb)

    # ---- prompts -------------------------------------------------------------------------------------------

    def prompt_ids(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of `messages` rendered with the chat template, ending with the assistant turn's header.

        Special-token strings inside a message's content are tokenized as text (module docstring)."""
        if not any(self._spells_special(m.get("content")) for m in messages):
            text = self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        # Render with a unique mark in place of each content, then tokenize the template's pieces as usual
        # (its control tokens stay special) and each content with special-token strings split into text.
        marks = [f"\x00{uuid.uuid4().hex}{i}\x00" for i in range(len(messages))]
        masked = [{**m, "content": mark} for m, mark in zip(messages, marks)]
        text = self.tokenizer.apply_chat_template(masked, add_generation_prompt=True, tokenize=False)
        ids: list[int] = []
        pos = 0
        for m, mark in zip(messages, marks):
            at = text.find(mark, pos)
            if at < 0:
                raise ValueError(
                    f"model {self.name!r}: the chat template does not render every message as given"
                )
            ids += self._text_ids(text[pos:at])
            ids += self._text_ids(str(m.get("content") or ""), literal=True)
            pos = at + len(mark)
        return ids + self._text_ids(text[pos:])

    def _spells_special(self, text: object) -> bool:
        return isinstance(text, str) and any(t in text for t in self._special_texts)

    def _text_ids(self, text: str, literal: bool = False) -> list[int]:
        """Ids of `text`; `literal`: special-token strings in it are tokenized as the characters they are."""
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False, split_special_tokens=literal)["input_ids"])

    def count_tokens(self, messages: Sequence[dict]) -> int:
        """Tokens of `messages` as a prompt (assistant header included): the engine fits prompts with it."""
        return len(self.prompt_ids(messages))

    def prefix_ids(self, prefix: str) -> list[int]:
        """Token ids of a forced reply prefix, tokenized on its own (it follows the assistant header);
        special-token strings in it are text, as in messages."""
        return self._text_ids(prefix, literal=self._spells_special(prefix))

    def allowed_ids(self, constraint: Constraint) -> list[int]:
        """The token whitelist of a constraint: the ids of each allowed text tokenized on its own (special-token
        strings as text), and the end-of-turn / EOS ids decoding stops on. Sorted; cached per constraint."""
        ids = self._whitelists.get(constraint)
        if ids is None:
            ids = token_whitelist(constraint, lambda t: self._text_ids(t, literal=True), self.eos_ids)
            if len(self._whitelists) < 1024:
                self._whitelists[constraint] = ids
        return ids

    # ---- the ChatModel interface ---------------------------------------------------------------------------

    def load_weights(self, folder: str | Path) -> int:
        """Replace the weights with those in `folder/*.safetensors` (a trainer's checkpoint of the same
        architecture), between two batches; returns the number of tensors loaded.

        Why: a PPO trainer that rolls out through a server pushes its weights after every update. The
        tensors must match the model's names and shapes; tied weights (SmolLM2's output head) may be absent.
        """
        state = read_weights(folder, device=str(self.device))
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"{folder}: tensors this model does not have: {', '.join(unknown[:5])}")
        for name, tensor in state.items():
            if tensor.shape != own[name].shape:
                raise ValueError(
                    f"{folder}: {name} has shape {tuple(tensor.shape)}, the model {tuple(own[name].shape)}"
                )
        with self._lock:
            self.model.load_state_dict(state, strict=False)
            self._forget_prefixes()  # its KV was computed with the old weights
        return len(state)

    def clear_prefix_cache(self) -> None:
        """Drop every prefix the cache holds (between two batches): the weights changed, or are about to be
        used for a run that must not depend on what ran before (`prefix_cache.clear_prefix_caches`). The
        cache's weights key cannot be relied on to notice: a fused optimizer step does not bump it."""
        with self._lock:
            self._forget_prefixes()

    def _forget_prefixes(self) -> None:
        tree = self.prefix_cache
        if tree is not None:
            if tree.tokens:
                tree.clears += 1
            tree.clear()
            tree.key = weights_key(self.model)  # the next batch's check finds the weights it was cleared for

    def chat(
        self,
        requests: Sequence[ChatRequest],
        *,
        cancelled: Callable[[int], bool] | None = None,
        on_result: Callable[[int, ChatResult], None] | None = None,
    ) -> list[ChatResult]:
        """Answer each request with `sampling.n` completions (or a ModelError), in input order.

        `cancelled` and `on_result` are the serving hooks (module docstring); a cancelled request's result is
        a ModelError saying so."""
        results: list[ChatResult | None] = [None] * len(requests)
        rows: list[Row] = []
        for i, req in enumerate(requests):
            try:
                rows.extend(self._rows_for(i, req))
            except Exception as e:  # noqa: BLE001 - a bad request is a value, never sinks the batch
                results[i] = ModelError(
                    f"{type(e).__name__}: {e}",
                    where=f"local:{self.name}",
                    bad_request=isinstance(e, ValueError),  # _rows_for's checks: the request, not the model
                )
        rows.sort(key=lambda r: (len(r.inputs), r.inputs))  # identical prompts side by side: one prefill
        by_request: dict[int, list[Row]] = {}
        for r in rows:
            by_request.setdefault(r.request, []).append(r)
        left = {i: len(its_rows) for i, its_rows in by_request.items()}

        def finished(r: Row) -> None:
            left[r.request] -= 1
            if left[r.request] == 0 and on_result is not None:
                on_result(r.request, self._result(by_request[r.request]))

        with self._lock, torch.inference_mode():
            if self.prefix_cache is not None:
                self.prefix_cache.validate(weights_key(self.model))
            failed = self.decode_rows(rows, finished, cancelled)
        for i, its_rows in by_request.items():
            if cancelled is not None and cancelled(i):
                results[i] = ModelError("cancelled: its client went away", where=f"local:{self.name}")
            else:
                results[i] = failed[i] if i in failed else self._result(its_rows)
        return [r if r is not None else ModelError("no result", where=f"local:{self.name}") for r in results]

    def _result(self, its_rows: list[Row]) -> list[Completion]:
        """One request's completions, in sample order."""
        return [self._completion(r) for r in sorted(its_rows, key=lambda r: r.sample)]

    def _rows_for(self, index: int, req: ChatRequest) -> list[Row]:
        s = req.sampling
        if s.n < 1:
            raise ValueError(f"n must be >= 1, got {s.n}")
        if s.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {s.max_tokens}")
        if s.temperature < 0 or not 0 < s.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {s.temperature}, {s.top_p}")
        if not req.sample_after_prefix and self.eot_id is None:
            raise ValueError("sample_after_prefix=False needs an end-of-turn token; the tokenizer has none")
        ids = self.prompt_ids(req.messages)
        prefix = self.prefix_ids(req.prefix)
        room = self.context_length - len(ids) - len(prefix)
        if room < 1:
            raise ValueError(
                f"prompt of {len(ids)} tokens and prefix of {len(prefix)} leave no room in the context of "
                f"{self.context_length}"
            )
        inputs = ids + prefix  # shared by the n rows: they are prefilled once
        max_new = min(s.max_tokens, room) if req.sample_after_prefix else 1
        allowed = None
        if req.constraint is not None:  # the forced prefix's ids too: it is scored under the same mask
            allowed = sorted(set(self.allowed_ids(req.constraint)) | set(prefix))
        rows = []
        for j in range(s.n):
            gen = None
            if s.temperature > 0:
                gen = torch.Generator(device="cpu")
                gen.manual_seed(sample_seed(s.seed, j))
            rows.append(
                Row(
                    request=index,
                    sample=j,
                    prompt_ids=ids,
                    inputs=inputs,
                    prefix=req.prefix,
                    forced=len(prefix),
                    close_after_prefix=not req.sample_after_prefix,
                    sampling=s,
                    max_new=max_new,
                    generator=gen,
                    ids=list(prefix),
                    constraint=req.constraint,
                    allowed=allowed,
                )
            )
        return rows

    def _completion(self, r: Row) -> Completion:
        return Completion(
            text=r.text or "",
            finish_reason=r.finish or "length",
            prompt_tokens=len(r.prompt_ids),
            completion_tokens=len(r.ids),
            prompt_ids=list(r.prompt_ids),
            completion_ids=list(r.ids),
            logprobs=list(r.logprobs),
            forced_tokens=r.forced,
            logprobs_temperature=1.0,
            constraint=None
            if r.constraint is None
            else constraint_record(r.constraint, "logits_mask", True, allowed_ids=list(r.allowed or ())),
        )

    # ---- scoring -------------------------------------------------------------------------------------------

    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[int] | None] | None = None,
    ) -> list[list[float]]:
        """Per-token log-probs of each completion after its prompt, by one plain forward pass (temperature 1);
        `allowed[i]`: the token whitelist completion i was decoded under (`Completion.constraint`), or None."""
        out: list[list[float]] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(prompt_ids), self.max_batch_size):
                p = prompt_ids[start : start + self.max_batch_size]
                c = completion_ids[start : start + self.max_batch_size]
                a = allowed[start : start + self.max_batch_size] if allowed is not None else None
                lp, mask = completion_logprobs(self.model, p, c, self.pad_id, allowed=a)
                for row, m in zip(lp.cpu(), mask.cpu()):
                    out.append(row[m].tolist())
        return out
