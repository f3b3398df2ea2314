"""`ragteam serve llm`: serve a local model over the OpenAI chat-completions API, batching concurrent requests.

    ragteam serve llm --model.model smollm2 --port 8000
    curl -s localhost:8000/v1/chat/completions -d '{"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]}'

`--port 0` picks a free port; once listening it prints `serving on http://HOST:PORT` (`ragteam.serve.listen`).
`--api-key KEY` (or $RAGTEAM_API_KEY) makes clients send `Authorization: Bearer KEY` (OpenAI clients do).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ragteam.llm.config import LocalModelConfig
from ragteam.serve.guard import MAX_WAIT_MS
from ragteam.serve.listen import ServerConfig

MAX_BATCH_TOKENS = 32_768  # SmolLM2-135M in float32: about 1.5 GB of KV cache
PREFILL_CHUNK = 1024  # ragteam.llm.decoder.PREFILL_CHUNK, repeated so that the CLI does not import torch


RENAMED = {
    f"--{name.replace('_', '-')}": f"--model.{name.replace('_', '-')}"
    for name in LocalModelConfig.model_fields
}
"""The flat flags the served model had, named in the error (`ragteam.cli.main`)."""


class Config(ServerConfig):
    """Settings of `ragteam serve llm`. Its one model is the `--model.*` group (ModelConfig's local fields),
    named for no role: the server does not know whether its clients use it as a policy or as the LLM."""

    model: LocalModelConfig = Field(
        default_factory=LocalModelConfig,
        description="the model served: --model.model, --model.dtype, ... (ModelConfig's local fields)",
    )
    served_name: str | None = Field(
        None,
        description="model name clients must send (default: the --model.model value, or the folder's name)",
    )
    max_batch_tokens: int = Field(
        MAX_BATCH_TOKENS,
        ge=1,
        description="most padded tokens decoded in one batch (rows x (longest prompt + longest max_tokens)): "
        "a long request runs apart from short ones; a batch out of memory is run again row by row",
    )
    prefill_chunk: int = Field(
        PREFILL_CHUNK,
        ge=1,
        description="input tokens per prefill forward pass: a longer prompt or forced prefix is prefilled in "
        "chunks over the KV cache, so its memory grows linearly with its length; same replies",
    )
    batch_wait_ms: float = Field(
        5.0, ge=0, le=MAX_WAIT_MS, description="how long to wait for more requests before starting a batch"
    )
    max_n: int = Field(16, ge=1, description="largest n (samples per request) accepted")
    max_tokens_limit: int = Field(
        4096,
        ge=1,
        description="largest max_tokens accepted (more: 400); also the most decoding steps a request that "
        "arrives during a batch waits for it, so lower it to keep one long request from holding others",
    )
    allow_weight_updates: bool = Field(
        False,
        description='accept POST /v1/load_weights {"path": DIR} (a PPO trainer pushing its policy); '
        "anyone who reaches the port could replace the model",
    )


def run(cfg: Config) -> int:
    from ragteam.llm.factory import build_chat_model
    from ragteam.serve.guard import resolve_api_key
    from ragteam.serve.listen import serve
    from ragteam.serve.llm import make_app

    model: Any = build_chat_model(
        cfg.model.chat_model_config(), max_batch_tokens=cfg.max_batch_tokens, prefill_chunk=cfg.prefill_chunk
    )
    name = cfg.served_name or model.name
    app = make_app(
        model,
        name,
        max_batch_size=cfg.model.max_batch_size,
        batch_wait_ms=cfg.batch_wait_ms,
        max_n=cfg.max_n,
        max_tokens_limit=cfg.max_tokens_limit,
        allow_weight_updates=cfg.allow_weight_updates,
        api_key=resolve_api_key(cfg.api_key),
        docs=cfg.docs,
        read_timeout=cfg.read_timeout,
    )
    serve(
        app,
        cfg.host,
        cfg.port,
        log_level=cfg.log_level,
        announce=[f"ragteam: model {name!r} ({model.path}, {model.device}); OpenAI API under /v1"],
        read_timeout=cfg.read_timeout,
        max_connections=cfg.max_connections,
    )
    return 0
