"""An OpenAI-compatible chat server over any ChatModel, batching concurrent requests into one `chat()` call.

Routes: `POST /v1/chat/completions` (messages, temperature, top_p, max_tokens / max_completion_tokens, stop,
n, seed, logprobs, top_logprobs and the extensions below; no streaming), `GET /v1/models`, `GET /health` (with
the batching counters).

Token ids and log-probs, as OpenAI and vLLM spell them, so one client serves both (`OpenAIChatModel`):
`"logprobs": true` gives each choice `logprobs.content`, one `{token, logprob, bytes, top_logprobs}` per
completion token (end-of-turn included), `logprob` at temperature 1 as the backend computed it.
`top_logprobs: K` (1-20, with `logprobs: true`, as OpenAI and vLLM take it) fills each position's
`top_logprobs` with the K most likely tokens, most likely first, each `{token, logprob, bytes}` at temperature
1: computed after decoding by one more forward pass over prompt and completion (`llm.logprobs.top_logprobs`,
memory bounded by running the completion in pieces over the KV cache, under the model's lock: after the
batch the request decoded in has ended), so a sampled token listed there has the log-prob of its entry up to
float round-off. More than 20 is refused 400 naming the limit; a backend the server cannot run a forward pass
on (not a local model) refuses K > 0. vLLM's `return_tokens_as_token_ids: true` spells each `token` as
`"token_id:<id>"`; vLLM's `return_token_ids: true` adds `prompt_token_ids` to the response and `token_ids` to
each choice. A backend without ids or log-probs answers `logprobs: null` / `token_ids: null`.

Forced prefix, as vLLM spells it: a final assistant message with `"continue_final_message": true,
"add_generation_prompt": false` forces the reply to start with that message's content (`ChatRequest.prefix`).
Unlike vLLM, which counts the prefix as prompt and returns only the continuation, this server returns the
reply as the backend computed it: `message.content` is the whole reply, prefix included, and `token_ids` and
`logprobs` start with the prefix's tokens. The non-standard `forced_tokens` on each choice (0 without a
prefix) says how many leading tokens were forced, not sampled; clients tell this server from vLLM by it. The
non-standard `"sample_after_prefix": false` closes the reply right after the prefix (nothing is sampled).

Structured outputs, as vLLM spells them (`"structured_outputs": {"regex": R}`, or the older `"guided_regex":
R`; SGLang's `"regex": R` too): a regex that is a whitelist of literal texts (the alternations, classes and
repetitions of MMOA-RAG's Selector format, `Document[0-4](,Document[0-4])*`) is served by a token whitelist
(`ragteam.llm.constraint.whitelist_texts`): every token outside the tokens of its texts and end-of-turn is
masked at every step. That enforces the action space, not the order of the tokens (unlike vLLM's grammar):
the role's parser still reads the reply. Each choice then carries the non-standard `constraint` with the
`allowed_ids`, and its log-probs are the masked distribution's. Any other structured-output field
(`guided_json`, `guided_choice`, `structured_outputs.json`, `response_format` of a JSON type, ...), a regex
beyond literal texts, or a backend that cannot mask is answered 400 naming the field.

Batching: requests go into a queue; a single loop takes the first waiting request, gathers whatever else arrives
within `batch_wait_ms` (up to `max_batch_size` requests) and runs `model.chat(batch)` in a worker thread. While a
batch decodes, new requests queue up and form the next batch, so under load batches fill by themselves.

Scheduling by step. With a model that takes the serving hooks (`LocalChatModel.chat(cancelled=, on_result=)`),
each request is answered as soon as its own rows finish, not when the longest request of its batch does, and
a client that disconnects cancels its generation: dropped from the queue if it waits, out of the batch at the
next decoding step if it runs (`/health` counts `cancelled`). Requests that arrive while a batch decodes wait
for that batch: at most `max_tokens_limit` decoding steps, the operator's cap on any one request (lower it to
bound the wait; a request asking for more is refused 400).

Errors are OpenAI-shaped `{"error": {"message", "type", "param"}}`: 400 for bad JSON, bad fields, text that is
not encodable (a lone surrogate) or a prompt longer than the model's context (`ModelError.bad_request`), 401
without the API key (`api_key`), 404 for an unknown model name, 408 for a body that does not arrive in time,
413 for an oversize body (refused from its Content-Length, before reading it), 500 when the model fails a
request. An integer of more digits than Python converts (4300) is a 400 naming its field, not a body the
parser fails on. `/v1/load_weights` answers 400 naming the folder when it does not exist, is not a folder or
holds no readable weights. A batch the model crashes on is run again one request at a time, so only the request that crashes it
fails and no client sees another's error. A client that disconnects is answered 499 to nobody (its request
cancelled, above). The server never dies on input. FastAPI's docs routes are off unless `docs=True`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import time
import uuid
from collections import Counter
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from ragteam.llm.base import ChatModel, ChatRequest, ChatResult, Completion, ModelError, Sampling
from ragteam.llm.constraint import Constraint, UnsupportedRegex
from ragteam.serving import (
    BodyError,
    ClientGone,
    loads_json,
    openai_app,
    openai_error,
    read_body,
    read_openai_body,
    until_disconnect,
)

MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's limit on `top_logprobs`


class _TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class _MessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant"]
    content: str | list[_TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionBody(BaseModel):
    """The fields of an OpenAI chat-completions request this server honours (others are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[_MessageIn] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False)  # NaN: "a finite number"
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1)
    seed: int | None = None
    stream: bool = False
    logprobs: StrictBool | None = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # vLLM's extensions (token ids; a forced assistant prefix) and ours (`sample_after_prefix`)
    return_tokens_as_token_ids: StrictBool | None = False
    return_token_ids: StrictBool | None = False
    continue_final_message: StrictBool = False
    add_generation_prompt: StrictBool = True
    sample_after_prefix: StrictBool = True
    # structured outputs: vLLM's (new and old) and SGLang's regex are served as a token whitelist; the other
    # fields are read only to be refused by name (400), never silently ignored
    structured_outputs: dict[str, Any] | None = None
    guided_regex: str | None = None
    regex: str | None = None
    guided_json: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structural_tag: Any = None
    json_schema: Any = None
    ebnf: Any = None
    response_format: Any = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop strings")
        return v


