"""Supervised fine-tuning of the policy on SFT rows (TRL's SFTTrainer), loss on the assistant's reply only.

    ragteam train sft --data sft.jsonl --out runs/sft [--policy.model smollm2] [--lora] [--max-steps N] [--resume]

Each row becomes a prompt/completion pair of chat messages: prompt = the row's messages, completion = the
target as the assistant's reply. Two masks, both from TRL, select the trained tokens: the completion mask
(tokens after the prompt) and the assistant mask of our training chat template (`train/templates.py`); the
tokens in both are exactly the target and its `<|im_end|>` (not the assistant header, not the newline after).

`--sft.packing` packs rows into sequences of `--max-length` tokens (TRL, best-fit decreasing) so that no
compute goes to padding; on CPU the packed sequences are batched as rows (`PackedRowsCollator`).

The result in `--out` is a full model folder (`--policy.model DIR`) or, with `--lora`, a LoRA adapter
(`--policy.model START --policy.lora DIR`, START the `--policy.model` it was trained from). The tokenizer is saved with the model's stock chat template.

`--preset c3po|rag-gym` sets a paper's SFT values (`PRESETS`, each with its source; docs/training.md lists
them). As with PPO's recipes, resolved once (`ragteam.config.resolve`, `preset_layers`): field defaults < preset <
`--config FILE` < flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ragteam.config import Config, ConfigError
from ragteam.precedence import Layer
from ragteam.train.data import SFTRow, read_sft_rows
from ragteam.train.rows import conversation_length, drop_long_rows, row_limit
from ragteam.train.run_folder import resolve_init
from ragteam.train.train_config import OVERWRITE_HELP, StartModel, TrainConfig, lora_config
from ragteam.train.trl_args import jsonl_log_callback, start_training, train_and_report, trainer_arguments
from ragteam.workflows.setting import Setting

ATTENTION_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
"""The attention projections of a llama-architecture model (Llama-3.1, Qwen2, SmolLM2)."""

PRESETS: dict[str, tuple[Setting, ...]] = {
    "c3po": (
        Setting("lr", 4e-5, "C-3PO Table 6: learning rate 4e-5"),
        Setting("epochs", 3, "C-3PO Table 6: 3 epochs"),
        Setting("lr_schedule", "cosine", "C-3PO Table 6: cosine scheduler"),
        Setting("warmup_ratio", 0.03, "C-3PO Table 6: warm-up ratio 0.03"),
        Setting("max_length", 4096, "C-3PO Table 6: cutoff length 4096"),
    ),
    "rag-gym": (
        Setting("lora", True, "RAG-Gym E.2: SFT (and DPO) with LoRA"),
        Setting("lora_r", 256, "RAG-Gym E.2: r = 256"),
        Setting("lora_alpha", 512, "RAG-Gym E.2: alpha = 512"),
        Setting(
            "lora_targets",
            ATTENTION_TARGETS,
            "RAG-Gym E.2: 'all attention components': q, k, v and o projections (no MLP)",
        ),
    ),
}
"""`train sft --preset NAME`: each paper's stated SFT values. C-3PO's batch of 512 (Table 6) is not in the
preset: the batch is --batch-size x --grad-accum x GPUs, sized to the hardware. RAG-Gym states no learning
rate, epochs or schedule (they are in its source code only), so its preset leaves them at ragteam's."""


def preset_values(name: str) -> dict[str, Any]:
    """The settings of preset `name` as a flat dict of TrainConfig fields; ConfigError naming the presets."""
    if name not in PRESETS:
        raise ConfigError(f"unknown SFT preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return {s.key: s.value for s in PRESETS[name]}


def preset_layers(given: dict[str, Any]) -> list[Layer]:
    """The preset `given` names (`--preset`) as the layer under the config file and flags (what a command's
    config returns from `layers`); a warm-up said in steps (`--warmup-steps`) drops the preset's ratio."""
    name = given.get("preset")
    if name is None:
        return []
    values = preset_values(name)
    if "warmup_steps" in given:  # one warm-up, said in steps: the preset's ratio gives way
        values.pop("warmup_ratio", None)
    return [("preset", values)]


def preset_table() -> str:
    """Every preset's settings as the Markdown table in docs/training.md (a test keeps them equal)."""
    lines = ["| preset | setting | value | source |", "|---|---|---|---|"]
    for name, rows in PRESETS.items():
        for s in rows:
            value = ", ".join(s.value) if isinstance(s.value, list) else _shown(s.value)
            flag = "--" + s.key.replace("_", "-")
            lines.append(f"| `{name}` | `{flag}` | {value} | {s.source} |")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value).replace("e-0", "e-") if isinstance(value, float) else str(value)


class SFTOptions(Config):
    """SFT-only settings (`--sft.*`)."""

    packing: bool = Field(
        False,
        description="pack rows into sequences of --max-length tokens with no padding (best-fit decreasing, "
        "attention kept within each row): faster when rows are short and of mixed lengths; --batch-size "
        "then counts packed sequences",
    )


