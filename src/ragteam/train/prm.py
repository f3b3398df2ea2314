"""Train a process reward model (PRM) on pairs: a one-output sequence classifier, Bradley-Terry loss.

    ragteam train prm --data pairs.jsonl --out runs/prm [--prm.model smollm2] [--lora]

The PRM is `AutoModelForSequenceClassification(num_labels=1)` initialised from the LM `--prm.model` names (its body;
the score head starts random from `--seed`), trained with TRL's RewardTrainer: loss = -log sigmoid(s(chosen)
- s(rejected)), RAG-Gym's eq. 1. Inputs are tokenized here with `ragteam.llm.prm.prm_input_ids`, the
very function `ProcessRewardModel.score` uses, so training and scoring read identical tokens.

`--prm.model` names the process reward model on every command: here the model it starts from, elsewhere the
trained one. The result in `--out` is always a full model folder (`--prm.model DIR`, `ProcessRewardModel(DIR)`): with
`--lora` the adapter is merged into the body before saving (the score head is trained in full either way).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from pydantic import Field

from ragteam.config import Config
from ragteam.train.data import PairRow, read_pair_rows
from ragteam.train.train_config import OVERWRITE_HELP, START_MODEL_HELP, TrainConfig, lora_config
from ragteam.train.trl_args import jsonl_log_callback, start_training, train_and_report, trainer_arguments


class PRMOptions(Config):
    """The process reward model trained (`--prm.*`): the model it starts from, and the PRM-only settings."""

    model: str = Field("smollm2", description=START_MODEL_HELP + " (its body; the score head starts random)")

    score_margin: bool = Field(
        False,
        description="require s(chosen) - s(rejected) to exceed the pair's scores.chosen - scores.rejected "
        "(pairs without scores: margin 0)",
    )
    center_rewards: float | None = Field(
        None,
        ge=0.0,
        description="weight of a penalty on (s(chosen) + s(rejected))^2 that keeps scores centred on 0",
    )


def prm_dataset(rows: list[PairRow], tokenizer, max_length: int, score_margin: bool):
    """A datasets.Dataset of pre-tokenized pairs {chosen_ids, rejected_ids[, margin]} for RewardTrainer."""
    from datasets import Dataset

    from ragteam.llm.prm import prm_input_ids

    records = []
    for r in rows:
        rec = {
            "chosen_ids": prm_input_ids(tokenizer, r.messages, r.chosen, max_length),
            "rejected_ids": prm_input_ids(tokenizer, r.messages, r.rejected, max_length),
        }
        if score_margin:
            rec["margin"] = (r.scores["chosen"] - r.scores["rejected"]) if r.scores else 0.0
        records.append(rec)
    return Dataset.from_list(records)


class PRMTrainConfig(TrainConfig):
    """Train a process reward model on ranked pairs (pairs.jsonl rows; formats in `ragteam.train.data`):
    what `ragteam train prm` resolves its flags into, and `train_prm` takes."""

    prm: PRMOptions = Field(default_factory=PRMOptions)
    overwrite: bool = Field(False, description=OVERWRITE_HELP)


def train_prm(cfg: PRMTrainConfig) -> Path:
    """`ragteam train prm` without the terminal: train a process reward model from `--prm.model` on the pairs
    in `cfg.data`; return the output folder holding it."""
    from transformers import AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    opts = cfg.prm
    # --out checked, rows validated, output folder ready (or the checkpoint to resume), lr and start model
    # resolved, config written
    read_rows = partial(read_pair_rows, command="train prm")
    start = start_training(cfg, "prm", read_rows, opts.model, "--prm.model")
    rows, resume_from, lr, path = start.rows, start.resume_from, start.lr, start.init

    # tokenizer and pre-tokenized pairs (the PRM's one rendering)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dataset = prm_dataset(rows, tokenizer, cfg.max_length, opts.score_margin)

    # trainer: RewardTrainer loads the start LM as a one-output classifier (seeded head)
    args = RewardConfig(
        **trainer_arguments(cfg, lr),
        max_length=cfg.max_length,
        center_rewards_coefficient=opts.center_rewards,
        model_init_kwargs={"dtype": "float32"},
    )
    trainer = RewardTrainer(
        model=str(path),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg, "SEQ_CLS") if cfg.lora else None,
        callbacks=[jsonl_log_callback(cfg.out)],
    )

    # train
    train_and_report(trainer, cfg, opts, resume_from)

    # save: a full classifier folder (LoRA merged) and its tokenizer
    model = trainer.model
    if cfg.lora:
        model = model.merge_and_unload()
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(cfg.out)
    tokenizer.save_pretrained(cfg.out)
    return Path(cfg.out)
