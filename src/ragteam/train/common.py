"""What the SFT, DPO and PRM trainers share: the common config, the output folder, TRL's arguments, logs.

Every trainer writes into one folder `--out DIR`:

    DIR/config.yaml          the resolved config (learning rate included), command and library versions
    DIR/log.jsonl            one JSON line per logged step {"step", "epoch", "loss", ...}; appended on resume
    DIR/runs/                TensorBoard event files (when tensorboard is installed)
    DIR/wandb/               the Weights & Biases run, with --report-to wandb (`train/report.py`)
    DIR/checkpoint-N/        every --save-steps steps (the newest --save-total-limit kept); --resume continues
                             from the newest
    DIR/                     the final model: a full model folder, or a LoRA adapter (policy trainers)

The folder guards against mistakes: a folder that already holds checkpoints or a model is only reused with
`--resume`, so a second run never overwrites a first one by accident.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from ragteam.config import Config, versions
from ragteam.train.report import REPORT_TO_HELP, ReportTo, wandb_run

LLAMA_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraFields(Config):
    """LoRA settings, one set for every trainer (`--lora ...` on sft/dpo/prm, `--ppo.lora ...` on PPO)."""

    lora: bool = Field(False, description="train a LoRA adapter instead of every weight")
    lora_r: int = Field(16, ge=1, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r)")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the LoRA branch")
    lora_targets: list[str] = Field(
        default_factory=lambda: list(LLAMA_LORA_TARGETS),
        description="module names that get adapters: every attention and MLP projection of a "
        "llama-architecture model",
    )


class TrainInputs(Config):
    """What a trainer reads and writes (first in `--help`)."""

    data: str = Field(description="training rows: sft.jsonl (train sft) or pairs.jsonl (train dpo|prm)")
    out: str = Field(description="output folder: final model, checkpoints, log.jsonl, config.yaml")
    init: str = Field(
        "smollm2", description="initial model: 'smollm2' (packaged), 'tiny' (test model) or a model folder"
    )


DEFAULT_LR: dict[str, dict[str, float]] = {
    "sft": {"full": 2e-5, "lora": 2e-4},
    "dpo": {"full": 1e-6, "lora": 1e-5},
    "prm": {"full": 1e-5, "lora": 1e-4},
}
"""Each trainer's peak learning rate when `--lr` is not given, for full fine-tuning and for LoRA: the one
table the trainers and `--lr`'s help read (PPO's are its own fields, `--ppo.lr` / `--ppo.critic-lr`)."""


def _lr(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


_LR_HELP = ", ".join(f"{t} {_lr(v['full'])} (LoRA {_lr(v['lora'])})" for t, v in DEFAULT_LR.items())


class TrainConfig(LoraFields, TrainInputs):  # fields in reverse base order: inputs, LoRA, then these
    """Settings every trainer shares: data, output, initial model, LoRA, schedule, checkpoints, logging."""

    max_steps: int | None = Field(
        None, ge=1, description="stop after this many optimizer steps (overrides --epochs)"
    )
    epochs: float = Field(1.0, gt=0, description="passes over the data")
    lr: float | None = Field(
        None,
        gt=0,
        description="peak learning rate (after warm-up, then --lr-schedule); default per trainer: "
        + _LR_HELP,
    )
    lr_schedule: Literal["linear", "cosine", "constant"] = Field(
        "linear",
        description="learning rate after warm-up: linear (decay to 0 at the last step), cosine (half a cosine "
        "to 0; C-3PO Table 6) or constant",
    )
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps (or --warmup-ratio, not both)")
    warmup_ratio: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="linear warm-up over this share of the optimizer steps, rounded up (C-3PO Table 6: 0.03)",
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    batch_size: int = Field(4, ge=1, description="rows (sft) or pairs (dpo, prm) per forward")
    grad_accum: int = Field(1, ge=1, description="forwards per optimizer step")
    max_length: int | None = Field(
        None,
        ge=16,
        description="most tokens of a training row (prompt + reply); longer rows are dropped, with a warning "
        "past a tenth of them (default: the longest row's, so none is dropped; lower it to bound memory)",
    )
    seed: int = Field(0, description="seed of initialisation (LoRA, the PRM's score head), shuffling and dropout")
    save_steps: int = Field(100, ge=1, description="write a checkpoint every N optimizer steps")
    save_total_limit: int | None = Field(2, ge=1, description="checkpoints kept (oldest deleted; none: all)")
    resume: bool = Field(False, description="continue from the newest checkpoint in --out")
    log_steps: int = Field(1, ge=1, description="log loss and metrics every N optimizer steps")
    tensorboard: bool = Field(True, description="write TensorBoard events to OUT/runs (when installed)")
    report_to: ReportTo = Field("none", description=REPORT_TO_HELP)
    progress: bool = Field(True, description="show progress bars")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto picks cuda when available")
    bf16: bool = Field(False, description="bf16 mixed precision (GPUs that support it)")
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory, ~30% slower"
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads (default: torch's choice)")

    @model_validator(mode="after")
    def _one_warmup(self) -> TrainConfig:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} and warmup_ratio={self.warmup_ratio}: give one of the two"
            )
        return self


SCHEDULERS = {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}
"""`--lr-schedule` -> transformers' scheduler name (its `constant` would ignore the warm-up)."""


