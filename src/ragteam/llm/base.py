"""The one chat-model interface every model call in ragteam goes through.

A backend takes a batch of `ChatRequest`s and returns, per request, either its `n` completions or a
`ModelError` (errors are values: one failed request never sinks the rest of the batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ragteam.llm.constraint import Constraint
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
    """One prompt to answer. `prefix` forces the start of the assistant's reply (C-3PO's forced strategies):
    its tokens come back as the first `Completion.forced_tokens` completion ids, scored like sampled ones.
    With `sample_after_prefix=False` nothing is sampled: the reply is the prefix closed by end-of-turn.
    `constraint` restricts the reply (MMOA-RAG's Selector: `Document`, the candidate numbers and `,`): the local
    backend masks the logits of every token outside its whitelist, an OpenAI-compatible server is sent its
    regex as the server's structured-output field (`ragteam.llm.constraint`); the Completion records how."""

    messages: list[Message]
    sampling: Sampling = field(default_factory=Sampling)
    prefix: str = ""
    sample_after_prefix: bool = True
    constraint: Constraint | None = None


@dataclass
class Completion:
    """One sampled completion, exact enough to train on.

    `text` is what the workflow reads (a forced prefix included; end-of-turn and stop strings excluded, as in
    the OpenAI API). `completion_ids` are every token the model was run on after the prompt: the forced
    prefix's first, then the sampled ones, the end-of-turn token included when it was emitted. A trainer
    trains on all of `completion_ids` (end-of-turn included: it teaches the model to stop). `logprobs[t]` is
    log p(completion_ids[t] | prompt, completion_ids[:t]) at `logprobs_temperature` (1.0: the raw model,
    whatever temperature the token was sampled at, which is what PPO ratios need). Ids and log-probs are
    None where the backend could not provide them (an HTTP server that does not return them).

    `constraint` is None for an unconstrained request; else what constrained the reply
    (`ragteam.llm.constraint.constraint_record`): `name`, `regex`, `by` (`logits_mask`, `vllm`, `vllm-guided`,
    `sglang`, `none`), `enforced`, and `allowed_ids` where a token whitelist masked the logits, in which case
    `logprobs` are those of the masked distribution (renormalized over the whitelist) and a trainer scores the
    completion under the same mask (`ragteam.train.experience.Sample.allowed_ids`).
    """

    text: str
    finish_reason: str = "stop"  # "stop" | "length" (max tokens cut the completion)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    forced_tokens: int = 0  # leading completion ids that were a forced prefix, not sampled
    logprobs_temperature: float = 1.0
    constraint: dict[str, Any] | None = None

    @property
    def cut(self) -> bool:
        """Whether max tokens cut the completion (it did not end by itself)."""
        return self.finish_reason == "length"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["constraint"] is None:  # traces of unconstrained acts stay as they were
            del d["constraint"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Completion:
        return cls(**d)


@dataclass
class ModelError:
    """A request that failed after the backend's retries; `where` names the endpoint or model.

    `bad_request` marks a request that can never be served as sent (a prompt longer than the model's
    context, a setting the backend refuses): a server answers it 400, not 500, and retrying does not help.
    `too_large` marks one that ran out of memory alone (its message names its size and the limit): 413."""

    message: str
    where: str = ""
    bad_request: bool = False
    too_large: bool = False

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


ChatResult = list[Completion] | ModelError

TOO_LARGE = "does not fit in memory"
"""In the message of a `ModelError` with `too_large`: whoever reads the error as text (an episode's error in
`serve team`) tells it from other failures by this phrase."""


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers chat requests in batches: local transformers, an OpenAI-compatible server."""

    name: str

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each request with `request.sampling.n` completions, or a ModelError; same order as input."""
        ...


@runtime_checkable
class TokenCounter(Protocol):
    """A model that can measure prompts: the engine fits overlong prompts to `context_length` with it."""

    context_length: int

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of `messages` rendered as a prompt (chat template and assistant header included)."""
        ...
