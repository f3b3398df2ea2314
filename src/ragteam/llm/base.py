"""The one chat-model interface every model call in ragteam goes through.

A backend takes a batch of `ChatRequest`s and returns, per request, either its `n` completions or a
`ModelError` (errors are values: one failed request never sinks the rest of the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ragteam.types import Message


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of one request (OpenAI names). temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    n: int = 1
    seed: int | None = None

    def with_(self, **changes: Any) -> Sampling:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class ChatRequest:
    messages: list[Message]
    sampling: Sampling = field(default_factory=Sampling)


@dataclass
class Completion:
    """One sampled completion. Token ids and log-probs are filled by backends that run the model themselves."""

    text: str
    finish_reason: str = "stop"  # "stop" | "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = (
        None  # one per completion token: log-softmax of the raw logits (temperature 1, no top-p), what PPO ratios need
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        return cls(**d)


@dataclass
class ModelError:
    """A request that failed after the backend's retries; `where` names the endpoint or model."""

    message: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


ChatResult = list[Completion] | ModelError


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers chat requests in batches: local transformers, an OpenAI-compatible server."""

    name: str

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each request with `request.sampling.n` completions, or a ModelError; same order as input."""
        ...
