"""OpenAI-compatible chat backend over HTTP (vLLM, SGLang, OpenAI, `ragteam serve llm`).

`chat()` is a synchronous batch call: it sends the batch's requests concurrently (at most `concurrency` in
flight, on a thread pool sharing one httpx connection pool) and returns when all have answered. A request that
fails on a connection error, a timeout, HTTP 429 or 5xx is retried with exponential backoff (plus jitter,
honouring Retry-After); after `retries` retries, or at once on another 4xx, it becomes a `ModelError` naming
the endpoint. One bad request never raises or sinks the others.

Deadlines. `timeout` bounds each HTTP attempt as a whole, from connecting to the reply's last byte: every
socket read and write waits at most the time the attempt has left (`DeadlineBackend`), so a server that
trickles its reply a byte at a time is cut off at the deadline, not kept alive by each byte. A request's
attempts together take at most `max_call_seconds` = (retries + 1) x timeout + retries x max_backoff. Replies
are read up to `max_reply_bytes` (64 MB; refused from Content-Length when it says more), never whole first.

`n` samples are asked for with the `n` parameter; when a server returns fewer choices, the missing samples are
requested one at a time (with seed + j when a seed was given). Usage counts come from the server; with n > 1
and no token ids the completion tokens are split evenly over the choices (the API reports only their sum).

Token ids and log-probs (`logprobs=True`, the default): requests ask for `logprobs: true, top_logprobs: 0` and
vLLM's `return_tokens_as_token_ids: true, return_token_ids: true`. `Completion.completion_ids` come from the
choice's `token_ids`, else from `token_id:<id>` token strings; `logprobs` from `logprobs.content`;
`prompt_ids` from `prompt_token_ids`; `completion_tokens` is then exact per choice. What a server does not
return stays None (OpenAI's API gives log-probs but no ids). The log-probs are taken as the raw model's
(temperature 1), as `ragteam serve llm` and vLLM's default `logprobs_mode` (raw_logprobs) compute them. A
server that answers 400 naming those fields is asked again without them: first without vLLM's two, then
without any; the model remembers and does not ask that server again.

Forced prefix (`ChatRequest.prefix`, C-3PO's strategies): sent as vLLM spells it, a final assistant message
with `continue_final_message: true, add_generation_prompt: false`, and recorded as the in-process backend
records it (`ragteam.llm.local`), whichever server answers: the prefix's ids, tokenized on their own, are the
first `forced_tokens` of `completion_ids` with their log-probs, `prompt_ids` end with the assistant header,
`text` is the prefix followed by the continuation. So a trainer (which trains every completion token) trains
the forced strategy's tokens alike on both backends. `ragteam serve llm` answers that way already (its choices
carry `forced_tokens`; content, ids and log-probs start with the prefix) and the Completion keeps them. vLLM
counts the prefix as prompt: it returns the continuation only, its `prompt_token_ids` end with the prefix's
tokens. The client then gets the prefix's ids from the server's `/tokenize` (vLLM's, at the root beside `/v1`:
`{"prompt": prefix, "add_special_tokens": false}`, once per prefix), checks that the prompt ends with them,
moves them from `prompt_ids` to the head of `completion_ids`, and takes their log-probs from vLLM's
`prompt_logprobs` (asked as `prompt_logprobs: 0` on a request with a prefix: each prompt token's own
log-prob, the raw model's; a server that refuses the field is no longer asked, and the Completion's
`logprobs` are then None). `sample_after_prefix=False` is sent as `ragteam serve llm`'s `sample_after_prefix:
false` with `max_tokens: 1` and, when the server's `/tokenize` names the chat template's end-of-turn token (the
first token the template writes after an assistant message's content: it renders one message both open and
closed), vLLM's `allowed_token_ids: [that id]`: the one token vLLM samples is end-of-turn, its log-prob the raw
model's (vLLM computes log-probs before it masks), so the reply is the prefix closed by end-of-turn, as in
process. Where the exact record cannot be made (a server without `/tokenize`, a prompt that does not end with
the prefix's ids, a closing token other than end-of-turn), the Completion keeps the text (a closed reply: the
prefix alone) without ids or log-probs (`prompt_ids`, `completion_ids`, `logprobs` None): a trainer skips it
(`no_token_ids`) rather than train the prefix as prompt and the token after it as the strategy.

Constrained replies (`ChatRequest.constraint`, MMOA-RAG's Selector): `structured_output` chooses how the
constraint's regex is sent, as the server spells structured outputs: `vllm` sends `"structured_outputs":
{"regex": R}` (vLLM >= 0.10.2, the only form from 0.12; `ragteam serve llm` reads it too), `vllm-guided`
sends `"guided_regex": R` (vLLM before 0.12), `sglang` sends `"regex": R`, and `none` sends nothing (the reply
is then free; the role's parser still penalises a malformed one). `Completion.constraint` records the
constraint, the form it was sent in (`by`) and whether it was sent (`enforced`: asked for; a server that
ignores the field is not detected). vLLM and SGLang return the raw model's log-probs, not the constrained
distribution's, so a trainer scores such completions unmasked; `ragteam serve llm` enforces the regex by a
token whitelist and returns the masked log-probs with the whitelist (`constraint.allowed_ids` on the choice),
which the Completion keeps, so a trainer masks as the server did.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from ragteam.llm.base import ChatRequest, ChatResult, Completion, ModelError
from ragteam.llm.constraint import constraint_record
from ragteam.llm.http_deadline import (
    MAX_REPLY_BYTES,
    TRANSFER_HEADERS,
    ReplyTooLarge,
    deadline,
    deadline_transport,
    read_reply,
)
from ragteam.llm.openai_reply import (
    PROMPT_LOGPROBS,
    error_message,
    int_list,
    marks_forced,
    prompt_logprobs_tail,
    read_completions,
    retry_after,
)

RETRY_STATUS = frozenset({408, 409, 425, 429})
# What a request asks for beyond plain text, from the most to nothing: a server that rejects a level's fields
# gets the next level that drops every field its error named.
EXTRAS_LEVELS: tuple[dict[str, Any], ...] = (
    {"logprobs": True, "top_logprobs": 0, "return_tokens_as_token_ids": True, "return_token_ids": True},
    {"logprobs": True, "top_logprobs": 0},
    {},
)
# Asked of vLLM on a request with a forced prefix (module docstring): the prefix's log-probs (PROMPT_LOGPROBS, read
# by openai_reply.py), and the one token that closes a prefix-only reply. Each is dropped for good once the
# server refuses it.
ALLOWED_TOKEN_IDS = "allowed_token_ids"
STRUCTURED_OUTPUT = ("none", "vllm", "vllm-guided", "sglang")
"""How a constrained request's regex is sent (module docstring): not at all, or as that server spells it."""


