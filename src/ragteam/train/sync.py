"""Keeping the rollout policy's weights equal to the trained ones (`WeightSync`).

PPO rolls out with the current weights. The in-process backend holds the trained module itself, so there is
nothing to do (`SharedModule`). A policy served over HTTP (`--policy.backend openai`) has its own copy: after
every update the trainer writes the weights to a folder the server can read and asks the server to load them
(`PushToServer`; `ragteam serve llm --allow-weight-updates` implements `POST /v1/load_weights`). Old
log-probs are recomputed by the trainer either way, so a server's numerics (bf16, other kernels) never enter
the PPO ratio; the drift between the two is what a run should watch.

Other rollout backends (`--ppo.weight-sync`, `--rollout.workers`, docs/distributed.md):

- `PushToVLLM`: vLLM serving the policy from a folder (`vllm serve FOLDER`, started with
  `VLLM_SERVER_DEV_MODE=1`): the trainer overwrites FOLDER's weights, then asks vLLM to re-read them
  (`POST /collective_rpc {"method": "reload_weights"}`) and to drop the KV blocks it cached under the old
  weights (`POST /reset_prefix_cache`).
- `PushLoRAToVLLM`: a LoRA policy served by vLLM (`--enable-lora`, `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`):
  each version is saved as its own adapter and loaded under its own name (`POST /v1/load_lora_adapter`), the
  rollout client switches to that name, and the previous adapter is unloaded. A new name per version means
  a new adapter id, so no prefix-cache entry of an older version can be reused.
- `PushToWorkers`: rollouts on Ray actors (`--rollout.workers N`) that hold their own copy of the policy.
- `PushToCopy`: FSDP's whole rollout copy of a sharded policy.

Every copying push shares one bookkeeping (`Push`): a second push of the iteration the backend holds is
skipped, and `pushes` / `pushed` count what was sent; those to a server share its folder, timeout, retries and
key (`ServerPush`). A subclass says only how to send (`send`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

from ragteam.train.actor_critic import full_model, is_lora

__all__ = [
    "Push",
    "PushLoRAToVLLM",
    "PushToCopy",
    "PushToServer",
    "PushToVLLM",
    "PushToWorkers",
    "ServerPush",
    "SharedModule",
    "WeightSync",
]


class WeightSync(Protocol):
    every_rank: bool
    """Under torchrun, whether every rank pushes (its own rollout copy, or a collective gather) rather than
    rank 0 alone (one server for the whole job)."""

    def push(self, policy: Any, iteration: int) -> None:
        """Make the rollout backend use `policy`'s weights as they are after `iteration` updates (a second
        push for the same iteration may be skipped)."""


class SharedModule:
    """The in-process backend: rollouts run on the trained module itself."""

    every_rank = True

    def push(self, policy: Any, iteration: int) -> None:
        return None


class Push:
    """The bookkeeping every copying push shares: a push of the iteration the backend already holds (an
    evaluation pushed it before this rollout) is skipped; `pushes` counts the copies sent, `pushed` is the
    iteration the backend holds. A subclass says how to send the weights (`send`)."""

    every_rank = False

    def __init__(self) -> None:
        self.pushes = 0
        self.pushed: int | None = None

    def push(self, policy: Any, iteration: int) -> None:
        if iteration == self.pushed:
            return
        self.send(policy, iteration)
        self.pushes += 1
        self.pushed = iteration

    def send(self, policy: Any, iteration: int) -> None:
        raise NotImplementedError


class ServerPush(Push):
    """A push to a server on the same file system: the weights go through `folder`, then HTTP POSTs (with
    `api_key`, `timeout` and `retries`) ask the server to load them."""

    def __init__(
        self, folder: str | Path, timeout: float = 600.0, retries: int = 2, api_key: str | None = None
    ) -> None:
        super().__init__()
        self.folder = Path(folder).resolve()
        self.timeout = timeout
        self.retries = retries
        self.api_key = api_key

    def post(self, url: str, body: dict[str, Any] | None, what: str, hint: str) -> Any:
        return post(url, body, self.timeout, self.retries, what, hint, api_key=self.api_key)


class PushToServer(ServerPush):
    """Write the weights to `folder` (safetensors) and POST `{"path": folder}` to `url` (the server's
    `/v1/load_weights`); the server must see the same file system (same machine, or a shared volume)."""

    def __init__(
        self,
        url: str,
        folder: str | Path,
        timeout: float = 600.0,
        retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        super().__init__(folder, timeout, retries, api_key)
        self.url = url

    @classmethod
    def for_base_url(cls, base_url: str, folder: str | Path, api_key: str | None = None) -> PushToServer:
        """From an OpenAI base URL (`http://host:port/v1`)."""
        base = base_url.rstrip("/")
        base = base if base.endswith("/v1") else base + "/v1"
        return cls(base + "/load_weights", folder, api_key=api_key)

    def send(self, policy: Any, iteration: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        full_model(policy).save_pretrained(self.folder, safe_serialization=True)
        self.post(
            self.url,
            {"path": str(self.folder)},
            f"pushing the policy (iteration {iteration})",
            "start the server with `ragteam serve llm --allow-weight-updates` on the same file system",
        )


def post(
    url: str,
    body: dict[str, Any] | None,
    timeout: float,
    retries: int,
    what: str,
    hint: str,
    api_key: str | None = None,
) -> Any:
    """POST `body` as JSON (with `Authorization: Bearer api_key` when given: a server started with
    `--api-key` refuses weight pushes without it); retry connection errors and 5xx (not other 4xx: the
    server refused); the response's JSON (or text) on 200, else RuntimeError saying what failed and `hint`."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    error = ""
    for attempt in range(retries + 1):
        try:
            r = httpx.post(url, json=body, timeout=timeout, headers=headers)
            if r.status_code == 200:
                try:
                    return r.json()
                except ValueError:
                    return r.text
            error = f"HTTP {r.status_code}: {r.text[:300]}"
            if r.status_code < 500:
                break  # the server refused this request: retrying will not help
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"
        if attempt < retries:
            time.sleep(min(2.0**attempt, 10.0))
    raise RuntimeError(f"{what}: POST {url} failed: {error}; {hint}")


