"""What both OpenAI-shaped servers (`serve llm`, `serve team`) share: OpenAI's error body, reading a
request body into a pydantic model with a 4xx naming what is wrong, the FastAPI app they start from and its
`GET /v1/models` route."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request

from ragteam.serve.batcher import RequestBatcher, lifespan_of
from ragteam.serve.guard import BearerAuth, BigNumber, BodyError, encodable, loads_json, read_body


def openai_error_body(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`. A message quoting a
    client's text that is no UTF-8 (a lone surrogate) keeps it escaped, so the answer can be encoded."""
    return {"error": {"message": encodable(message), "type": kind, "param": param, "code": status}}


def openai_error(
    status: int, message: str, kind: str = "invalid_request_error", param: str | None = None
) -> Any:
    """An OpenAI-shaped error response with that status."""
    from fastapi.responses import JSONResponse

    return JSONResponse(openai_error_body(status, message, kind, param), status)


def validation_message(e: Any) -> tuple[str, str | None]:
    """A pydantic ValidationError as one message naming every bad field, and the first field's path."""
    parts, first = [], None
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"])
        first = first or loc
        got = f" (got {err['input']!r})" if isinstance(err.get("input"), BigNumber) else ""
        parts.append(f"{loc}: {err['msg']}{got}")
    return "invalid request: " + "; ".join(parts), first


async def read_openai_body(
    request: Any,
    body_type: type,
    served_name: str,
    max_body_bytes: int,
    read_timeout: float,
    aliases: tuple[str, ...] = (),
) -> Any:
    """The request's body as `body_type` (a pydantic model with a `model` field), or the 4xx response that
    says why not: body too large or too slow, not JSON, not an object, a bad field, another model's name."""
    from pydantic import ValidationError

    try:
        raw = await read_body(request, max_body_bytes, read_timeout)
    except BodyError as e:
        return openai_error(e.status, e.message)
    try:
        data = loads_json(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return openai_error(400, f"request body is not valid JSON: {e}")
    except RecursionError:
        return openai_error(400, "request body is not valid JSON: nested too deeply")
    if not isinstance(data, dict):
        return openai_error(400, "request body must be a JSON object")
    try:
        body = body_type.model_validate(data)
    except ValidationError as e:
        message, param = validation_message(e)
        return openai_error(400, message, param=param)
    if body.model is not None and body.model != served_name and body.model not in aliases:
        from ragteam.config import short_repr

        return openai_error(
            404,
            f"model {short_repr(body.model)} not found; this server serves {served_name!r}",
            "not_found_error",
            "model",
        )
    return body


def openai_app(title: str, batcher: RequestBatcher, served_name: str, docs: bool, api_key: str | None) -> Any:
    """The FastAPI app both OpenAI-shaped servers (`serve llm`, `serve team`) start from: its lifespan runs
    `batcher.run()` (the loop that gathers requests into batches) and cancels it at shutdown, the interactive
    docs only when asked for, and, with an API key, `Authorization: Bearer` checked before any route with
    OpenAI's 401 body. The caller adds its routes (`models` among them)."""
    from fastapi import FastAPI

    app = FastAPI(
        title=title,
        lifespan=lifespan_of(batcher),
        docs_url="/docs" if docs else None,
        redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.batcher = batcher
    app.state.served_name = served_name
    app.state.created = int(time.time())
    app.state.api_key_required = bool(api_key)
    if api_key:
        app.add_middleware(
            BearerAuth,
            key=api_key,
            error=lambda message: openai_error_body(401, message, "invalid_api_key"),
        )
    return app


async def models(request: Request) -> dict[str, Any]:
    """`GET /v1/models`: the one model this server serves (`app.state.served_name`), as OpenAI lists models."""
    state = request.app.state
    return {
        "object": "list",
        "data": [
            {"id": state.served_name, "object": "model", "created": state.created, "owned_by": "ragteam"}
        ],
    }
