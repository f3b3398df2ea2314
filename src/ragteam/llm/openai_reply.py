"""Reading an OpenAI-compatible server's answers (`openai_http.OpenAIChatModel`): its choices as `Completion`s
(token ids, log-probs, the forced prefix, the constraint it masked with), vLLM's prompt log-probs for a forced
prefix, its error text and its Retry-After. Pure functions of the response body; what they read, and why, is
in `openai_http`'s module docstring.
"""

from __future__ import annotations

from typing import Any

import httpx

from ragteam.llm.base import Completion

TOKEN_ID_PREFIX = "token_id:"  # vLLM's spelling of a token with return_tokens_as_token_ids
PROMPT_LOGPROBS = "prompt_logprobs"
"""Asked of vLLM on a request with a forced prefix: the prefix's log-probs (each prompt token's own)."""


def error_message(resp: httpx.Response) -> str:
    """The server's error text: OpenAI's `{"error": {"message"}}`, FastAPI's `{"detail"}`, or the raw body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500].strip() or resp.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]


def marks_forced(body: dict[str, Any]) -> bool:
    """Whether the server says how many leading completion tokens were forced (`ragteam serve llm`: its
    content, ids and log-probs include the prefix)."""
    return any(c.get("forced_tokens") is not None for c in body.get("choices") or [])


def prompt_logprobs_tail(body: dict[str, Any], prompt_ids: list[int], f: int) -> list[float] | None:
    """The log-probs of the last `f` prompt tokens from vLLM's `prompt_logprobs` (one entry per prompt token,
    None for the first, each `{"<id>": {"logprob": ...}, ...}` holding the prompt token's own), or None when
    the response has none for them."""
    if f == 0:
        return []
    table = body.get(PROMPT_LOGPROBS)
    if table is None:  # vLLM's completions API has it per choice
        table = next(
            (c.get(PROMPT_LOGPROBS) for c in body.get("choices") or [] if c.get(PROMPT_LOGPROBS)), None
        )
    if not isinstance(table, list) or len(table) != len(prompt_ids):
        return None
    out = []
    for token, entry in zip(prompt_ids[-f:], table[-f:]):
        own = entry.get(str(token)) if isinstance(entry, dict) else None
        if not isinstance(own, dict) or own.get("logprob") is None:
            return None
        out.append(float(own["logprob"]))
    return out


def read_completions(
    body: dict[str, Any], prefix: str, constraint: dict[str, Any] | None = None
) -> list[Completion]:
    """The response's choices as Completions (module docstring: ids, log-probs, the forced prefix, the
    constraint: `constraint` as the request sent it, with the whitelist `ragteam serve llm` masked with)."""
    choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
    usage = body.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens", 0) or 0)
    total_completion = int(usage.get("completion_tokens", 0) or 0)
    per_choice = total_completion // max(1, len(choices))
    prompt_ids = body.get("prompt_token_ids")  # vLLM's chat API has it here, its completions API per choice
    out = []
    for c in choices:
        content = (c.get("message") or {}).get("content") or ""
        ours = c.get("forced_tokens") is not None  # ragteam's server: content and ids include the prefix
        ids, logprobs = ids_and_logprobs(c)
        out.append(
            Completion(
                text=content if ours else prefix + content,
                finish_reason=c.get("finish_reason") or "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=len(ids) if ids is not None else per_choice,
                prompt_ids=int_list(prompt_ids if prompt_ids is not None else c.get("prompt_token_ids")),
                completion_ids=ids,
                logprobs=logprobs,
                forced_tokens=int(c["forced_tokens"]) if ours else 0,
                constraint=choice_constraint(constraint, c.get("constraint")),
            )
        )
    return out


def choice_constraint(sent: dict[str, Any] | None, served: Any) -> dict[str, Any] | None:
    """A choice's constraint record: what was sent, plus the token whitelist of a server that says it masked
    with one (`ragteam serve llm`: its log-probs are then the masked distribution's)."""
    if sent is None:
        return None
    record = dict(sent)
    if isinstance(served, dict) and served.get("allowed_ids") is not None:
        record["allowed_ids"] = int_list(served["allowed_ids"])
        record["server"] = str(served.get("by", ""))
    return record


def ids_and_logprobs(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    """A choice's completion ids (`token_ids`, else `token_id:<id>` tokens) and log-probs; None if absent."""
    content = (choice.get("logprobs") or {}).get("content")
    logprobs = [float(entry["logprob"]) for entry in content] if content is not None else None
    ids = int_list(choice.get("token_ids"))
    if ids is None and content is not None:
        tokens = [entry.get("token") for entry in content]
        if all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
            ids = [int(t.removeprefix(TOKEN_ID_PREFIX)) for t in tokens]
    if ids is not None and logprobs is not None and len(ids) != len(logprobs):
        raise ValueError(f"{len(ids)} token ids but {len(logprobs)} log-probs")
    return ids, logprobs


def int_list(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise TypeError("token ids must be a list of integers")
    return list(value)


def retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
