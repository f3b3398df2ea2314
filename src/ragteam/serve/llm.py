"""An OpenAI-compatible chat server over any ChatModel, batching concurrent requests into one `chat()` call.

Routes: `POST /v1/chat/completions` (messages, temperature, top_p, max_tokens / max_completion_tokens, stop,
n, seed, logprobs, top_logprobs and the extensions below; no streaming), `GET /v1/models`, `GET /health` (with
the batching counters and the decoder's `max_batch_tokens`).

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

Batching (`ragteam.serve.batcher`): requests go into a queue; a single loop takes the first waiting request,
gathers whatever else arrives within `batch_wait_ms` (up to `max_batch_size` requests) and runs
`model.chat(batch)` in a worker thread. While a batch decodes, new requests queue up and form the next batch,
so under load batches fill by themselves. The local model decodes a batch in pieces that fit a token budget
(`serve llm --max-batch-tokens`: rows x longest prompt and completion), so a long request runs apart from the
short ones, and a piece that runs out of memory is run again row by row (`ragteam.llm.decoder`).

Scheduling by step. With a model that takes the serving hooks (`LocalChatModel.chat(cancelled=, on_result=)`),
each request is answered as soon as its own rows finish, not when the longest request of its batch does, and
a client that disconnects cancels its generation: dropped from the queue if it waits, out of the batch at the
next decoding step if it runs (`/health` counts `cancelled`). Requests that arrive while a batch decodes wait
for that batch: at most `max_tokens_limit` decoding steps, the operator's cap on any one request (lower it to
bound the wait; a request asking for more is refused 400).

Errors are OpenAI-shaped `{"error": {"message", "type", "param"}}`: 400 for bad JSON, bad fields, text that is
not encodable (a lone surrogate) or a prompt longer than the model's context (decided before the model thread
sees it when it is long: `ragteam.serve.llm_prompt`; else `ModelError.bad_request`), 401
without the API key (`api_key`), 404 for an unknown model name, 408 for a body that does not arrive in time,
413 for an oversize body (refused from its Content-Length, before reading it) or a request that runs out of
memory decoding alone (`ModelError.too_large`, the message naming its tokens and the batch budget), 500 when
the model fails a request. An integer of more digits than Python converts (4300) is a 400 naming its field, not a body the
parser fails on. `/v1/load_weights` answers 400 naming the folder when it does not exist, is not a folder,
holds a `*.safetensors` that is no regular file (a FIFO would block the reader) or no readable weights; the
path is checked with `stat` in a worker thread, never opened on the event loop. A batch the model crashes on is run again one request at a time, so only the request that crashes it
fails and no client sees another's error. A client that disconnects is answered 499 to nobody (its request
cancelled, above). The server never dies on input. FastAPI's docs routes are off unless `docs=True`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import stat
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ragteam.llm.base import ChatModel, ChatRequest, ChatResult, ModelError, Sampling
from ragteam.serve.batcher import Pending, RequestBatcher, settle
from ragteam.serve.guard import (
    BodyError,
    ClientGone,
    check_read_timeout,
    loads_json,
    read_body,
    until_disconnect,
)
from ragteam.serve.llm_logprobs import TopK, choice_logprobs, top_k_scorer
from ragteam.serve.llm_prompt import PromptGuard
from ragteam.serve.llm_request import ChatCompletionBody, forced_prefix, structured_output
from ragteam.serve.openai_api import models, openai_app, openai_error, read_openai_body


class Batcher(RequestBatcher[ChatRequest]):
    """Gathers concurrent requests into batches for one `model.chat` call at a time (run in a worker thread).

    A request the model fails on, alone, is answered its `ModelError` (a value, as `model.chat` answers)."""

    def __init__(self, model: ChatModel, max_batch_size: int, batch_wait_ms: float) -> None:
        super().__init__(max_batch_size, batch_wait_ms)
        self.model = model
        params = inspect.signature(model.chat).parameters
        self.steps = "cancelled" in params and "on_result" in params  # the serving hooks (LocalChatModel)

    @property
    def cancelled(self) -> int:
        """Requests whose client went away (dropped from the queue or stopped mid-batch)."""
        return self.dropped + self.left

    async def handle(self, batch: list[Pending[ChatRequest]]) -> None:
        for p, result in zip(batch, await self._chat(batch)):
            settle(p.future, result)

    def fail(self, pending: Pending[ChatRequest], error: Exception) -> None:
        where = getattr(self.model, "name", "model")
        settle(pending.future, ModelError(f"{type(error).__name__}: {error}", where=where))

    async def _chat(self, batch: list[Pending[ChatRequest]]) -> list[ChatResult]:
        """One `model.chat` over the batch in a worker thread; with a model that takes the serving hooks,
        requests whose client has gone leave the batch and each request is answered as soon as it ends."""
        requests = [p.item for p in batch]
        if not self.steps:
            results = await asyncio.to_thread(self.model.chat, requests)
        else:
            loop = asyncio.get_running_loop()
            futures = [p.future for p in batch]

            def cancelled(i: int) -> bool:  # in the decoding thread: a read of the future's state
                return futures[i].cancelled()

            def on_result(i: int, result: ChatResult) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
                    loop.call_soon_threadsafe(settle, futures[i], result)

            results = await asyncio.to_thread(
                self.model.chat, requests, cancelled=cancelled, on_result=on_result
            )
        if len(results) != len(requests):
            raise RuntimeError(f"model returned {len(results)} results for {len(requests)} requests")
        return results


def weights_folder_problem(path: str) -> str | None:
    """Why `path` is no folder of weights to load, or None: it is missing, not a folder, or a `*.safetensors`
    in it is not a regular file. Only `stat` is called (it never opens a file), in a worker thread: opening a
    FIFO named `model.safetensors` blocks, and safetensors opens it holding the GIL, which froze every route
    of the server (`/health` too) until something wrote to the pipe."""
    try:
        if not os.path.lexists(path):
            return "does not exist (no *.safetensors weights to load)"
        if not os.path.isdir(path):
            return "is not a folder"
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.endswith(".safetensors") and not stat.S_ISREG(os.stat(entry.path).st_mode):
                    return f"{entry.name} is not a regular file (a pipe, a device or a folder?)"
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, a dangling link, no permission
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return f"cannot be opened: {reason}"
    return None


async def _load_weights(model: ChatModel, served_name: str, data: Any) -> JSONResponse:
    """`POST /v1/load_weights`: a 400 naming the folder when it is missing, not a folder, holds a
    `*.safetensors` that is no regular file, or its weights do not load; 500 only when the model fails on
    weights that read fine. Nothing of the path is touched on the event loop."""
    from ragteam.config import short_repr

    path = data.get("path") if isinstance(data, dict) else None
    if not isinstance(path, str) or not path:
        return openai_error(400, 'body must be {"path": "<folder with *.safetensors>"}', param="path")
    loader = getattr(model, "load_weights", None)
    if loader is None:
        return openai_error(400, f"model {served_name!r} cannot load weights at run time")
    shown = short_repr(path, 300)
    if problem := await asyncio.to_thread(weights_folder_problem, path):
        return openai_error(400, f"weights folder {shown} {problem}", param="path")
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


@dataclass
class LLMServer:
    """What the routes of one LLM server read (`app.state.server`): the model, its batcher and the limits."""

    model: ChatModel
    served_name: str
    batcher: Batcher
    max_n: int
    max_tokens_limit: int
    default_max_tokens: int
    max_body_bytes: int
    read_timeout: float
    tokenizer: Any  # names the tokens of `logprobs`; a bare ChatModel has none
    scorer: Any  # top_logprobs > 0: a forward pass over the local model; None otherwise
    guard: PromptGuard | None  # a prompt too long for the context: refused before the model thread


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
    check_read_timeout(read_timeout)
    batcher = Batcher(model, max_batch_size or int(getattr(model, "max_batch_size", 32)), batch_wait_ms)
    app = openai_app(f"ragteam LLM server: {served_name}", batcher, served_name, docs, api_key)
    app.state.server = LLMServer(
        model,
        served_name,
        batcher,
        max_n,
        max_tokens_limit,
        default_max_tokens,
        max_body_bytes,
        read_timeout,
        getattr(model, "tokenizer", None),
        top_k_scorer(model),
        PromptGuard.for_model(model),
    )
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    if allow_weight_updates:
        app.add_api_route("/v1/load_weights", load_weights, methods=["POST"])
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    return app


# ---- the routes: each reads its server from `request.app.state.server` ------------------------------------


async def health(request: Request) -> dict[str, Any]:
    """`GET /health`: the batching counters and the decoder's token budget."""
    s: LLMServer = request.app.state.server
    batcher, guard = s.batcher, s.guard
    return {
        "status": "ok",
        "model": s.served_name,
        "requests": batcher.requests,
        "cancelled": batcher.cancelled,
        "batches": batcher.batches,
        "max_batch_seen": batcher.max_batch_seen,
        "batch_sizes": {str(k): v for k, v in sorted(batcher.batch_sizes.items())},
        "max_batch_tokens": getattr(s.model, "max_batch_tokens", None),  # the decoder's budget; None: none
        "prompt_guard": guard and {"tokenized": guard.tokenized, "refused": guard.refused},
    }


