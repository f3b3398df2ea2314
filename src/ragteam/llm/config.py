"""ModelConfig: which chat model to use and how to reach it (a local transformers model or an HTTP server)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ragteam.config import Config


class ModelConfig(Config):
    """A chat model: `local` runs a Hugging Face model in-process; `openai` calls an OpenAI-compatible server."""

    backend: Literal["local", "openai"] = Field(
        "local", description="local: transformers in this process; openai: an OpenAI-compatible HTTP server"
    )
    model: str = Field(
        "smollm2",
        description="local: 'smollm2' (packaged SmolLM2-135M-Instruct, converted once), 'tiny' (random test "
        "model) or a Hugging Face model folder; openai: the served model name",
    )
    base_url: str | None = Field(
        None,
        description="openai backend: server URL, e.g. http://127.0.0.1:8000/v1 (/v1 is added to a bare host)",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="openai backend: environment variable holding the API key"
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="local backend: auto picks cuda when available"
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="local backend: weight dtype"
    )
    lora: str | None = Field(None, description="local backend: folder of a LoRA adapter (peft) to apply")
    threads: int | None = Field(
        None,
        ge=1,
        description="local backend on CPU: torch intra-op threads for this process (default: torch's choice; "
        "1 is often fastest on a small, busy machine)",
    )
    max_batch_size: int = Field(32, ge=1, description="local backend: most sequences decoded together")
    concurrency: int = Field(16, ge=1, description="openai backend: most requests in flight at once")
    timeout: float = Field(
        120.0,
        gt=0,
        le=86_400,
        description="openai backend: seconds one HTTP attempt may take, from connecting to the reply's last "
        "byte; with retries a request takes at most (retries + 1) x timeout + 8 s per retry",
    )
    retries: int = Field(3, ge=0, description="openai backend: retries on connection errors, 5xx and 429")
    structured_output: Literal["none", "vllm", "vllm-guided", "sglang"] = Field(
        "none",
        description="openai backend: how a constrained act (MMOA-RAG's Selector) asks the server to enforce "
        'its regex: vllm ({"structured_outputs": {"regex": R}}, vLLM >= 0.10.2; also `ragteam serve '
        'llm`), vllm-guided ({"guided_regex": R}, vLLM < 0.12), sglang ({"regex": R}), or none (not '
        "sent: the reply is not constrained, the parser still penalises a malformed one)",
    )
    logprobs: bool = Field(
        True,
        description="openai backend: ask for token ids and log-probs (OpenAI's logprobs and vLLM's token-id "
        "extensions; a server that rejects them is asked without them)",
    )


_FIELDS = ModelConfig.model_fields


class LocalModelConfig(Config):
    """A chat model run in this process: ModelConfig's local fields, the same names, defaults, checks and
    help (taken from ModelConfig, not repeated); `chat_model_config()` is the ModelConfig the one model builder
    (`build_chat_model`) takes."""

    model: str = _FIELDS["model"]
    device: Literal["auto", "cpu", "cuda"] = _FIELDS["device"]
    dtype: Literal["float32", "bfloat16", "float16"] = _FIELDS["dtype"]
    lora: str | None = _FIELDS["lora"]
    threads: int | None = _FIELDS["threads"]
    max_batch_size: int = _FIELDS["max_batch_size"]

    def chat_model_config(self) -> ModelConfig:
        """This model as a ModelConfig (backend local)."""
        return ModelConfig(backend="local", **self.model_dump())
