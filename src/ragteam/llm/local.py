"""Local chat backend on transformers: chat template, left-padded batched decoding, token ids and log-probs.

Decoding is our own loop over the model's KV cache (not `model.generate`) so that one batch can mix requests
with different temperature / top_p / max_tokens / stop strings / seeds, rows that finish leave the batch, and
every sampled token's log-probability comes out of the same forward pass.

Log-probs. `Completion.logprobs[t]` is log p(token_t | prefix) under the *raw model distribution*
(temperature 1, no top-p), whatever temperature the token was sampled at. That is what PPO's ratio and DPO's
reference terms need, and it equals a plain forward pass over the same tokens (`LocalChatModel.logprobs`).

Token ids. `completion_ids` are exactly the sampled tokens, including the end-of-turn token when the model
emitted one and the token that completed a stop string; `text` excludes both (and everything after a stop
string), as the OpenAI API does. `completion_tokens == len(completion_ids)`.

Seeds. Sample j of a request with seed s draws from its own generator seeded by mix(s, j), so a seeded
request gives the same samples whatever else shares its batch (up to float round-off between batch shapes).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ragteam.llm.base import ChatRequest, ChatResult, Completion, ModelError, Sampling
from ragteam.llm.logprobs import completion_logprobs
from ragteam.llm.sampling import find_stop, gather_logprobs, next_tokens, sample_seed

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


@dataclass
class _Row:
    """One sequence being decoded: sample `sample` of request `request`."""

    request: int
    sample: int
    prompt_ids: list[int]
    sampling: Sampling
    max_new: int
    generator: torch.Generator | None
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    text: str | None = None


class LocalChatModel:
    """A Hugging Face causal LM answering `ChatRequest`s in left-padded batches of up to `max_batch_size` rows."""

    def __init__(
        self,
        path_or_name: str | Path = "smollm2",
        device: str = "auto",
        dtype: str = "float32",
        lora: str | Path | None = None,
        max_batch_size: int = 32,
        name: str | None = None,
        merge_lora: bool = True,
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
        self._setup(model, tokenizer, name or default_name, max_batch_size)
        self.path = path

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, name: str = "policy", max_batch_size: int = 32
    ) -> LocalChatModel:
        """Wrap an already loaded model + tokenizer (e.g. the policy being trained); shares its weights."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name, max_batch_size)
        self.path = None
        return self

    def _setup(self, model: Any, tokenizer: Any, name: str, max_batch_size: int) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if tokenizer.chat_template is None:
            raise ValueError(f"model {name!r}: the tokenizer has no chat template")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch_size = max_batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        im_end = (
            tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        )
        eos.add(im_end)
        self.eos_ids = frozenset(i for i in eos if i is not None)
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20)
        self._lock = threading.Lock()
        self.stats = {"batches": 0, "rows": 0, "generated_tokens": 0}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ---- prompts -------------------------------------------------------------------------------------------

    def prompt_ids(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of `messages` rendered with the chat template, ending with the assistant turn's header."""
        text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # ---- the ChatModel interface ---------------------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each request with `sampling.n` completions (or a ModelError), in input order."""
        results: list[ChatResult | None] = [None] * len(requests)
        rows: list[_Row] = []
        for i, req in enumerate(requests):
            try:
                rows.extend(self._rows_for(i, req))
            except Exception as e:  # noqa: BLE001 - a bad request is a value, never sinks the batch
                results[i] = ModelError(f"{type(e).__name__}: {e}", where=f"local:{self.name}")
        rows.sort(key=lambda r: len(r.prompt_ids))
        failed: dict[int, ModelError] = {}
        with self._lock, torch.inference_mode():
            for start in range(0, len(rows), self.max_batch_size):
                chunk = rows[start : start + self.max_batch_size]
                try:
                    self._decode(chunk)
                except Exception as e:  # noqa: BLE001 - e.g. out of memory: fail these requests, keep the others
                    for r in chunk:
                        failed[r.request] = ModelError(f"{type(e).__name__}: {e}", where=f"local:{self.name}")
        by_request: dict[int, list[_Row]] = {}
        for r in rows:
            by_request.setdefault(r.request, []).append(r)
        for i, its_rows in by_request.items():
            if i in failed:
                results[i] = failed[i]
                continue
            its_rows.sort(key=lambda r: r.sample)
            results[i] = [self._completion(r) for r in its_rows]
        return [r if r is not None else ModelError("no result", where=f"local:{self.name}") for r in results]

    def _rows_for(self, index: int, req: ChatRequest) -> list[_Row]:
        s = req.sampling
        if s.n < 1:
            raise ValueError(f"n must be >= 1, got {s.n}")
        if s.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {s.max_tokens}")
        if s.temperature < 0 or not 0 < s.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {s.temperature}, {s.top_p}")
        ids = self.prompt_ids(req.messages)
        room = self.context_length - len(ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(ids)} tokens leaves no room in the context of {self.context_length}"
            )
        rows = []
        for j in range(s.n):
            gen = None
            if s.temperature > 0:
                gen = torch.Generator(device="cpu")
                gen.manual_seed(sample_seed(s.seed, j))
            rows.append(_Row(index, j, ids, s, min(s.max_tokens, room), gen))
        return rows

    def _completion(self, r: _Row) -> Completion:
        return Completion(
            text=r.text or "",
            finish_reason=r.finish or "length",
            prompt_tokens=len(r.prompt_ids),
            completion_tokens=len(r.ids),
            prompt_ids=list(r.prompt_ids),
            completion_ids=list(r.ids),
            logprobs=list(r.logprobs),
        )

    # ---- decoding ------------------------------------------------------------------------------------------

    def _decode(self, rows: list[_Row]) -> None:
        """Decode `rows` together until each hits EOS, a stop string or its max_new tokens (fills the rows)."""
        dev = self.device
        b = len(rows)
        width = max(len(r.prompt_ids) for r in rows)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            attn[i, width - len(r.prompt_ids) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        temperature = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, device=dev)
        top_p = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, device=dev)
        out = self.model(
            input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1
        )
        cache = out.past_key_values
        logits = out.logits[:, -1, :].float()
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
            tokens = next_tokens(logits, temperature, top_p, uniforms)
            token_lp = gather_logprobs(logits, tokens).tolist()
            token_list = tokens.tolist()
            keep: list[int] = []
            for k, row_index in enumerate(active):
                if self._append(rows[row_index], token_list[k], token_lp[k]):
                    keep.append(k)
            self.stats["generated_tokens"] += len(active)
            if not keep:
                break
            if len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long, device=dev)
                cache.reorder_cache(sel)
                tokens, attn, next_pos = tokens[sel], attn[sel], next_pos[sel]
                temperature, top_p = temperature[sel], top_p[sel]
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

    def _append(self, r: _Row, token: int, logprob: float) -> bool:
        """Record one sampled token; decide whether the row goes on (True) or has finished (False)."""
        r.ids.append(token)
        r.logprobs.append(logprob)
        if token in self.eos_ids:
            r.finish = "stop"
            r.text = self.tokenizer.decode(r.ids[:-1], skip_special_tokens=True)
            return False
        if r.sampling.stop:
            text = self.tokenizer.decode(r.ids, skip_special_tokens=True)
            cut = find_stop(text, r.sampling.stop)
            if cut >= 0:
                r.finish, r.text = "stop", text[:cut]
                return False
        if len(r.ids) >= r.max_new:
            r.finish = "length"
            r.text = self.tokenizer.decode(r.ids, skip_special_tokens=True)
            return False
        return True

    # ---- scoring -------------------------------------------------------------------------------------------

    def logprobs(
        self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Per-token log-probs of each completion after its prompt, by one plain forward pass (temperature 1)."""
        out: list[list[float]] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(prompt_ids), self.max_batch_size):
                p = prompt_ids[start : start + self.max_batch_size]
                c = completion_ids[start : start + self.max_batch_size]
                lp, mask = completion_logprobs(self.model, p, c, self.pad_id)
                for row, m in zip(lp.cpu(), mask.cpu()):
                    out.append(row[m].tolist())
        return out