async def load_weights(request: Request) -> JSONResponse:
    """`POST /v1/load_weights` (only with `allow_weight_updates`): `_load_weights` on the JSON body."""
    s: LLMServer = request.app.state.server
    try:
        data = loads_json(await read_body(request, 65_536, s.read_timeout))
    except BodyError as e:
        return openai_error(e.status, e.message)
    except RecursionError:
        return openai_error(400, "request body is not valid JSON: nested too deeply")
    except (ValueError, UnicodeDecodeError) as e:
        return openai_error(400, f"request body is not valid JSON: {e}")
    return await _load_weights(s.model, s.served_name, data)


async def chat_completions(request: Request) -> JSONResponse:
    """`POST /v1/chat/completions`: the body checked (`_chat_request`), batched with the other requests,
    answered in OpenAI's shape (`_completion`)."""
    s: LLMServer = request.app.state.server
    body = await read_openai_body(
        request, ChatCompletionBody, s.served_name, s.max_body_bytes, s.read_timeout
    )
    if isinstance(body, JSONResponse):
        return body
    chat_request = await _chat_request(s, body)
    if isinstance(chat_request, JSONResponse):
        return chat_request
    try:
        result = await until_disconnect(request, s.batcher.submit(chat_request))
    except ClientGone:  # nobody reads this; the generation was dropped or stopped
        return openai_error(499, "the client closed the request", "client_closed_request")
    if isinstance(result, ModelError):
        if result.too_large:  # ran out of memory alone: the message names its size and the batch budget
            return openai_error(413, f"cannot serve this request: {result}", param="messages")
        if result.bad_request:  # e.g. a prompt longer than the context: the client's to fix
            return openai_error(400, f"cannot serve this request: {result}", param="messages")
        return openai_error(500, f"generation failed: {result}", "server_error")
    tops: list[TopK] | list[None] = [None] * len(result)
    top_k = body.top_logprobs or 0
    prompt_ids = result[0].prompt_ids if result else None
    if top_k and prompt_ids and all(c.completion_ids is not None for c in result):
        try:
            tops = await asyncio.to_thread(
                s.scorer, list(prompt_ids), [list(c.completion_ids or []) for c in result], top_k
            )
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: this request fails, the server goes on
            return openai_error(500, f"top_logprobs failed: {type(e).__name__}: {e}", "server_error")
    return JSONResponse(_completion(s, body, result, tops))