class Batcher:
    """Gathers concurrent requests into batches for one `model.chat` call at a time (run in a worker thread)."""

    def __init__(self, model: ChatModel, max_batch_size: int, batch_wait_ms: float) -> None:
        self.model = model
        self.max_batch_size = max_batch_size
        self.wait_s = batch_wait_ms / 1000.0
        self.queue: asyncio.Queue[tuple[ChatRequest, asyncio.Future]] | None = None
        self.batch_sizes: Counter[int] = Counter()
        self.requests = 0
        self.cancelled = 0  # requests whose client went away (dropped from the queue or stopped mid-batch)
        params = inspect.signature(model.chat).parameters
        self.steps = "cancelled" in params and "on_result" in params  # the serving hooks (LocalChatModel)

    @property
    def batches(self) -> int:
        return sum(self.batch_sizes.values())

    @property
    def max_batch_seen(self) -> int:
        return max(self.batch_sizes, default=0)

    async def submit(self, req: ChatRequest) -> ChatResult:
        assert self.queue is not None, "the batching loop is not running"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        await self.queue.put((req, fut))
        return await fut

    async def run(self) -> None:
        self.queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(batch) < self.max_batch_size:
                try:
                    batch.append(self.queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self.queue.get(), left))
                except TimeoutError:
                    break
            live = [(r, f) for r, f in batch if not f.cancelled()]  # clients that gave up while queued
            self.cancelled += len(batch) - len(live)
            batch = live
            if not batch:
                continue
            self.batch_sizes[len(batch)] += 1
            self.requests += len(batch)
            try:
                results = await self._chat(batch)
            except Exception as e:  # noqa: BLE001 - a crashing model fails this batch, not the server
                if len(batch) == 1:
                    results = [self._crashed(e)]
                else:  # someone's request crashed it: run each alone, so only that one fails
                    results = []
                    for item in batch:
                        try:
                            results.extend(await self._chat([item]))
                        except Exception as own:  # noqa: BLE001 - this request's own failure
                            results.append(self._crashed(own))
            self.cancelled += sum(f.cancelled() for _, f in batch)  # clients that left while it decoded
            for (_, fut), res in zip(batch, results):
                _resolve(fut, res)

    async def _chat(self, batch: list[tuple[ChatRequest, asyncio.Future]]) -> list[ChatResult]:
        """One `model.chat` over the batch in a worker thread; with a model that takes the serving hooks,
        requests whose client has gone leave the batch and each request is answered as soon as it ends."""
        requests = [r for r, _ in batch]
        if not self.steps:
            results = await asyncio.to_thread(self.model.chat, requests)
        else:
            loop = asyncio.get_running_loop()
            futures = [f for _, f in batch]

            def cancelled(i: int) -> bool:  # in the decoding thread: a read of the future's state
                return futures[i].cancelled()

            def on_result(i: int, result: ChatResult) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
                    loop.call_soon_threadsafe(_resolve, futures[i], result)

            results = await asyncio.to_thread(
                self.model.chat, requests, cancelled=cancelled, on_result=on_result
            )
        if len(results) != len(requests):
            raise RuntimeError(f"model returned {len(results)} results for {len(requests)} requests")
        return results

    def _crashed(self, e: Exception) -> ModelError:
        return ModelError(f"{type(e).__name__}: {e}", where=getattr(self.model, "name", "model"))


