"""Direct preference optimisation of the policy on pairs (TRL's DPOTrainer); the reference is the start model.

    ragteam train dpo --data pairs.jsonl --out runs/dpo [--policy.model runs/sft] [--lora] [--dpo.beta 0.1]

Each pair becomes TRL's conversational preference row `{prompt: messages, chosen: [assistant],
rejected: [assistant]}`; TRL renders it with the model's chat template, so DPO sees the same prompt text as
the policy at rollout time. The reference log-probs are computed once, with the start model, before the first
step (`--dpo.precompute-ref`): no second copy of the model stays in memory, and a resumed run recomputes
them from the same start model (`--policy.model`). With `--lora` the reference is the base model (the adapter switched off).

The result in `--out` is a full model folder (`--policy.model DIR`) or a LoRA adapter (`--policy.lora DIR`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import Field

from ragteam.config import Config
from ragteam.train.data import PairRow, read_pair_rows
from ragteam.train.rows import conversation_length, drop_long_rows, row_limit
from ragteam.train.train_config import OVERWRITE_HELP, StartModel, TrainConfig, lora_config
from ragteam.train.trl_args import jsonl_log_callback, start_training, train_and_report, trainer_arguments


class DPOOptions(Config):
    """DPO-only settings (`--dpo.*`)."""

    beta: float = Field(0.1, gt=0, description="strength of the pull towards the reference model")
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust"] = Field(
        "sigmoid", description="sigmoid: DPO; ipo: IPO; hinge: SLiC; robust: DPO robust to label noise"
    )
    label_smoothing: float = Field(
        0.0, ge=0.0, lt=0.5, description="assumed share of flipped preferences (robust / conservative DPO)"
    )
    precompute_ref: bool = Field(
        True, description="compute the reference log-probs once before training (no reference copy in memory)"
    )


class DPOConfig(TrainConfig):
    """Prefer chosen over rejected replies (pairs.jsonl rows; formats in `ragteam.train.data`): what
    `ragteam train dpo` resolves its flags into, and `train_dpo` takes."""

    policy: StartModel = Field(default_factory=StartModel)
    dpo: DPOOptions = Field(default_factory=DPOOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def dpo_dataset(rows: list[PairRow]):
    """A datasets.Dataset of conversational preference rows (what DPOTrainer tokenizes)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": r.messages,
                "chosen": [{"role": "assistant", "content": r.chosen}],
                "rejected": [{"role": "assistant", "content": r.rejected}],
            }
            for r in rows
        ]
    )


def train_dpo(cfg: DPOConfig) -> Path:
    """`ragteam train dpo` without the terminal: DPO-train `--policy.model` on the pairs in `cfg.data`;
    return the output folder holding the final model (or adapter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    opts = cfg.dpo
    # --out checked, rows validated, output folder ready (or the checkpoint to resume), lr and start model
    # resolved, config written
    start = start_training(cfg, "dpo", partial(read_pair_rows, command="train dpo"), cfg.policy.model)
    rows, resume_from, lr, path = start.rows, start.resume_from, start.lr, start.init

    # policy = start model; reference = the same start model (precomputed log-probs, or the adapter off)
    tokenizer = AutoTokenizer.from_pretrained(path)
    lengths = [
        max(
            conversation_length(tokenizer, r.messages, r.chosen),
            conversation_length(tokenizer, r.messages, r.rejected),
        )
        for r in rows
    ]
    rows = drop_long_rows(rows, lengths, cfg, "train dpo", "pairs")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

    # trainer
    args = DPOConfig(
        **trainer_arguments(cfg, lr),
        max_length=row_limit(cfg, lengths),  # every pair fits (drop_long_rows): nothing is cut
        beta=opts.beta,
        loss_type=[opts.loss_type],
        label_smoothing=opts.label_smoothing,
        precompute_ref_log_probs=opts.precompute_ref,
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=dpo_dataset(rows),
        processing_class=tokenizer,
        peft_config=lora_config(cfg, "CAUSAL_LM") if cfg.lora else None,
        callbacks=[jsonl_log_callback(cfg.out)],
    )

    # train
    train_and_report(trainer, cfg, opts, resume_from)

    # save: the model (or adapter) and its tokenizer
    trainer.save_model(cfg.out)
    return Path(cfg.out)