def server_root(base_url: str) -> str:
    """`http://host:port` from an OpenAI base URL (`http://host:port/v1`): where vLLM's dev routes live."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class PushToVLLM(ServerPush):
    """Full weights to a vLLM server that serves `folder` (`vllm serve FOLDER`, `VLLM_SERVER_DEV_MODE=1`).

    Each push overwrites the safetensors in `folder` (the trainer and the server share the file system),
    then `POST /collective_rpc {"method": "reload_weights"}` makes every vLLM worker re-read the weights of
    the model path it serves, and `POST /reset_prefix_cache` drops the KV blocks computed with the old ones
    (else a prompt prefix seen before the update would be continued from stale keys and values). The
    folder keeps its config and tokenizer files (vLLM read them at start); only the weights change.
    """

    def __init__(
        self,
        base_url: str,
        folder: str | Path,
        timeout: float = 600.0,
        retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        super().__init__(folder, timeout, retries, api_key)
        self.root = server_root(base_url)

    def send(self, policy: Any, iteration: int) -> None:
        if not (self.folder / "config.json").is_file():
            raise FileNotFoundError(
                f"{self.folder} holds no model: start vLLM on a copy of the initial policy in that folder "
                "(`vllm serve FOLDER`), and pass the same folder as --ppo.sync-folder"
            )
        full_model(policy).save_pretrained(self.folder, safe_serialization=True)
        hint = "start vLLM with VLLM_SERVER_DEV_MODE=1 (its weight-reload routes) serving this folder"
        what = f"reloading the policy (iteration {iteration}) on vLLM"
        self.post(f"{self.root}/collective_rpc", {"method": "reload_weights"}, what, hint)
        self.post(f"{self.root}/reset_prefix_cache", None, what, hint)


class PushLoRAToVLLM(ServerPush):
    """A LoRA policy (a peft model) to vLLM's runtime adapter routes, one adapter name per version.

    Each push saves the adapter to `folder/v<iteration>/`, loads it as `<name>-v<iteration>`
    (`POST /v1/load_lora_adapter`), calls `on_loaded(new_name)` (the rollout client then asks for that
    model), and unloads the previous version (`POST /v1/unload_lora_adapter`) and its folder.
    """

    def __init__(
        self,
        base_url: str,
        folder: str | Path,
        name: str,
        on_loaded: Callable[[str], None] | None = None,
        timeout: float = 600.0,
        retries: int = 2,
        api_key: str | None = None,
    ) -> None:
        super().__init__(folder, timeout, retries, api_key)
        base = base_url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.name = name
        self.on_loaded = on_loaded
        self.loaded: str | None = None  # the adapter name the server now serves

    def send(self, policy: Any, iteration: int) -> None:
        if not is_lora(policy):
            raise TypeError(
                f"{type(policy).__name__} is not a LoRA (peft) model: push full weights instead "
                "(--ppo.weight-sync vllm), or train a LoRA adapter (--ppo.lora)"
            )
        name, path = f"{self.name}-v{iteration}", self.folder / f"v{iteration}"
        shutil.rmtree(path, ignore_errors=True)
        policy.save_pretrained(path)  # a peft model writes its adapter only
        hint = "start vLLM with --enable-lora (and --max-lora-rank >= the adapter's) and " + (
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, on the same file system"
        )
        what = f"loading the LoRA policy (iteration {iteration}) on vLLM"
        self.post(f"{self.base}/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, what, hint)
        if self.on_loaded is not None:
            self.on_loaded(name)
        previous, self.loaded = self.loaded, name
        if previous is not None:
            unload = f"unloading the LoRA policy {previous}"
            self.post(f"{self.base}/unload_lora_adapter", {"lora_name": previous}, unload, hint)
            shutil.rmtree(self.folder / f"v{previous.rsplit('-v', 1)[1]}", ignore_errors=True)


class PushToWorkers(Push):
    """Rollouts on Ray actors (`--rollout.workers N`, `rollout/distributed.py`), each with its own copy of
    the policy: a push puts the state dict in Ray's object store once and every actor loads it."""

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine

    def send(self, policy: Any, iteration: int) -> None:
        self.engine.set_policy_weights(
            {k: v.detach().cpu() for k, v in full_model(policy).state_dict().items()}
        )


class PushToCopy(Push):
    """FSDP (`--ppo.parallel fsdp` under torchrun) shards the trained policy over the ranks, so each rank
    rolls out on a whole copy of it: a push gathers the full weights (every rank takes part) and loads them
    into the copy."""

    every_rank = True

    def __init__(self, copy: Any) -> None:
        super().__init__()
        self.copy = copy

    def send(self, policy: Any, iteration: int) -> None:
        from ragteam.train.distributed import full_state_dict

        self.copy.load_state_dict(full_state_dict(policy))