def _resolve(fut: asyncio.Future, result: ChatResult) -> None:
    if not fut.done():
        fut.set_result(result)


def _forced_prefix(body: ChatCompletionBody, messages: list[dict[str, str]]) -> str | JSONResponse:
    """The forced prefix of the reply (popped off `messages`): vLLM's continue_final_message; or a 400."""
    if not body.continue_final_message:
        if not body.add_generation_prompt:  # would continue after the prompt's end-of-turn: not supported
            return openai_error(
                400,
                "add_generation_prompt=false is only supported with continue_final_message=true",
                param="add_generation_prompt",
            )
        return ""
    if body.add_generation_prompt:
        return openai_error(
            400,
            "continue_final_message=true needs add_generation_prompt=false",
            param="add_generation_prompt",
        )
    if messages[-1]["role"] != "assistant":
        return openai_error(
            400,
            "continue_final_message=true needs a final assistant message (the reply's prefix)",
            param="messages",
        )
    return messages.pop()["content"]


_UNSUPPORTED_OUTPUTS = (
    "guided_json",
    "guided_choice",
    "guided_grammar",
    "structural_tag",
    "json_schema",
    "ebnf",
)


def _structured_output(body: ChatCompletionBody, model: ChatModel) -> Constraint | None | JSONResponse:
    """The request's constraint from its structured-output fields (module docstring), None without any,
    or the 400 naming the field this server cannot honour."""
    for name in _UNSUPPORTED_OUTPUTS:
        if getattr(body, name) is not None:
            return openai_error(
                400,
                f"{name} is not supported by this server (only a regex that is a whitelist of literal texts: "
                "structured_outputs.regex, guided_regex or regex)",
                param=name,
            )
    rf = body.response_format
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") in (None, "text")):
        return openai_error(
            400,
            "response_format other than {'type': 'text'} is not supported by this server",
            param="response_format",
        )
    found: list[tuple[str, Any]] = []
    for key, value in (body.structured_outputs or {}).items():
        if key == "regex":
            found.append(("structured_outputs.regex", value))
        elif value not in (None, False):  # option flags left off are harmless
            return openai_error(
                400,
                f"structured_outputs.{key} is not supported by this server (only structured_outputs.regex, "
                "a whitelist of literal texts)",
                param=f"structured_outputs.{key}",
            )
    found += [(n, getattr(body, n)) for n in ("guided_regex", "regex") if getattr(body, n) is not None]
    if not found:
        return None
    name, regex = found[0]
    if any(other != regex for _, other in found[1:]):
        return openai_error(400, f"{' and '.join(n for n, _ in found)} differ: send one regex", param=name)
    if not isinstance(regex, str):
        return openai_error(400, f"{name} must be a string", param=name)
    if not getattr(model, "supports_constraints", False):
        return openai_error(
            400, f"{name}: this server's model cannot enforce a constrained reply", param=name
        )
    try:
        return Constraint.from_regex(regex, name=name)
    except (UnsupportedRegex, ValueError) as e:
        return openai_error(400, f"{name} is not supported by this server: {e}", param=name)