async def _chat_request(s: LLMServer, body: ChatCompletionBody) -> ChatRequest | JSONResponse:
    """The `ChatRequest` a checked body asks for, or the 400 naming what this server cannot serve."""
    if body.stream:
        return openai_error(400, "stream=true is not supported by this server", param="stream")
    if body.n > s.max_n:
        return openai_error(400, f"n must be between 1 and {s.max_n}, got {body.n}", param="n")
    max_tokens = body.max_completion_tokens or body.max_tokens or s.default_max_tokens
    if max_tokens > s.max_tokens_limit:
        return openai_error(
            400,
            f"max_tokens must be between 1 and {s.max_tokens_limit}, got {max_tokens}",
            param="max_tokens",
        )
    top_k = body.top_logprobs or 0
    if top_k and not body.logprobs:  # as OpenAI and vLLM
        return openai_error(
            400,
            "top_logprobs needs logprobs: true (when using top_logprobs, set logprobs)",
            param="top_logprobs",
        )
    if top_k and s.scorer is None:
        return openai_error(
            400,
            f"top_logprobs > 0 is not supported by this server's backend ({type(s.model).__name__}); only 0",
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
    prefix = forced_prefix(body, messages)
    if isinstance(prefix, JSONResponse):
        return prefix
    if s.guard is not None and (long := await s.guard.problem([m["content"] for m in messages] + [prefix])):
        return openai_error(400, f"cannot serve this request: {long}", param="messages")
    constraint = structured_output(body, s.model)
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
    return ChatRequest(
        messages=messages,  # type: ignore[arg-type]
        sampling=sampling,
        prefix=prefix,
        sample_after_prefix=body.sample_after_prefix,
        constraint=constraint,
    )


def _completion(
    s: LLMServer, body: ChatCompletionBody, result: list[Any], tops: list[TopK] | list[None]
) -> dict[str, Any]:
    """OpenAI's `chat.completion` object for the choices the model returned (and vLLM's token-id fields)."""
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
            choice["logprobs"] = choice_logprobs(
                c, s.tokenizer, bool(body.return_tokens_as_token_ids), tops[i]
            )
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
        "model": s.served_name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if body.return_token_ids:
        response["prompt_token_ids"] = result[0].prompt_ids if result else None
    return response