def resolved_lr(cfg: TrainConfig, trainer: str) -> float:
    """`--lr`, or the trainer's default for full fine-tuning / LoRA (`DEFAULT_LR`)."""
    return cfg.lr if cfg.lr is not None else DEFAULT_LR[trainer]["lora" if cfg.lora else "full"]


# ---- the output folder -----------------------------------------------------------------------------------


def checkpoints(out: str | Path) -> list[Path]:
    """The `checkpoint-N` folders in `out`, oldest first."""
    found = [
        p for p in Path(out).glob("checkpoint-*") if p.is_dir() and re.fullmatch(r"checkpoint-\d+", p.name)
    ]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def prepare_out_dir(cfg: TrainConfig) -> Path | None:
    """Create `cfg.out`; return the checkpoint to resume from (None: a fresh run). ValueError on misuse."""
    out = Path(cfg.out)
    found = checkpoints(out)
    if cfg.resume:
        if not found:
            raise ValueError(f"--resume: no checkpoint-N folder in {out} to continue from")
        _trim_log(out, _checkpoint_step(found[-1]))
        return found[-1]
    holds_model = any((out / name).exists() for name in ("config.json", "adapter_config.json"))
    if found or holds_model:
        raise ValueError(
            f"{out} already holds a training run ({'checkpoints' if found else 'a model'}); "
            "pass --resume to continue it, or choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "log.jsonl").write_text("", encoding="utf-8")
    return None


def _checkpoint_step(checkpoint: Path) -> int:
    state = checkpoint / "trainer_state.json"
    if state.is_file():
        return int(json.loads(state.read_text(encoding="utf-8"))["global_step"])
    return int(checkpoint.name.split("-")[1])


def _trim_log(out: Path, step: int) -> None:
    """Drop log rows after `step` (logged after the checkpoint a resumed run restarts from): no step twice."""
    path = out / "log.jsonl"
    if path.is_file():
        keep = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        keep = [line for line in keep if json.loads(line).get("step", 0) <= step]
        path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")


def resolve_init(init: str) -> Path:
    """The init model's folder (`smollm2` and `tiny` are built on first use); a clear error for an adapter."""
    from ragteam.llm.local import resolve_model_path

    path = Path(init).expanduser()
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get(
            "base_model_name_or_path"
        )
        raise ValueError(
            f"--init {init} is a LoRA adapter, not a model: start from a full model folder (its base was "
            f"{base}); to continue a LoRA run use --resume, or train the first stage without --lora"
        )
    return resolve_model_path(init)


def write_config(
    out: str | Path, command: str, cfg: Config, options: Config, lr: float, init_path: Path
) -> Path:
    """Write `out/config.yaml`: the common config with the resolved lr, the trainer's options, versions."""
    resolved = cfg.model_dump(mode="json") | {"lr": lr}
    key = command.split()[-1]
    doc = {
        "command": command,
        "config": resolved | {key: options.model_dump(mode="json")},
        "init_path": str(init_path),
        "versions": versions() | _training_versions(),
    }
    path = Path(out) / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def _training_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("peft", "accelerate", "datasets"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


# ---- TRL / transformers arguments ------------------------------------------------------------------------


def tensorboard_available() -> bool:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def _checkpointing_arg() -> str:
    """TrainingArguments' name for activation recomputation: `activation_checkpointing` in recent
    transformers, `gradient_checkpointing` before (5.17 on the GPU image we measured on)."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def trainer_arguments(cfg: TrainConfig, lr: float) -> dict[str, Any]:
    """Keyword arguments shared by SFTConfig, DPOConfig and RewardConfig (all TrainingArguments)."""
    import torch

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    return dict(
        output_dir=str(cfg.out),
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        num_train_epochs=cfg.epochs,
        learning_rate=lr,
        lr_scheduler_type=SCHEDULERS[cfg.lr_schedule],
        warmup_steps=cfg.warmup_steps or cfg.warmup_ratio,  # below 1: a share of the steps, rounded up
        weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        seed=cfg.seed,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        logging_strategy="steps",
        logging_steps=cfg.log_steps,
        logging_first_step=True,
        report_to=(["tensorboard"] if cfg.tensorboard and tensorboard_available() else [])
        + (["wandb"] if cfg.report_to == "wandb" else []),  # into the run `train_and_report` opens
        disable_tqdm=not cfg.progress,
        use_cpu=cfg.device == "cpu",
        bf16=cfg.bf16,  # TRL's configs default to bf16=True; off unless asked (CPU)
        **{_checkpointing_arg(): cfg.gradient_checkpointing},  # TRL's default is on; off: faster on CPU
        dataloader_num_workers=0,
        dataloader_pin_memory=cfg.device != "cpu" and torch.cuda.is_available(),
        save_only_model=False,  # optimizer and scheduler state too, so --resume continues exactly
    )


def train_and_report(trainer: Any, cfg: TrainConfig, opts: Config, resume_from: Path | None) -> None:
    """`trainer.train()`, from `resume_from` when resuming, inside the W&B run of `--report-to wandb` (opened
    in OUT/wandb with the resolved config, finished when training ends). The terminal shows ragteam's step
    lines (`StepLines`) instead of transformers' raw log dicts."""
    config = {**cfg.model_dump(mode="json"), **opts.model_dump(mode="json")}
    from ragteam.train.step_lines import use_step_lines

    use_step_lines(trainer, type(opts).__name__.removesuffix("Options").lower(), cfg.progress)
    main = trainer.is_world_process_zero()
    with wandb_run(cfg.report_to, Path(cfg.out), config, resume_from is not None, main=main):
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)


def lora_config(cfg: LoraFields, task_type: str):
    """peft's LoraConfig from the config's lora_* fields (`task_type`: CAUSAL_LM or SEQ_CLS)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type=task_type,
    )


def setup_libraries() -> None:
    """Quiet transformers' and datasets' info chatter, and score only trained tokens on CPU (see below)."""
    import datasets
    import transformers

    if os.environ.get("TRANSFORMERS_VERBOSITY") != "error":  # quiet_libraries (the CLI) asked for less
        transformers.logging.set_verbosity_warning()
    if os.environ.get("DATASETS_VERBOSITY") != "error":
        datasets.logging.set_verbosity_warning()
    score_only_trained_tokens_on_cpu()


def score_only_trained_tokens_on_cpu() -> bool:
    """Make TRL's fused LM head score only the positions that carry a label on CPU too; True when active.

    Why: TRL's SFT and DPO losses run the LM head (a 49k-word vocabulary for SmolLM2) in chunks over the
    hidden states. On Triton devices TRL first keeps only the positions with a label ("compact"); elsewhere
    it scores every position, prompt included, because on XLA/Neuron a varying number of positions would
    recompile the graph. CPU has no such issue, and an SFT or DPO row trains a short reply after a long
    prompt, so scoring every position spends about a third of a CPU step on logits that are thrown away
    (measured: SmolLM2, batch 4, 1.5x faster steps). The loss and gradients are the same either way (masked
    positions contribute zero); only the rows fed to the head change. TRL decides this through
    `trl.trainer.utils._use_triton`, which this wraps to answer True for CPU tensors (the kernels' own
    choice of Triton vs torch code is a separate reference, left untouched). Without that private name
    (another TRL version) nothing changes.
    """
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        return False
    if getattr(original, "_ragteam_compact_cpu", False):
        return True

    def use_compact(device) -> bool:
        return device.type == "cpu" or original(device)

    use_compact._ragteam_compact_cpu = True
    trl_utils._use_triton = use_compact
    return True


def conversation_length(tokenizer, messages: list, reply: str) -> int:
    """Tokens of `messages` + `reply` as the assistant's turn, rendered with the model's chat template."""
    text = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": reply}], add_generation_prompt=False, tokenize=False
    )
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def row_limit(cfg: TrainConfig, lengths: list[int]) -> int:
    """The length a trainer fits its rows to: --max-length, or the longest row when it is not given (so the
    defaults of `collect` and `train` never drop a row: MMOA-RAG's rows reach 3k tokens)."""
    return cfg.max_length if cfg.max_length is not None else max(lengths, default=16)


DROP_WARNING_SHARE = 0.10
"""Past this share of rows dropped for length, the message is a WARNING: the run trains on what is left."""


def drop_long_rows(rows: list, lengths: list[int], cfg: TrainConfig, command: str, what: str) -> list:
    """The rows whose whole conversation fits in `row_limit`; say on stderr how many did not (a WARNING past
    `DROP_WARNING_SHARE`; none left: error).

    Why drop rather than cut: TRL keeps the start of a long sequence, which would train a reply cut before
    its end-of-turn token (or, when packing, pack a prompt with no reply at all: compute for nothing).
    """
    limit = row_limit(cfg, lengths)
    kept = [row for row, n in zip(rows, lengths) if n <= limit]
    if not kept:
        raise ValueError(f"{cfg.data}: every {what[:-1]} is longer than --max-length {limit} tokens")
    dropped = len(rows) - len(kept)
    if dropped:
        loud = "WARNING " if dropped > DROP_WARNING_SHARE * len(rows) else ""
        print(
            f"ragteam {command}: {loud}{dropped} of {len(rows)} {what} dropped: longer than "
            f"--max-length {limit} tokens (longest: {max(lengths)}); leave --max-length unset to keep them",
            file=sys.stderr,
        )
    return kept


# ---- logging ---------------------------------------------------------------------------------------------


def jsonl_log_callback(out: str | Path):
    """A TrainerCallback appending each logged step to `out/log.jsonl`: {"step", "epoch", "time", ...}."""
    from transformers import TrainerCallback

    path = Path(out) / "log.jsonl"

    class JsonlLog(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            row = {"step": state.global_step, "epoch": state.epoch, "time": round(time.time(), 3)}
            row.update({k: v for k, v in logs.items() if isinstance(v, int | float | str)})
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")

    return JsonlLog()


def read_log(out: str | Path) -> list[dict]:
    """The rows of `out/log.jsonl`."""
    path = Path(out) / "log.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class Start:
    """What a trainer knows once its opening phases are done (`start_training`)."""

    rows: list[Any]
    resume_from: Path | None  # the checkpoint to resume from, None for a fresh run
    lr: float
    init: Path  # the resolved initial model folder


def start_training(
    cfg: TrainConfig,
    opts: Config,
    trainer: str,
    read_rows: Callable[[str], list[Any]],
) -> Start:
    """The phases every trainer opens with, in order: libraries set up; every row validated before any model
    loads; the output folder prepared (fresh, or the checkpoint to resume from); the learning rate and the
    initial model resolved; the resolved config written."""
    setup_libraries()
    rows = read_rows(cfg.data)
    resume_from = prepare_out_dir(cfg)
    lr = resolved_lr(cfg, trainer)
    init = resolve_init(cfg.init)
    write_config(cfg.out, f"train {trainer}", cfg, opts, lr, init)
    return Start(rows, resume_from, lr, init)
