"""What `serve llm` reads from a chat-completions request: the body's fields (`ChatCompletionBody`), the
forced prefix of vLLM's `continue_final_message` and the structured-output fields served as a token
whitelist; each helper answers a 400 naming the field it cannot honour. See `ragteam.serve.llm`."""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from ragteam.llm.base import ChatModel
from ragteam.llm.constraint import Constraint, UnsupportedRegex
from ragteam.serve.openai_api import openai_error

MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's limit on `top_logprobs`


class _TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class _MessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant"]
    content: str | list[_TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatCompletionBody(BaseModel):
    """The fields of an OpenAI chat-completions request this server honours (others are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[_MessageIn] = Field(min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0, allow_inf_nan=False)  # NaN: "a finite number"
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
    # integers are strict: `n: true`, `n: "2"` and `max_tokens: 1.0` are 400s, not 1, 2 and 1
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: StrictInt = Field(1, ge=1)
    seed: StrictInt | None = None
    stream: bool = False
    logprobs: StrictBool | None = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    # vLLM's extensions (token ids; a forced assistant prefix) and ours (`sample_after_prefix`)
    return_tokens_as_token_ids: StrictBool | None = False
    return_token_ids: StrictBool | None = False
    continue_final_message: StrictBool = False
    add_generation_prompt: StrictBool = True
    sample_after_prefix: StrictBool = True
    # structured outputs: vLLM's (new and old) and SGLang's regex are served as a token whitelist; the other
    # fields are read only to be refused by name (400), never silently ignored
    structured_outputs: dict[str, Any] | None = None
    guided_regex: str | None = None
    regex: str | None = None
    guided_json: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structural_tag: Any = None
    json_schema: Any = None
    ebnf: Any = None
    response_format: Any = None

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop strings")
        return v


def forced_prefix(body: ChatCompletionBody, messages: list[dict[str, str]]) -> str | JSONResponse:
    """The forced prefix of the reply (popped off `messages`): vLLM's continue_final_message; or a 400."""
    if not body.continue_final_message:
        if not body.add_generation_prompt:  # would continue after the prompt's end-of-turn: not supported
            return openai_error(
                400,
                "add_generation_prompt=false is only supported with continue_final_message=true",
                param="add_generation_prompt",
            )
        return ""
    if body.add_generation_prompt:
        return openai_error(
            400,
            "continue_final_message=true needs add_generation_prompt=false",
            param="add_generation_prompt",
        )
    if messages[-1]["role"] != "assistant":
        return openai_error(
            400,
            "continue_final_message=true needs a final assistant message (the reply's prefix)",
            param="messages",
        )
    return messages.pop()["content"]


_UNSUPPORTED_OUTPUTS = (
    "guided_json",
    "guided_choice",
    "guided_grammar",
    "structural_tag",
    "json_schema",
    "ebnf",
)


def structured_output(body: ChatCompletionBody, model: ChatModel) -> Constraint | None | JSONResponse:
    """The request's constraint from its structured-output fields (module docstring), None without any,
    or the 400 naming the field this server cannot honour."""
    for name in _UNSUPPORTED_OUTPUTS:
        if getattr(body, name) is not None:
            return openai_error(
                400,
                f"{name} is not supported by this server (only a regex that is a whitelist of literal texts: "
                "structured_outputs.regex, guided_regex or regex)",
                param=name,
            )
    rf = body.response_format
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") in (None, "text")):
        return openai_error(
            400,
            "response_format other than {'type': 'text'} is not supported by this server",
            param="response_format",
        )
    found: list[tuple[str, Any]] = []
    for key, value in (body.structured_outputs or {}).items():
        if key == "regex":
            found.append(("structured_outputs.regex", value))
        elif value not in (None, False):  # option flags left off are harmless
            return openai_error(
                400,
                f"structured_outputs.{key} is not supported by this server (only structured_outputs.regex, "
                "a whitelist of literal texts)",
                param=f"structured_outputs.{key}",
            )
    found += [(n, getattr(body, n)) for n in ("guided_regex", "regex") if getattr(body, n) is not None]
    if not found:
        return None
    name, regex = found[0]
    if any(other != regex for _, other in found[1:]):
        return openai_error(400, f"{' and '.join(n for n, _ in found)} differ: send one regex", param=name)
    if not isinstance(regex, str):
        return openai_error(400, f"{name} must be a string", param=name)
    if not getattr(model, "supports_constraints", False):
        return openai_error(
            400, f"{name}: this server's model cannot enforce a constrained reply", param=name
        )
    try:
        return Constraint.from_regex(regex, name=name)
    except (UnsupportedRegex, ValueError) as e:
        return openai_error(400, f"{name} is not supported by this server: {e}", param=name)
