"""The training chat template: the model's own ChatML rendering, with the assistant's tokens marked.

Why: SFT must put the loss on the assistant's reply only (the prompt is given, not learned). TRL finds those
tokens through `{% generation %}...{% endgeneration %}` markers in the chat template
(`return_assistant_tokens_mask`), and SmolLM2's stock template has none (TRL refuses it). So we train with a
template of our own that renders *exactly* the same text as the model's stock template, with the assistant
content and its `<|im_end|>` inside the markers: the mask then covers the reply and the end-of-turn token (so
the model learns to stop), and not the `<|im_start|>assistant\\n` header or the newline after `<|im_end|>`.

`training_chat_template(tokenizer)` builds it and proves the "exactly the same text" claim by rendering probe
conversations with both templates; anything but ChatML is refused with a clear error rather than trained
with a silently different prompt format.
"""

from __future__ import annotations

import json
import re
from typing import Any

_GENERATION = re.compile(r"{%-?\s*generation\s*-?%}")

# ChatML with generation markers; DEFAULT_SYSTEM is replaced by a Jinja string literal or `none`.
_CHATML_TRAINING = (
    "{%- set default_system = DEFAULT_SYSTEM -%}"
    "{%- for message in messages -%}"
    "{%- if loop.first and default_system is not none and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\n' + default_system + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Conversations whose renderings must agree between the stock and the training template.
_PROBES: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Who wrote it?"}],
    [{"role": "system", "content": "You are a router."}, {"role": "user", "content": "Q: x?\nDocs: [1] a"}],
    [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Which city?"},
        {"role": "assistant", "content": "Paris"},
    ],
    [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one\ntwo"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": " spaced "},
    ],
]


def has_generation_markers(template: str | None) -> bool:
    return bool(template) and _GENERATION.search(template) is not None


def chatml_training_template(default_system: str | None = None) -> str:
    """ChatML with `{% generation %}` around each assistant reply + `<|im_end|>`; `default_system` is the
    system turn inserted when a conversation has none (SmolLM2's template does this)."""
    literal = "none" if default_system is None else json.dumps(default_system, ensure_ascii=False)
    return _CHATML_TRAINING.replace("DEFAULT_SYSTEM", literal)


def training_chat_template(tokenizer: Any) -> str:
    """The template to train `tokenizer`'s model with: its own if it already marks generations, else ChatML
    with markers rendering identically to the stock template. ValueError when no such template exists."""
    stock = tokenizer.chat_template
    if not isinstance(stock, str) or not stock:
        raise ValueError("the tokenizer has no chat template; SFT on chat rows needs one")
    if has_generation_markers(stock):
        return stock
    if "<|im_start|>" not in stock or "<|im_start|>" not in tokenizer.get_vocab():
        raise ValueError(
            "the model's chat template is not ChatML; ragteam's SFT only ships a training template "
            "(with {% generation %} markers) for ChatML models such as SmolLM2"
        )
    template = chatml_training_template(_default_system(tokenizer))
    check_same_rendering(tokenizer, template)
    return template


def check_same_rendering(tokenizer: Any, template: str) -> None:
    """Raise ValueError unless `template` renders every probe conversation exactly as the stock template."""
    for conversation in _PROBES:
        for add_prompt in (False, True):
            if add_prompt and conversation[-1]["role"] == "assistant":
                continue
            want = _render(tokenizer, conversation, add_prompt, None)
            got = _render(tokenizer, conversation, add_prompt, template)
            if want != got:
                raise ValueError(
                    "the training chat template renders differently from the model's own template:\n"
                    f"  stock:    {want!r}\n  training: {got!r}"
                )


def _render(tokenizer: Any, conversation: list[dict], add_prompt: bool, template: str | None) -> str:
    return tokenizer.apply_chat_template(
        conversation, chat_template=template, add_generation_prompt=add_prompt, tokenize=False
    )


def _default_system(tokenizer: Any) -> str | None:
    """The system text the stock template inserts when a conversation has none (None: it inserts none)."""
    text = _render(tokenizer, [{"role": "user", "content": "x"}], False, None)
    head = "<|im_start|>system\n"
    if not text.startswith(head):
        return None
    return text[len(head) : text.index("<|im_end|>")]
