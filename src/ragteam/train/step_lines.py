"""What the SFT, DPO and PRM trainers print while they train: one line per logged step, formatted as PPO's
iteration lines are (`sft step 5/20 (epoch 0.25): loss 2.484 | grad_norm 1.3 | lr 2e-05 | 812 tok/s`), under a
bar over the optimizer steps, in place of transformers' progress callback, which writes each log as a raw dict
(`{'loss': '2.484', ...}`), and of its printer (the same dict, without the bar).
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["step_line", "step_lines_callback", "use_step_lines"]

# what a step line shows first, in this order; other numbers follow by name (`total_flos` is never shown)
_FIRST = ("loss", "grad_norm", "learning_rate", "rewards/accuracies", "rewards/margins", "accuracy")
_HIDDEN = ("total_flos", "epoch", "step", "num_tokens")
_SHORT = {"learning_rate": "lr", "rewards/accuracies": "acc", "rewards/margins": "margin"}


def step_line(
    command: str, step: int, max_steps: int, logs: dict[str, Any], tokens_per_s: float | None
) -> str:
    """One logged step as the PPO trainer's lines read: `sft step 5/20 (epoch 0.25): loss 2.484 | grad_norm
    1.3 | lr 2e-05 | 812 tok/s`; the end-of-training summary (`train_runtime` ...) as `sft done: ...`."""
    if "train_runtime" in logs:
        done = [f"{k.removeprefix('train_')} {_number(v)}" for k, v in logs.items() if k not in _HIDDEN]
        return f"{command} done after {step} steps: " + " | ".join(done)
    shown = [k for k in _FIRST if k in logs] + sorted(k for k in logs if k not in _FIRST and k not in _HIDDEN)
    parts = [f"{_SHORT.get(k, k)} {_number(logs[k])}" for k in shown if isinstance(logs[k], int | float)]
    if tokens_per_s is not None:
        parts.append(f"{tokens_per_s:.0f} tok/s")
    epoch = f" (epoch {logs['epoch']:.2f})" if isinstance(logs.get("epoch"), int | float) else ""
    return f"{command} step {step}/{max_steps}{epoch}: " + " | ".join(parts)


def _number(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def use_step_lines(trainer: Any, command: str, progress: bool) -> None:
    """Replace transformers' progress callback (a bar that writes each log as a raw dict) or its printer (the
    raw dict, under --no-progress) with `StepLines`."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(step_lines_callback(command, progress))


def step_lines_callback(command: str, progress: bool):
    """A TrainerCallback: a bar over the optimizer steps (under --progress) and one `step_line` per logged
    step on stderr, its tokens/s from TRL's running `num_tokens` count (SFT) where there is one."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class StepLines(TrainerCallback):
        bar: Any = None
        last: tuple[float, float] | None = None  # (time, num_tokens) at the previous log

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.bar = tqdm(
                    total=state.max_steps, desc=f"train {command}", unit="step", disable=not progress
                )
                self.bar.update(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            rate, now, tokens = None, time.perf_counter(), logs.get("num_tokens")
            if isinstance(tokens, int | float):
                if self.last is not None and now > self.last[0] and tokens > self.last[1]:
                    rate = (tokens - self.last[1]) / (now - self.last[0])
                self.last = (now, float(tokens))
            line = step_line(command, state.global_step, state.max_steps, logs, rate)
            if self.bar is not None and not self.bar.disable:
                self.bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return StepLines()
