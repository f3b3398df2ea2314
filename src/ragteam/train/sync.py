"""Keeping the rollout policy's weights equal to the trained ones (`WeightSync`).

PPO rolls out with the current weights. The in-process backend holds the trained module itself, so there is
nothing to do (`SharedModule`). A policy served over HTTP (`--policy.backend openai`) has its own copy: after
every update the trainer writes the weights to a folder the server can read and asks the server to load them
(`PushToServer`; `ragteam serve llm --allow-weight-updates` implements `POST /v1/load_weights`). Old
log-probs are recomputed by the trainer either way, so a server's numerics (bf16, other kernels) never enter
the PPO ratio; the drift between the two is what a run should watch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import httpx

__all__ = ["PushToServer", "SharedModule", "WeightSync"]


class WeightSync(Protocol):
    def push(self, policy: Any, iteration: int) -> None:
        """Make the rollout backend use `policy`'s weights as they are after `iteration` updates (a second
        push for the same iteration may be skipped)."""


class SharedModule:
    """The in-process backend: rollouts run on the trained module itself."""

    def push(self, policy: Any, iteration: int) -> None:
        return None


class PushToServer:
    """Write the weights to `folder` (safetensors) and POST `{"path": folder}` to `url` (the server's
    `/v1/load_weights`); the server must see the same file system (same machine, or a shared volume)."""

    def __init__(self, url: str, folder: str | Path, timeout: float = 600.0, retries: int = 2) -> None:
        self.url = url
        self.folder = Path(folder).resolve()
        self.timeout = timeout
        self.retries = retries
        self.pushes = 0
        self.pushed: int | None = None  # the iteration whose weights the server holds

    @classmethod
    def for_base_url(cls, base_url: str, folder: str | Path) -> PushToServer:
        """From an OpenAI base URL (`http://host:port/v1`)."""
        base = base_url.rstrip("/")
        base = base if base.endswith("/v1") else base + "/v1"
        return cls(base + "/load_weights", folder)

    def push(self, policy: Any, iteration: int) -> None:
        if iteration == self.pushed:
            return  # these weights are on the server already (an evaluation pushed them before this rollout)
        self.folder.mkdir(parents=True, exist_ok=True)
        policy.save_pretrained(self.folder, safe_serialization=True)
        error: str = ""
        for attempt in range(self.retries + 1):
            try:
                r = httpx.post(self.url, json={"path": str(self.folder)}, timeout=self.timeout)
                if r.status_code == 200:
                    self.pushes += 1
                    self.pushed = iteration
                    return
                error = f"HTTP {r.status_code}: {r.text[:300]}"
                if r.status_code < 500:
                    break  # the server refused this folder: retrying will not help
            except httpx.HTTPError as e:
                error = f"{type(e).__name__}: {e}"
            time.sleep(min(2.0**attempt, 10.0))
        raise RuntimeError(
            f"pushing the policy (iteration {iteration}) to {self.url} failed: {error}; start the server "
            "with `ragteam serve llm --allow-weight-updates` on the same file system"
        )
