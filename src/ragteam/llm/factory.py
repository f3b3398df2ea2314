"""Build a ChatModel from a ModelConfig."""

from __future__ import annotations

from typing import Any

from ragteam.llm.base import ChatModel
from ragteam.llm.config import ModelConfig


def build_chat_model(cfg: ModelConfig, **serving: Any) -> ChatModel:
    """A LocalChatModel or an OpenAIChatModel as `cfg.backend` says; raises ValueError on an incomplete config.

    `serving`: settings only a server decoding for many clients passes to a local model (`serve llm`'s
    `max_batch_tokens`, `prefill_chunk`: `LocalChatModel`'s keywords); an openai backend takes none."""
    if cfg.backend == "local":
        from ragteam.llm.local import LocalChatModel

        if cfg.threads is not None:
            import torch

            torch.set_num_threads(cfg.threads)  # process-wide: the last local model built sets it
        return LocalChatModel(
            cfg.model,
            device=cfg.device,
            dtype=cfg.dtype,
            lora=cfg.lora,
            max_batch_size=cfg.max_batch_size,
            **serving,
        )
    if serving:
        raise ValueError(f"model config: {', '.join(sorted(serving))} apply to a local model only")
    if cfg.backend == "openai":
        if not cfg.base_url:
            raise ValueError("model config: backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
        from ragteam.llm.openai_http import OpenAIChatModel

        return OpenAIChatModel(
            cfg.base_url,
            cfg.model,
            api_key_env=cfg.api_key_env,
            concurrency=cfg.concurrency,
            timeout=cfg.timeout,
            retries=cfg.retries,
            logprobs=cfg.logprobs,
            structured_output=cfg.structured_output,
        )
    raise ValueError(f"model config: unknown backend {cfg.backend!r} (local or openai)")