TopK = tuple[list[list[int]], list[list[float]]]  # per position: the k most likely ids, their log-probs


def _logprobs(c: Completion, tokenizer: Any, as_ids: bool, top: TopK | None = None) -> dict[str, Any] | None:
    """OpenAI's `choice.logprobs` for a completion's tokens; None when the backend gave no ids or log-probs.

    `token` is the token's text (special tokens spelled out), or `token_id:<id>` when `as_ids` (vLLM's
    `return_tokens_as_token_ids`, exact where a token's text is not); `bytes` is the UTF-8 of its text, null
    where that text is not exact (no tokenizer, or a token holding part of a character: U+FFFD). `top` fills
    each position's `top_logprobs` (spelled the same way); without it the lists are empty."""
    if c.completion_ids is None or c.logprobs is None or len(c.completion_ids) != len(c.logprobs):
        return None
    ids = set(c.completion_ids)
    if top is not None:
        ids.update(t for row in top[0] for t in row)
    order = sorted(ids)
    texts = tokenizer.batch_decode([[t] for t in order]) if tokenizer is not None else [None] * len(order)
    spelled: dict[int, tuple[str, list[int] | None]] = {}
    for token_id, text in zip(order, texts):
        token = f"token_id:{token_id}" if as_ids or text is None else text
        raw = None if text is None or "\ufffd" in text else list(text.encode("utf-8"))
        spelled[token_id] = (token, raw)
    content = []
    for t, (token_id, logprob) in enumerate(zip(c.completion_ids, c.logprobs)):
        token, raw = spelled[token_id]
        alternatives = []
        if top is not None and t < len(top[0]):
            for alt_id, alt_lp in zip(top[0][t], top[1][t]):
                alt_token, alt_raw = spelled[alt_id]
                alternatives.append({"token": alt_token, "logprob": max(alt_lp, -9999.0), "bytes": alt_raw})
        logprob = max(logprob, -9999.0)  # as vLLM: JSON has no -inf
        content.append({"token": token, "logprob": logprob, "bytes": raw, "top_logprobs": alternatives})
    return {"content": content}


