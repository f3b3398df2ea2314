"""A trainer's output folder `--out DIR` (SFT, DPO, PRM and PPO alike):

    DIR/config.yaml          the resolved config (learning rate included), command and library versions
    DIR/log.jsonl            one JSON line per logged step {"step", "epoch", "loss", ...}; appended on resume
    DIR/runs/                TensorBoard event files (when tensorboard is installed)
    DIR/wandb/               the Weights & Biases run, with --report-to wandb (`train/report.py`)
    DIR/checkpoint-N/        every --save-steps steps (the newest --save-total-limit kept); --resume continues
                             from the newest
    DIR/                     the final model: a full model folder, or a LoRA adapter (policy trainers)

The folder guards against mistakes: a folder that already holds checkpoints or a model is only reused with
`--resume`, so a second run never overwrites a first one by accident, and a folder holding files another
command wrote is refused unless `--overwrite` (`check_train_out`). The model a run starts from
(`--policy.model`, `--prm.model` for a PRM) is resolved here too, before the folder is made: a bad one
leaves none behind.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from ragteam.config import Config, versions
from ragteam.train.train_config import TrainConfig

__all__ = ["check_train_out", "checkpoints", "prepare_out_dir", "read_log", "resolve_init", "write_config"]

TRAIN_OWN = ("log.jsonl",)  # what a trainer writes into --out before its config.yaml


def check_train_out(kind: str, cfg: Any) -> None:
    """Refuse an `--out` that holds files `ragteam train KIND` did not write, unless `cfg.overwrite`
    (`ragteam.outdir`). Under torchrun only rank 0 checks: the others would see its files appear."""
    from ragteam.outdir import check_out_dir

    if os.environ.get("RANK", "0") == "0":
        check_out_dir(cfg.out, f"train {kind}", bool(getattr(cfg, "overwrite", False)), own=TRAIN_OWN)


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


def read_log(out: str | Path) -> list[dict]:
    """The rows of `out/log.jsonl`."""
    path = Path(out) / "log.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def resolve_init(init: str, flag: str = "--policy.model") -> Path:
    """The folder of the model a run starts from (`smollm2` and `tiny` are built on first use); a clear
    error, naming `flag`, for an adapter."""
    from ragteam.llm.local import resolve_model_path

    path = Path(init).expanduser()
    if (path / "adapter_config.json").is_file() and not (path / "config.json").is_file():
        base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get(
            "base_model_name_or_path"
        )
        raise ValueError(
            f"{flag} {init} is a LoRA adapter, not a model: start from a full model folder (its base was "
            f"{base}); to continue a LoRA run use --resume, or train the first stage without --lora"
        )
    return resolve_model_path(init)


def write_config(out: str | Path, command: str, cfg: Config, lr: float, init_path: Path) -> Path:
    """Write `out/config.yaml`: the trainer's config with the resolved lr (`--overwrite` left out: it says
    how the folder was chosen, not how the model was trained), the resolved start model, versions."""
    resolved = cfg.model_dump(mode="json", exclude={"overwrite"}) | {"lr": lr}
    doc = {
        "command": command,
        "config": resolved,
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
