"""A team behind OpenAI's chat API: `POST /v1/chat/completions` runs one episode of a workflow per request.

What `ragteam serve team` runs. To a client the team is a model: the last user message is the question, the
team's answer is the assistant message's content, and `/v1/models` lists one model, the served name (the
workflow's, by default). Any OpenAI client works (`openai`, curl, LangChain).

    client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="KEY")
    r = client.chat.completions.create(model="c3po", messages=[{"role": "user", "content": "Who ...?"}],
                                       extra_body={"ragteam": {"trace": True}})
    r.choices[0].message.content, r.model_extra["ragteam"]["trace"]   # the answer, the episode tree

Batching: the engine is what batches (policy acts, LLM calls and retrievals of many episodes go out as one
call each), so requests are gathered into one `Engine.run`: a loop takes the first waiting question, gathers
whatever else arrives within `batch_wait_ms` (up to `max_batch` questions) and runs them together in a worker
thread. Each request is answered as soon as its own episode finishes, not when the whole run does. Questions
that arrive while a run goes on wait for it to end and form the next run (the engine admits no question into
a run that has started). A client that disconnects while its question waits is dropped from the next run; one
whose episode already runs is answered to nobody (the engine cannot stop one episode of a run).

Every request uses the question id `ask`, as `ragteam ask` does, so seeds (derived from the question id) and
therefore answers are the ones `ragteam ask` gives with the same flags. Decoding is the server's: sampling
fields of the request (temperature, top_p, max_tokens, seed) are checked as `serve llm` checks them (NaN,
top_p 7 or a 5,000-digit max_tokens is a 400) and then ignored; the team's settings are the operator's
`--rollout.*` flags.

Extensions. `"ragteam": {"trace": true}` in the body adds the episode tree (as trace files store it,
`Episode.to_dict`) to the response's non-standard `ragteam` field, which always holds the episode's `status`.
`usage` sums the prompt and completion tokens of every policy and LLM call of the episode.

Streaming (`"stream": true`): Server-Sent Events in OpenAI's `chat.completion.chunk` shape. The first chunk
(role) is sent at once, keep-alive comments while the episode runs, then the answer in word-sized chunks, a
final chunk with `finish_reason` (and the `ragteam` field), a usage chunk when `stream_options.include_usage`,
and `data: [DONE]`. An episode that fails mid-stream sends an `{"error": ...}` event (OpenAI clients raise).

Startup (`ragteam serve team`): the team is built (indexes, models) and `warm_up` loads what the first
question would otherwise wait for (a dense query encoder, a local model's first forward pass), each part
announced with its seconds, before the port is announced; `/health` says `ready` (with `startup_s`), 503
while the batching loop is not yet running. Memory: the local models decode in batches cut by
`--max-batch-tokens` (`ragteam.llm.decoder`); a question whose model call runs out of memory alone is a 413
naming its size and the budget, the questions batched with it answered as if it had not been there.

Errors are OpenAI-shaped `{"error": {"message", "type", "param", "code"}}`, as the LLM server's: 400 for bad
JSON, bad fields (a sampling field out of range, an `n` or `max_tokens` that is not an integer), no user
message, an empty, overlong or unencodable question, `n` other than 1 or content that is not text; 401 without the API key; 404 for another model name; 408 / 413 for a slow or oversize body
(refused from its Content-Length); 500 when no path of the episode reached an answer; 499, read by nobody, to
a client that disconnected before its answer. The server never dies on input; a crashing run is retried one question at a time, so only the question that crashes it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from ragteam.llm.base import TOO_LARGE, ChatRequest, ModelError, Sampling
from ragteam.protocol import Workflow
from ragteam.rollout.engine import Engine
from ragteam.rollout.tree import Episode
from ragteam.serve.batcher import Pending, RequestBatcher, settle
from ragteam.serve.guard import ClientGone, check_read_timeout, until_disconnect
from ragteam.serve.openai_api import models, openai_app, openai_error, openai_error_body, read_openai_body
from ragteam.types import Question

QUESTION_ID = "ask"
"""The question id of every served question (as `ragteam ask`'s): seeds derive from it, so answers repeat."""


# ---- the request -----------------------------------------------------------------------------------------


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text or "" for p in self.content)

    def other_parts(self) -> list[str]:
        """The types of the content parts that are not text (an image, audio): a team reads text only."""
        return (
            [] if not isinstance(self.content, list) else [p.type for p in self.content if p.type != "text"]
        )


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class _Extension(BaseModel):
    """The body's `ragteam` field. Unknown keys are refused: a typo (`"trcae"`) should not pass silently."""

    model_config = ConfigDict(extra="forbid")
    trace: StrictBool = False