class SFTConfig(TrainConfig):
    """Fine-tune the policy on target replies (sft.jsonl rows; formats in `ragteam.train.data`): what
    `ragteam train sft` resolves its flags into, and `train_sft` takes."""

    policy: StartModel = Field(default_factory=StartModel)
    preset: Literal["c3po", "rag-gym"] | None = Field(
        None,
        description="a paper's SFT values (docs/training.md): c3po (Table 6: lr 4e-5, 3 epochs, cosine, "
        "warm-up ratio 0.03, 4096 tokens) or rag-gym (E.2: LoRA r 256, alpha 512 on the attention "
        "projections); flags and --config override it",
    )
    sft: SFTOptions = Field(default_factory=SFTOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)

    @classmethod
    def layers(cls, given: dict[str, Any]) -> list[Layer]:
        """The preset's values under the config file and flags (`preset_layers`)."""
        return preset_layers(given)


def sft_dataset(rows: list[SFTRow]):
    """A datasets.Dataset of conversational prompt/completion rows (what SFTTrainer tokenizes)."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": r.messages, "completion": [{"role": "assistant", "content": r.target}]} for r in rows]
    )


def build_sft_trainer(cfg: SFTConfig, rows: list[SFTRow], lr: float, path: Path | None = None):
    """The SFTTrainer, model loaded (`path`, default `--policy.model`) and data tokenized and masked;
    returns (trainer, stock template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from ragteam.train.templates import training_chat_template

    opts = cfg.sft
    path = path if path is not None else resolve_init(cfg.policy.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    stock_template = tokenizer.chat_template
    tokenizer.chat_template = training_chat_template(tokenizer)  # same text, assistant tokens marked
    lengths = [conversation_length(tokenizer, r.messages, r.target) for r in rows]
    rows = drop_long_rows(rows, lengths, cfg, "train sft", "rows")
    limit = row_limit(cfg, lengths)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = SFTConfig(
        **trainer_arguments(cfg, lr),
        max_length=limit,
        packing=opts.packing,
        assistant_only_loss=True,
        completion_only_loss=True,
    )
    on_gpu = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    packed_rows = opts.packing and not on_gpu  # see PackedRowsCollator
    trainer_class = _packed_rows_trainer_class() if packed_rows else SFTTrainer
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=sft_dataset(rows),
        processing_class=tokenizer,
        peft_config=lora_config(cfg, "CAUSAL_LM") if cfg.lora else None,
        callbacks=[jsonl_log_callback(cfg.out)],
    )
    if packed_rows:
        trainer.data_collator = PackedRowsCollator(tokenizer.pad_token_id)
    return trainer, stock_template


class PackedRowsCollator:
    """Batch packed sequences as rows (not TRL's one flattened row), segments told apart by position ids.

    Why: TRL's padding-free batches concatenate all packed sequences of a batch into one row and rely on
    flash-attention's variable-length kernels to keep each segment to itself. On CPU, transformers' SDPA path
    builds a dense (batch x max_length)^2 block-diagonal mask from the position ids instead, so attention
    costs grow with the square of the whole batch. Here each packed sequence stays its own row (batch x
    max_length, padded at the end); with no attention mask, transformers reads the segments from the
    position ids that restart at 0, per row, and attention stays within each segment (measured: SmolLM2,
    4 x 512, ~1.3x faster than the flattened row). `num_real_tokens` is for the token count in the logs.
    """

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, examples: list[dict]) -> dict:
        import torch

        width = max(len(e["input_ids"]) for e in examples)
        ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(examples), width), -100, dtype=torch.long)
        positions = torch.zeros((len(examples), width), dtype=torch.long)
        for row, e in enumerate(examples):
            n = len(e["input_ids"])
            lengths = e.get("seq_lengths") or [n]
            ids[row, :n] = torch.tensor(e["input_ids"])
            labels[row, :n] = torch.tensor(e["labels"])
            positions[row, :n] = torch.cat([torch.arange(length) for length in lengths])
            positions[row, n:] = torch.arange(width - n)  # the padding: one more segment, not trained
        labels[positions == 0] = -100  # a segment's first token is not predicted from the previous segment
        real = sum(len(e["input_ids"]) for e in examples)
        return {"input_ids": ids, "labels": labels, "position_ids": positions, "num_real_tokens": real}


def _packed_rows_trainer_class():
    """SFTTrainer counting the real tokens of PackedRowsCollator batches in its `num_tokens` log."""
    from trl import SFTTrainer

    class PackedRowsSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            real = inputs.pop("num_real_tokens", None)
            out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            counted = getattr(self, "_total_train_tokens", None)
            if real is not None and counted is not None and self.model.training:
                # TRL counts the width of `position_ids` (its flattened row); count the real tokens instead
                self._total_train_tokens = counted - inputs["position_ids"].size(1) + int(real)
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return out

    return PackedRowsSFTTrainer


def train_sft(cfg: SFTConfig) -> Path:
    """`ragteam train sft` without the terminal: fine-tune `--policy.model` on the SFT rows in `cfg.data`;
    return the folder holding the final model (or adapter). The preset is part of `cfg` already (resolved
    when it was built)."""
    # --out checked, rows validated, output folder ready (or the checkpoint to resume), lr and start model
    # resolved, config written
    start = start_training(cfg, "sft", read_sft_rows, cfg.policy.model)

    # model, tokenizer, tokenized data, trainer
    trainer, stock_template = build_sft_trainer(cfg, start.rows, start.lr, start.init)

    # train
    train_and_report(trainer, cfg, cfg.sft, start.resume_from)

    # save: the model (or adapter) and the tokenizer with the model's own template
    trainer.processing_class.chat_template = stock_template
    trainer.save_model(cfg.out)
    return Path(cfg.out)
