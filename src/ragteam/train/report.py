"""Where training metrics go beside `OUT/log.jsonl`: TensorBoard (`OUT/runs`) and Weights & Biases.

Weights & Biases is optional (`--report-to wandb`, the `wandb` extra: `pip install 'ragteam[wandb]'`). Its run
lives in `OUT/wandb/`, in project `$WANDB_PROJECT` (default `ragteam`), named after OUT, with the resolved config;
`WANDB_MODE=offline` logs without an account (`wandb sync OUT/wandb/offline-run-*` uploads it later). The run id
is kept in `OUT/wandb-run-id`, so `--resume` continues the same W&B run. The SFT, DPO and PRM trainers log
through transformers' own W&B callback, into the run opened here; PPO logs each iteration's row itself
(`Scalars`). Only the main process of a distributed run reports.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator

REPORT_TO_HELP = (
    "also log metrics to Weights & Biases: wandb (optional: pip install 'ragteam[wandb]'; the run in OUT/wandb, "
    "project $WANDB_PROJECT or ragteam; WANDB_MODE=offline needs no account)"
)
_MISSING = "--report-to wandb needs the `wandb` package, which is not installed: pip install 'ragteam[wandb]'"


def check_report_to(value: str) -> str:
    """The value of a `report_to` field, or a ValueError naming the missing package (a config error, before any
    model loads)."""
    if value == "wandb" and importlib.util.find_spec("wandb") is None:
        raise ValueError(_MISSING)
    return value


ReportTo = Annotated[Literal["none", "wandb"], AfterValidator(check_report_to)]
"""The type of a trainer config's `report_to` field: checked when the config is read."""


def start_wandb(out: Path, config: dict[str, Any], resume: bool) -> Any:
    """Open (or, on `resume`, reopen) the W&B run of the training in `out`; the `wandb.Run`."""
    try:
        import wandb
    except ImportError as e:
        raise ValueError(_MISSING) from e
    id_file = out / "wandb-run-id"
    run_id = id_file.read_text(encoding="utf-8").strip() if resume and id_file.is_file() else None
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "ragteam"),
        name=out.resolve().name,
        dir=str(out),
        config=config,
        id=run_id,
        resume="allow" if run_id else None,
    )
    id_file.write_text(run.id + "\n", encoding="utf-8")
    return run


@contextmanager
def wandb_run(
    report_to: str, out: Path, config: dict[str, Any], resume: bool, main: bool = True
) -> Iterator[Any]:
    """The W&B run for the block's training (None unless `report_to == "wandb"` on the main process), finished
    when the block ends, with the exit code of a failed run."""
    if report_to != "wandb" or not main:
        yield None
        return
    run = start_wandb(out, config, resume)
    ok = False
    try:
        yield run
        ok = True
    finally:
        run.finish(exit_code=0 if ok else 1)


class Scalars:
    """A log row's numbers written to TensorBoard and/or W&B: nested keys joined with `/`, at the row's step."""

    def __init__(self, tensorboard: Any = None, wandb: Any = None) -> None:
        self.tensorboard, self.wandb = tensorboard, wandb

    def log(self, values: dict[str, Any], step: int) -> None:
        numbers = {k: v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if self.tensorboard is not None:
            for key, value in numbers.items():
                self.tensorboard.add_scalar(key, value, step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(numbers, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