def structured_output_fields(form: str, regex: str) -> dict[str, Any]:
    """The request-body fields that ask a server of kind `form` to make the reply match `regex`."""
    if form == "vllm":
        return {"structured_outputs": {"regex": regex}}
    if form == "vllm-guided":
        return {"guided_regex": regex}
    if form == "sglang":
        return {"regex": regex}
    if form == "none":
        return {}
    raise ValueError(f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT)}, got {form!r}")


def normalize_base_url(base_url: str) -> str:
    """Strip trailing slashes; a bare `http://host:port` gets the conventional `/v1`."""
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must look like http://host:port/v1, got {base_url!r}")
    if parts.path in ("", "/"):
        url += "/v1"
    return url


class OpenAIChatModel:
    """A ChatModel that calls `POST {base_url}/chat/completions` of an OpenAI-compatible server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 16,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        api_key: str | None = None,
        logprobs: bool = True,
        structured_output: str = "none",
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        from ragteam.config import check_number

        if concurrency < 1 or retries < 0:
            raise ValueError("need concurrency >= 1 and retries >= 0")
        check_number("timeout", timeout, 0, 86_400, low_open=True)  # inf: no deadline at all
        check_number("backoff", backoff, 0, 3600)
        check_number("max_backoff", max_backoff, 0, 3600)
        self.max_reply_bytes = int(check_number("max_reply_bytes", max_reply_bytes, 1))
        structured_output_fields(structured_output, "x")  # a ValueError naming the choices if unknown
        self.structured_output = structured_output
        self.base_url = normalize_base_url(base_url)
        self.endpoint = f"{self.base_url}/chat/completions"
        # vLLM serves /tokenize at the root, beside /v1 (module docstring: recording a forced prefix)
        root = self.base_url.removesuffix("/v1") if self.base_url.endswith("/v1") else self.base_url
        self.tokenize_url = f"{root}/tokenize"
        self.name = model
        self.model = model
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.concurrency = concurrency
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.logprobs = logprobs
        # index into EXTRAS_LEVELS; it only goes up, as servers reject fields
        self._extras_level = 0 if logprobs else len(EXTRAS_LEVELS) - 1
        self.stats = {"requests": 0, "http_calls": 0, "retries": 0, "errors": 0, "tokenize_calls": 0}
        self._stats_lock = threading.Lock()
        # forced prefixes over a server that counts them as prompt (vLLM): the fields it is asked for, and
        # what its /tokenize answered ("eot": the end-of-turn id; a prefix: its ids; None: it cannot say)
        self._ask = {PROMPT_LOGPROBS: True, ALLOWED_TOKEN_IDS: True}
        self._tokenized: dict[str, Any] = {}
        self._tokenize_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._init_lock = threading.Lock()

    @property
    def max_call_seconds(self) -> float:
        """The longest one request's HTTP attempts take together: each attempt at most `timeout` (connect to
        last byte), and a backoff of at most `max_backoff` between two."""
        return (self.retries + 1) * self.timeout + self.retries * self.max_backoff

    # picklable (e.g. to ship to a Ray worker): the client and the pool are rebuilt on first use
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_client", "_pool", "_init_lock", "_stats_lock", "_tokenize_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client, self._pool = None, None
        self._init_lock, self._stats_lock = threading.Lock(), threading.Lock()
        self._tokenize_lock = threading.Lock()

    def _resources(self) -> tuple[httpx.Client, ThreadPoolExecutor]:
        with self._init_lock:
            if self._client is None:
                key = self._api_key or os.environ.get(self.api_key_env)
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                limits = httpx.Limits(
                    max_connections=self.concurrency, max_keepalive_connections=self.concurrency
                )
                self._client = httpx.Client(
                    headers=headers,
                    timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                    transport=deadline_transport(limits=limits),
                )
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="openai-chat")
            assert self._pool is not None
            return self._client, self._pool

    def close(self) -> None:
        """Close the HTTP connections and the worker threads (the model reopens them if used again)."""
        with self._init_lock:
            if self._client is not None:
                self._client.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._client, self._pool = None, None

    def _count(self, key: str, k: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += k

    # ---- the ChatModel interface ---------------------------------------------------------------------------

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Send every request concurrently; per request its completions or a ModelError, in input order."""
        if not requests:
            return []
        _, pool = self._resources()
        futures = [pool.submit(self._answer, req) for req in requests]
        return [f.result() for f in futures]

    def _answer(self, req: ChatRequest) -> ChatResult:
        self._count("requests")
        try:
            s = req.sampling
            got = self._call(req, s.n, s.seed)
            if isinstance(got, ModelError):
                self._count("errors")
                return got
            completions = list(got[: s.n])
            j = len(completions)
            while len(completions) < s.n:  # the server gave fewer choices than asked for
                more = self._call(req, 1, None if s.seed is None else s.seed + j)
                if isinstance(more, ModelError):
                    self._count("errors")
                    return more
                if not more:
                    return ModelError(f"server returned no choices (asked for n={s.n})", where=self.endpoint)
                completions.extend(more[:1])
                j += 1
            return completions
        except Exception as e:  # noqa: BLE001 - never raise out of a batch
            self._count("errors")
            return ModelError(f"{type(e).__name__}: {e}", where=self.endpoint)

    def _payload(
        self, req: ChatRequest, n: int, seed: int | None, level: int, eot: int | None = None
    ) -> dict[str, Any]:
        s = req.sampling
        messages = [{"role": m["role"], "content": m["content"]} for m in req.messages]
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "n": n,
            **EXTRAS_LEVELS[level],
        }
        if req.prefix or not req.sample_after_prefix:
            messages.append({"role": "assistant", "content": req.prefix})
            payload.update(continue_final_message=True, add_generation_prompt=False)
            if req.prefix and level == 0 and self._ask[PROMPT_LOGPROBS]:
                payload[PROMPT_LOGPROBS] = 0  # vLLM: the forced prefix's log-probs (module docstring)
        if not req.sample_after_prefix:
            payload.update(sample_after_prefix=False, max_tokens=1)
            if eot is not None:
                payload[ALLOWED_TOKEN_IDS] = [eot]  # vLLM: the one token it samples closes the reply
        if s.stop:
            payload["stop"] = list(s.stop)
        if seed is not None:
            payload["seed"] = seed
        if req.constraint is not None:
            payload.update(structured_output_fields(self.structured_output, req.constraint.regex))
        return payload

    def _call(self, req: ChatRequest, n: int, seed: int | None) -> list[Completion] | ModelError:
        """One chat-completions call, made again with fewer extras if the server rejects them (see module)."""
        level = self._extras_level
        record = None
        if req.constraint is not None:
            form = self.structured_output
            record = constraint_record(req.constraint, form, form != "none")
        while True:
            eot = None
            if not req.sample_after_prefix and level == 0 and self._ask[ALLOWED_TOKEN_IDS]:
                eot = self._end_of_turn()
            payload = self._payload(req, n, seed, level, eot)
            got, status = self._post(payload, req, record)
            if not isinstance(got, ModelError) or status not in (400, 422):
                return got
            refused = [
                key
                for key in (PROMPT_LOGPROBS, ALLOWED_TOKEN_IDS)
                if key in payload and (key in got.message or key.replace("_", " ") in got.message)
            ]
            if refused:  # asked again without them, and never again of this server
                with self._stats_lock:
                    self._ask.update(dict.fromkeys(refused, False))
                continue
            lower = _fewer_extras(level, got.message)
            if lower is None:
                return got
            with self._stats_lock:
                self._extras_level = max(self._extras_level, lower)
            level = lower

    def _post(
        self, payload: dict[str, Any], req: ChatRequest, constraint: dict[str, Any] | None = None
    ) -> tuple[ChatResult, int | None]:
        """POST with retries: the Completions or a ModelError, and the HTTP status it ended on (if any).
        `constraint`: what each Completion records about the request's constraint (None: unconstrained)."""
        client, _ = self._resources()
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
            wait: float | None = None
            try:
                self._count("http_calls")
                resp = self._send(client, self.endpoint, payload)
            except (
                httpx.TimeoutException
            ) as e:  # connect, or the reply not whole within the attempt's deadline
                last = f"{type(e).__name__}: no complete reply within {self.timeout:g} s"
            except httpx.TransportError as e:  # connect / read / write errors
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            except ReplyTooLarge as e:
                return ModelError(str(e), where=self.endpoint), None
            else:
                if resp.status_code == 200:
                    try:
                        body = resp.json()
                        completions = read_completions(body, req.prefix, constraint)
                        if (req.prefix or not req.sample_after_prefix) and not marks_forced(body):
                            completions = [self._record_forced(c, body, req) for c in completions]
                        return completions, 200
                    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
                        message = f"malformed response ({type(e).__name__}: {e})"
                        return ModelError(message, where=self.endpoint), 200
                last = f"HTTP {resp.status_code}: {error_message(resp)}"
                if resp.status_code < 500 and resp.status_code not in RETRY_STATUS:
                    return ModelError(last, where=self.endpoint), resp.status_code
                wait = retry_after(resp)
            if attempt < self.retries:
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (1 + 0.25 * random.random())
                time.sleep(wait if wait is not None and wait <= self.max_backoff else delay)
        message = f"failed after {self.retries + 1} attempts; last error: {last}"
        return ModelError(message, where=self.endpoint), None

    def _send(self, client: httpx.Client, url: str, payload: dict[str, Any]) -> httpx.Response:
        """POST `payload` and read the reply whole, within `timeout` from the first byte sent to the last
        received (module docstring) and up to `max_reply_bytes`; the reply, already read."""
        with deadline(self.timeout), client.stream("POST", url, json=payload) as streamed:
            body = read_reply(streamed, self.max_reply_bytes)  # decoded: drop what said how it was sent
            headers = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() not in TRANSFER_HEADERS]
            return httpx.Response(
                streamed.status_code, headers=headers, content=body, request=streamed.request
            )

    # ---- a forced prefix the server counted as prompt (vLLM): recorded as completion tokens ---------------

    def _record_forced(self, c: Completion, body: dict[str, Any], req: ChatRequest) -> Completion:
        """`c` (a choice of a server that counts the forced prefix as prompt) as the local backend records
        it: the prefix's ids and log-probs moved from the prompt to the head of the completion; where that
        cannot be done exactly, the text without ids (module docstring)."""
        close = not req.sample_after_prefix
        text = req.prefix if close else c.text
        if c.prompt_ids is None or c.completion_ids is None:  # the server gave no ids: only the text is kept
            return replace(c, text=text, finish_reason="stop" if close else c.finish_reason)
        unrecorded = replace(
            c, text=text, prompt_ids=None, completion_ids=None, logprobs=None, forced_tokens=0
        )
        prefix_ids = self._prefix_ids(req.prefix)
        if prefix_ids is None:
            return unrecorded
        f, p = len(prefix_ids), len(c.prompt_ids) - len(prefix_ids)
        if p < 1 or c.prompt_ids[p:] != prefix_ids:  # the prompt's tokens across the prefix differ
            return unrecorded
        sampled, sampled_lp, finish = c.completion_ids, c.logprobs, c.finish_reason
        if close:  # the reply must be the prefix and end-of-turn, the token sent as the only one allowed
            eot = self._tokenized.get("eot")
            if eot is None or sampled[:1] != [eot]:
                return unrecorded
            sampled, sampled_lp, finish = [eot], None if sampled_lp is None else sampled_lp[:1], "stop"
        prefix_lp = prompt_logprobs_tail(body, c.prompt_ids, f)
        ids = prefix_ids + sampled
        return replace(
            c,
            text=text,
            finish_reason=finish,
            prompt_tokens=p,
            completion_tokens=len(ids),
            prompt_ids=c.prompt_ids[:p],
            completion_ids=ids,
            logprobs=None if prefix_lp is None or sampled_lp is None else prefix_lp + sampled_lp,
            forced_tokens=f,
        )

    def _prefix_ids(self, prefix: str) -> list[int] | None:
        """The ids of a forced prefix tokenized on its own (as the local backend tokenizes it), from the
        server's /tokenize, asked once per prefix; None when the server cannot say."""
        if not prefix:
            return []
        key = f"prefix:{prefix}"
        with self._tokenize_lock:
            if key not in self._tokenized:
                got = self._tokenize({"prompt": prefix, "add_special_tokens": False})
                if got is not _RETRY:
                    self._tokenized[key] = got
                return got if got is not _RETRY else None
            return self._tokenized[key]

    def _end_of_turn(self) -> int | None:
        """The chat template's end-of-turn id: the first token it writes after an assistant message's content
        (the message tokenized open, then closed, by the server's /tokenize); None when it cannot say."""
        with self._tokenize_lock:
            if "eot" not in self._tokenized:
                messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
                chat = {"messages": messages, "add_generation_prompt": False}
                open_ = self._tokenize({**chat, "continue_final_message": True})
                closed = self._tokenize({**chat, "continue_final_message": False})
                if open_ is _RETRY or closed is _RETRY:
                    return None
                eot = None
                if open_ is not None and closed is not None and len(closed) > len(open_):
                    eot = closed[len(open_)] if closed[: len(open_)] == open_ else None
                self._tokenized["eot"] = eot
            return self._tokenized["eot"]

    def _tokenize(self, body: dict[str, Any]) -> Any:
        """Token ids from the server's /tokenize (vLLM's): the list, None when the server has no such route or
        refuses the request (remembered), `_RETRY` when it failed for now (asked again next time)."""
        client, _ = self._resources()
        self._count("tokenize_calls")
        try:
            resp = self._send(client, self.tokenize_url, {"model": self.model, **body})
        except (httpx.TransportError, ReplyTooLarge):
            return _RETRY
        if resp.status_code >= 500 or resp.status_code in RETRY_STATUS:
            return _RETRY
        if resp.status_code != 200:
            return None
        try:
            return int_list(resp.json().get("tokens"))
        except (ValueError, TypeError, AttributeError):
            return None


_RETRY = object()  # a /tokenize answer that says nothing yet (a connection error, a 5xx): not remembered


def _fewer_extras(level: int, error: str) -> int | None:
    """The first level after `level` without any of its fields that `error` names; None if it names none."""
    named = [key for key in EXTRAS_LEVELS[level] if key in error]
    if not named:
        return None
    for lower in range(level + 1, len(EXTRAS_LEVELS)):
        if not any(key in EXTRAS_LEVELS[lower] for key in named):
            return lower
    return None