class TeamBody(BaseModel):
    """The fields of a chat-completions request the team server reads (others are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: _StreamOptions | None = None
    n: StrictInt = 1
    ragteam: _Extension | None = None
    # Sampling fields are the operator's (module docstring), so a valid value is ignored; one no model could
    # take (NaN, top_p 7, a 5,000-digit max_tokens) is a 400, as `serve llm` answers it.
    temperature: float | None = Field(None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    seed: StrictInt | None = None


def question_of(body: TeamBody, max_chars: int) -> str | JSONResponse:
    """The question (the last user message's text, stripped), or a 400 saying what is wrong with it."""
    index = next((i for i in range(len(body.messages) - 1, -1, -1) if body.messages[i].role == "user"), None)
    if index is None:
        return openai_error(
            400, "messages holds no user message: the last user message is the question", param="messages"
        )
    param = f"messages.{index}.content"
    if others := body.messages[index].other_parts():
        return openai_error(
            400, f"the question must be text; it has {', '.join(others)} content", param=param
        )
    text = body.messages[index].text().strip()
    if not text:
        return openai_error(400, "the question (the last user message) is empty", param=param)
    if len(text) > max_chars:
        return openai_error(400, f"the question has {len(text)} characters; at most {max_chars}", param=param)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: valid JSON, but no text the team can read
        return openai_error(
            400, f"the question is not valid Unicode text ({e.reason} at character {e.start})", param=param
        )
    return text


# ---- batching questions into engine runs -------------------------------------------------------------------


class TeamBatcher(RequestBatcher[Question]):
    """Gathers the questions of concurrent requests into one `Engine.run` at a time (in a worker thread).

    `batch_sizes` counts runs by how many questions they held: what shows that concurrent requests share runs
    (and so share the engine's batched model calls, counted in `engine.calls`)."""

    def __init__(self, engine: Engine, workflow: Workflow, max_batch: int, batch_wait_ms: float) -> None:
        super().__init__(max_batch, batch_wait_ms)
        self.engine, self.workflow = engine, workflow

    async def ask(self, text: str) -> Episode:
        """The episode of `text`, run together with whatever else is waiting."""
        return await self.submit(Question(id=QUESTION_ID, question=text, golden_answers=[]))

    async def handle(self, batch: list[Pending[Question]]) -> None:
        """One engine run over `batch`; each future is resolved as its episode finishes."""
        loop = asyncio.get_running_loop()
        by_question = {id(p.item): p.future for p in batch}

        def finished(episode: Episode) -> None:  # in the engine's thread
            fut = by_question.get(id(episode.question))
            if fut is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: the server is stopping
                    loop.call_soon_threadsafe(settle, fut, episode)

        questions = [p.item for p in batch]
        report = await asyncio.to_thread(self.engine.run, self.workflow, questions, on_episode=finished)
        for p, episode in zip(
            batch, report.episodes
        ):  # any not yet answered (none, unless on_episode failed)
            settle(p.future, episode)


# ---- startup ------------------------------------------------------------------------------------------------


def warm_up(engine: Engine, say: Callable[[str], None] = print) -> dict[str, float]:
    """Load now what the first question would otherwise wait for; seconds per part, each announced by `say`.

    Why: parts load lazily (a dense retriever's query encoder on its first search, a local model's kernels on
    its first forward pass), so without this the first questions after "serving on" wait for it. One search
    and one one-token reply per distinct model; a model that fails its warm-up is reported, not fatal (an
    HTTP backend that is not up yet answers later)."""
    seconds: dict[str, float] = {}
    if engine.retriever is not None:
        start = time.monotonic()
        engine.retriever.search(["warm up"], 1)
        seconds["retriever"] = round(time.monotonic() - start, 3)
        say(f"ragteam: retriever {engine.retriever.name} ready ({seconds['retriever']:.1f} s)")
    warmed: list[Any] = []
    for role, model in (("policy", engine.policy), ("llm", engine.llm)):
        label = "policy" if role == "policy" else "LLM"
        if model is None or any(model is m for m in warmed):
            continue
        warmed.append(model)
        start = time.monotonic()
        [result] = model.chat([ChatRequest([{"role": "user", "content": "warm up"}], Sampling(max_tokens=1))])
        seconds[role] = round(time.monotonic() - start, 3)
        name = getattr(model, "name", type(model).__name__)
        if isinstance(result, ModelError):
            say(f"ragteam: warning: the {label} {name} failed its warm-up: {result}")
        else:
            say(f"ragteam: {label} {name} ready ({seconds[role]:.1f} s)")
    return seconds


# ---- the response ------------------------------------------------------------------------------------------


def usage_of(episode: Episode) -> dict[str, int]:
    """Prompt and completion tokens of every policy and LLM call of the episode (OpenAI's `usage`)."""
    calls = [n.completion for n in episode.nodes if n.completion is not None]
    prompt = sum(c.prompt_tokens for c in calls)
    completion = sum(c.completion_tokens for c in calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def extension_of(episode: Episode, trace: bool) -> dict[str, Any]:
    """The response's `ragteam` field: the episode's status, and the episode itself when asked for."""
    out: dict[str, Any] = {"status": episode.status}
    if trace:
        out["trace"] = episode.to_dict()
    return out


def _words(text: str) -> list[str]:
    """`text` in stream chunks of one word each (with the spaces after it); joined they give `text` back."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _failure(episode: Episode) -> tuple[int, str, str]:
    """Status, message and type of a failed episode's error: 413 when a model call of it ran out of memory
    alone (the message names its size and the batch budget), else 500."""
    message = f"the team did not answer: {episode.error or 'no path of the episode reached an answer'}"
    if TOO_LARGE in (episode.error or ""):
        return 413, message, "invalid_request_error"
    return 500, message, "server_error"


# ---- the app -------------------------------------------------------------------------------------------------


@dataclass
class TeamServer:
    """What the routes of one team server read (`app.state.server`): the team, its batcher and the limits."""

    engine: Engine
    workflow: Workflow
    served_name: str
    batcher: TeamBatcher
    max_question_chars: int
    max_body_bytes: int
    read_timeout: float
    keepalive_s: float
    startup: dict[str, float] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()


def make_app(
    engine: Engine,
    workflow: Workflow,
    served_name: str,
    max_batch: int | None = None,
    batch_wait_ms: float = 10.0,
    max_question_chars: int = 8000,
    max_body_bytes: int = 1_000_000,
    api_key: str | None = None,
    docs: bool = False,
    read_timeout: float = 30.0,
    keepalive_s: float = 15.0,
    startup: dict[str, float] | None = None,
    aliases: tuple[str, ...] = (),
) -> FastAPI:
    """A FastAPI app answering chat completions with `workflow` run by `engine`; `app.state.batcher` holds the
    batching counters. `max_batch` defaults to the engine's `max_concurrent` (episodes in flight at once).
    A request's `model` is `served_name` or one of `aliases` (the --workflow module path of a named class).

    With `api_key`, every route but /health answers 401 unless the request carries `Authorization: Bearer KEY`.
    A body must arrive within `read_timeout` seconds (408 otherwise); a streamed answer sends a keep-alive
    comment every `keepalive_s` seconds while its episode runs. `startup`: the seconds `warm_up` took per part,
    shown by /health beside `ready` (false, with a 503, until the batching loop runs)."""
    check_read_timeout(read_timeout)
    batcher = TeamBatcher(engine, workflow, max_batch or engine.config.max_concurrent, batch_wait_ms)
    app = openai_app(f"ragteam team server: {served_name}", batcher, served_name, docs, api_key)
    app.state.server = TeamServer(
        engine,
        workflow,
        served_name,
        batcher,
        max_question_chars,
        max_body_bytes,
        read_timeout,
        keepalive_s,
        startup or {},
        aliases,
    )
    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"])
    return app


# ---- the routes: each reads its server from `request.app.state.server` ------------------------------------


async def health(request: Request) -> JSONResponse:
    """`GET /health`: `ready` (503 until the batching loop runs), the startup seconds and the counters."""
    s: TeamServer = request.app.state.server
    ready = s.batcher.ready
    return JSONResponse(_health(s, ready), status_code=200 if ready else 503)


def _health(s: TeamServer, ready: bool) -> dict[str, Any]:
    batcher = s.batcher
    return {
        "status": "ok" if ready else "starting",
        "ready": ready,
        "startup_s": s.startup,
        "model": s.served_name,
        "workflow": getattr(s.workflow, "name", type(s.workflow).__name__),
        "requests": batcher.requests,
        "dropped": batcher.dropped,
        "running": batcher.running,
        "runs": batcher.batches,
        "max_run_seen": batcher.max_batch_seen,
        "run_sizes": {str(k): v for k, v in sorted(batcher.batch_sizes.items())},
        "engine_calls": dict(s.engine.calls),
    }


async def chat_completions(request: Request) -> Any:
    """`POST /v1/chat/completions`: one episode for the last user message, answered whole or streamed."""
    s: TeamServer = request.app.state.server
    body = await read_openai_body(
        request, TeamBody, s.served_name, s.max_body_bytes, s.read_timeout, aliases=s.aliases
    )
    if isinstance(body, JSONResponse):
        return body
    if body.n != 1:
        return openai_error(
            400, f"n must be 1 (a team gives one answer per question), got {body.n}", param="n"
        )
    question = question_of(body, s.max_question_chars)
    if isinstance(question, JSONResponse):
        return question
    trace = bool(body.ragteam and body.ragteam.trace)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _stream(s, question, completion_id, trace, usage),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )
    try:
        episode = await until_disconnect(request, s.batcher.ask(question))
    except ClientGone:
        return openai_error(499, "the client closed the request", "client_closed_request")
    except Exception as e:  # noqa: BLE001 - the engine crashed on this question alone
        return openai_error(500, f"the team failed: {type(e).__name__}: {e}", "server_error")
    if episode.status == "failed":
        return openai_error(*_failure(episode))
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": s.served_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": episode.answer},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": usage_of(episode),
            "ragteam": extension_of(episode, trace),
        }
    )


async def _stream(
    s: TeamServer, question: str, completion_id: str, trace: bool, usage: bool
) -> AsyncIterator[bytes]:
    """The SSE events of one streamed answer. Starlette cancels this generator when the client goes;
    the `finally` then cancels the question, so a waiting one is dropped from the next run."""
    created_at = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created_at,
            "model": s.served_name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    task = asyncio.ensure_future(s.batcher.ask(question))
    try:
        yield _sse(chunk({"role": "assistant", "content": ""}))
        while True:
            done, _ = await asyncio.wait({task}, timeout=s.keepalive_s)
            if done:
                break
            yield b": keep-alive\n\n"  # SSE comment: clients skip it, proxies see a live connection
        try:
            episode = task.result()
        except Exception as e:  # noqa: BLE001 - the engine crashed on this question alone
            yield _sse(openai_error_body(500, f"the team failed: {type(e).__name__}: {e}", "server_error"))
            return
        if episode.status == "failed":
            yield _sse(openai_error_body(*_failure(episode)))
            return
        for word in _words(episode.answer):
            yield _sse(chunk({"content": word}))
        yield _sse(chunk({}, "stop", ragteam=extension_of(episode, trace)))
        if usage:
            yield _sse({**chunk({}), "choices": [], "usage": usage_of(episode)})
        yield _sse("[DONE]")
    finally:
        task.cancel()