def _top_k_scorer(model: ChatModel) -> Any:
    """`score(prompt_ids, completions, k)` -> one `TopK` per completion, by a forward pass over the model's
    torch module (under the model's own lock, so it never runs beside a batch's decoding or a weight load);
    None for a backend without one (an HTTP client, a scripted model)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    module = getattr(model, "model", None)
    if not isinstance(module, torch.nn.Module):
        return None
    lock = getattr(model, "_lock", None) or contextlib.nullcontext()

    def score(prompt_ids: list[int], completions: list[list[int]], k: int) -> list[TopK]:
        from ragteam.llm.logprobs import top_logprobs

        with lock, torch.inference_mode():
            return top_logprobs(module, prompt_ids, completions, k)

    return score


async def _load_weights(model: ChatModel, served_name: str, data: Any) -> JSONResponse:
    """`POST /v1/load_weights`: a 400 naming the folder when it is missing, not a folder, or its weights
    do not load; 500 only when the model fails on weights that read fine."""
    from ragteam.config import short_repr

    path = data.get("path") if isinstance(data, dict) else None
    if not isinstance(path, str) or not path:
        return openai_error(400, 'body must be {"path": "<folder with *.safetensors>"}', param="path")
    loader = getattr(model, "load_weights", None)
    if loader is None:
        return openai_error(400, f"model {served_name!r} cannot load weights at run time")
    shown = short_repr(path, 300)
    try:
        exists, is_dir = os.path.lexists(path), os.path.isdir(path)
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, text no file name can hold
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return openai_error(400, f"weights folder {shown} cannot be opened: {reason}", param="path")
    if not exists:
        return openai_error(
            400, f"weights folder {shown} does not exist (no *.safetensors weights to load)", param="path"
        )
    if not is_dir:
        return openai_error(400, f"weights folder {shown} is not a folder", param="path")
    try:
        count = await asyncio.to_thread(loader, path)
    except (FileNotFoundError, ValueError) as e:
        return openai_error(400, str(e), param="path")
    except OSError as e:
        return openai_error(400, f"weights folder {shown}: {e.strerror or e}", param="path")
    except Exception as e:  # noqa: BLE001 - safetensors' own error for a damaged file, or the model failing
        if type(e).__name__ == "SafetensorError":
            return openai_error(400, f"weights folder {shown}: not readable safetensors ({e})", param="path")
        return openai_error(500, f"loading the weights failed: {type(e).__name__}: {e}", "server_error")
    return JSONResponse({"status": "ok", "model": served_name, "tensors": count, "path": path})


def make_app(
    model: ChatModel,
    served_name: str,
    max_batch_size: int | None = None,
    batch_wait_ms: float = 5.0,
    max_n: int = 16,
    max_tokens_limit: int = 4096,
    default_max_tokens: int = 256,
    max_body_bytes: int = 4_000_000,
    allow_weight_updates: bool = False,
    api_key: str | None = None,
    docs: bool = False,
    read_timeout: float = 30.0,
) -> FastAPI:
    """A FastAPI app serving `model` as `served_name`; `app.state.batcher` holds the batching counters.

    With `api_key`, every route but /health answers 401 unless the request carries `Authorization: Bearer
    KEY` (what OpenAI clients send). A body must arrive within `read_timeout` seconds (408 otherwise).

    `allow_weight_updates` adds `POST /v1/load_weights {"path": DIR}`: the served model loads the weights in
    DIR (a trainer pushing its policy after each update; see `ragteam.train.sync`). Off by default: whoever
    can reach the port could replace the model.
    """
    batcher = Batcher(model, max_batch_size or int(getattr(model, "max_batch_size", 32)), batch_wait_ms)
    created = int(time.time())
    tokenizer = getattr(model, "tokenizer", None)  # names the tokens of `logprobs`; a bare ChatModel has none
    scorer = _top_k_scorer(model)  # top_logprobs > 0: a forward pass over the local model; None otherwise

    app = openai_app(f"ragteam LLM server: {served_name}", batcher, served_name, docs, api_key)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": served_name,
            "requests": batcher.requests,
            "cancelled": batcher.cancelled,
            "batches": batcher.batches,
            "max_batch_seen": batcher.max_batch_seen,
            "batch_sizes": {str(k): v for k, v in sorted(batcher.batch_sizes.items())},
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": served_name, "object": "model", "created": created, "owned_by": "ragteam"}],
        }

    if allow_weight_updates:

        @app.post("/v1/load_weights")
        async def load_weights(request: Request) -> JSONResponse:
            try:
                data = loads_json(await read_body(request, 65_536, read_timeout))
            except BodyError as e:
                return openai_error(e.status, e.message)
            except RecursionError:
                return openai_error(400, "request body is not valid JSON: nested too deeply")
            except (ValueError, UnicodeDecodeError) as e:
                return openai_error(400, f"request body is not valid JSON: {e}")
            return await _load_weights(model, served_name, data)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        body = await read_openai_body(request, ChatCompletionBody, served_name, max_body_bytes, read_timeout)
        if isinstance(body, JSONResponse):
            return body
        if body.stream:
            return openai_error(400, "stream=true is not supported by this server", param="stream")
        if body.n > max_n:
            return openai_error(400, f"n must be between 1 and {max_n}, got {body.n}", param="n")
        max_tokens = body.max_completion_tokens or body.max_tokens or default_max_tokens
        if max_tokens > max_tokens_limit:
            return openai_error(
                400,
                f"max_tokens must be between 1 and {max_tokens_limit}, got {max_tokens}",
                param="max_tokens",
            )
        top_k = body.top_logprobs or 0
        if top_k and not body.logprobs:  # as OpenAI and vLLM
            return openai_error(
                400,
                "top_logprobs needs logprobs: true (when using top_logprobs, set logprobs)",
                param="top_logprobs",
            )
        if top_k and scorer is None:
            return openai_error(
                400,
                f"top_logprobs > 0 is not supported by this server's backend ({type(model).__name__}); "
                "only 0",
                param="top_logprobs",
            )
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        for i, m in enumerate(messages):
            try:
                m["content"].encode("utf-8")
            except UnicodeEncodeError as e:  # a lone surrogate: valid JSON, but no text a tokenizer can read
                return openai_error(
                    400,
                    f"messages[{i}].content is not valid Unicode text ({e.reason} at character {e.start})",
                    param=f"messages.{i}.content",
                )
        prefix = _forced_prefix(body, messages)
        if isinstance(prefix, JSONResponse):
            return prefix
        constraint = _structured_output(body, model)
        if isinstance(constraint, JSONResponse):
            return constraint
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        sampling = Sampling(
            temperature=body.temperature,
            top_p=body.top_p,
            max_tokens=max_tokens,
            stop=stop,
            n=body.n,
            seed=body.seed,
        )
        chat_request = ChatRequest(
            messages=messages,  # type: ignore[arg-type]
            sampling=sampling,
            prefix=prefix,
            sample_after_prefix=body.sample_after_prefix,
            constraint=constraint,
        )
        try:
            result = await until_disconnect(request, batcher.submit(chat_request))
        except ClientGone:  # nobody reads this; the generation was dropped or stopped
            return openai_error(499, "the client closed the request", "client_closed_request")
        if isinstance(result, ModelError):
            if result.bad_request:  # e.g. a prompt longer than the context: the client's to fix
                return openai_error(400, f"cannot serve this request: {result}", param="messages")
            return openai_error(500, f"generation failed: {result}", "server_error")
        tops: list[TopK] | list[None] = [None] * len(result)
        prompt_ids = result[0].prompt_ids if result else None
        if top_k and prompt_ids and all(c.completion_ids is not None for c in result):
            try:
                tops = await asyncio.to_thread(
                    scorer, list(prompt_ids), [list(c.completion_ids or []) for c in result], top_k
                )
            except Exception as e:  # noqa: BLE001 - e.g. out of memory: this request fails, the server goes on
                return openai_error(500, f"top_logprobs failed: {type(e).__name__}: {e}", "server_error")
        choices = []
        for i, c in enumerate(result):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "logprobs": None,
                "forced_tokens": c.forced_tokens,
            }
            if body.logprobs:
                choice["logprobs"] = _logprobs(c, tokenizer, bool(body.return_tokens_as_token_ids), tops[i])
            if body.return_token_ids:
                choice["token_ids"] = c.completion_ids
            if c.constraint is not None:  # what masked it: the whitelist its log-probs are renormalized over
                choice["constraint"] = c.constraint
            choices.append(choice)
        prompt_tokens = result[0].prompt_tokens if result else 0
        completion_tokens = sum(c.completion_tokens for c in result)
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if body.return_token_ids:
            response["prompt_token_ids"] = result[0].prompt_ids if result else None
        return JSONResponse(response)

    return app
