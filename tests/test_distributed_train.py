"""Data-parallel training under torchrun with gloo on CPU (two processes) against one process.

The claim: PPO's update and TRL's SFT give the same losses and the same weights (to float round-off) whether
one process trains on the whole batch or two ranks each take a share and all-reduce their gradients; only
rank 0 writes the output folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ragteam.train.distributed import SINGLE, gather_shares, share, split_tokens

TOKENS = 8192  # the tiny model's byte-level BPE makes long prompts (as in test_ppo)


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1")


def _run(argv: list[str], ranks: int) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    cmd = (launcher if ranks > 1 else [sys.executable]) + ["-m", "ragteam.cli.main", *argv]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x.strip()]


def _max_gap(a: Path, b: Path) -> float:
    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    return max(float((x[k] - y[k]).abs().max()) for k in x)


# ---- the pieces ------------------------------------------------------------------------------------------


def test_split_tokens_balances_the_ranks_and_keeps_the_minibatch_order() -> None:
    lengths = [100, 10, 90, 20, 50, 50]
    parts = split_tokens([5, 0, 1, 2, 3, 4], lengths, 2)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4, 5]
    assert [sum(lengths[i] for i in p) for p in parts] == [160, 160]
    order = [5, 0, 1, 2, 3, 4]
    assert all(p == sorted(p, key=order.index) for p in parts)  # each share in minibatch order
    assert split_tokens([3], lengths, 2) == [[3], []]  # fewer samples than ranks: an empty share
    assert split_tokens([2, 0], lengths, 1) == [[2, 0]]  # one process: the minibatch itself


def test_one_process_shares_are_the_whole_list() -> None:
    assert share([1, 2, 3], SINGLE) == [1, 2, 3] and gather_shares([1, 2, 3], SINGLE) == [1, 2, 3]


# ---- PPO -------------------------------------------------------------------------------------------------


def _ppo_argv(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train", "ppo", "--recipe", "mmoa", "--data", str(data), "--out", str(out), "--policy.model", "tiny",
        "--limit", "12", "--iterations", "2", "--questions-per-iteration", "4", "--variant", "s-g",
        "--topk", "2", "--candidates", "2", "--retriever.kind", "bm25", "--no-progress", "--no-tensorboard",
        "--ppo.max-sample-tokens", str(TOKENS), "--ppo.micro-tokens", "2500", "--ppo.minibatch-tokens",
        "5000", "--ppo.lr", "1e-3", "--ppo.value-lr", "1e-3", *extra,
    ]  # fmt: skip


@pytest.mark.slow  # torchrun: two processes
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_ppo_on_two_gloo_ranks_equals_one_process(parallel: str, hotpot_small: Path, tmp_path: Path) -> None:
    """Two iterations, several minibatches a step (some with one sample: one rank idles with a zero loss)."""
    one, two = tmp_path / "one", tmp_path / "two"
    _run(_ppo_argv(hotpot_small, one), 1)
    _run(_ppo_argv(hotpot_small, two, "--ppo.parallel", parallel), 2)
    a, b = _rows(one), _rows(two)
    assert [r["step"] for r in b] == [1, 2]  # rank 0 alone logs
    assert [r["samples"] for r in b] == [r["samples"] for r in a]  # the ranks' episodes were gathered
    for x, y in zip(a, b, strict=True):
        for key in ("policy_loss", "value_loss", "grad_norm", "entropy", "approx_kl"):
            assert y["train"][key] == pytest.approx(x["train"][key], rel=1e-4, abs=1e-6), key
        assert y["kl_mean"] == pytest.approx(x["kl_mean"], rel=1e-4, abs=1e-7)
    # the update moves weights by ~lr (1e-3); the two runs differ by float round-off only
    assert _max_gap(one / "model.safetensors", two / "model.safetensors") < 1e-5
    assert (
        _max_gap(one / "checkpoint-2" / "model.safetensors", two / "checkpoint-2" / "model.safetensors")
        < 1e-5
    )
    assert torch.allclose(
        torch.load(one / "critic" / "value_head.pt")["weight"],
        torch.load(two / "critic" / "value_head.pt")["weight"],
        atol=1e-5,
    )


# ---- SFT (TRL under torchrun: accelerate's DDP) ----------------------------------------------------------


@pytest.mark.slow  # torchrun: two processes
def test_sft_on_two_gloo_ranks_equals_one_process(tmp_path: Path) -> None:
    """Batch 4 in one process = batch 2 on each of two ranks: the same rows per step, the same token-mean
    loss (TRL averages over the tokens of all ranks), the same updated weights."""
    from test_train_sft import sft_row, write_jsonl

    data = write_jsonl(tmp_path / "sft.jsonl", [sft_row(i) for i in range(8)])
    argv = [
        "train", "sft", "--data", str(data), "--policy.model", "tiny", "--max-length", "256", "--device", "cpu",
        "--no-progress", "--no-tensorboard", "--max-steps", "2", "--lr", "1e-3",
    ]  # fmt: skip
    _run([*argv, "--batch-size", "4", "--out", str(tmp_path / "one")], 1)
    _run([*argv, "--batch-size", "2", "--out", str(tmp_path / "two")], 2)
    a = [r for r in _rows(tmp_path / "one") if "loss" in r]
    b = [r for r in _rows(tmp_path / "two") if "loss" in r]
    assert len(a) == len(b) == 2
    assert [r["num_tokens"] for r in b] == [r["num_tokens"] for r in a]  # both ranks' rows were counted
    assert [r["loss"] for r in b] == pytest.approx([r["loss"] for r in a], rel=1e-5)
    assert _max_gap(tmp_path / "one" / "model.safetensors", tmp_path / "two" / "model.safetensors") < 1e-5


# ---- pushing the trained weights to vLLM (its HTTP routes, against a loopback server that records) -------


class Recorder:
    """A loopback HTTP server that records every request (method, path, JSON body) and answers each with
    the next scripted status (200 once the script is spent): what vLLM's routes would be sent."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[tuple[str, str, object]] = []
        self.statuses = list(statuses or [])
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                recorder.requests.append(("POST", self.path, json.loads(raw) if raw else None))
                status = recorder.statuses.pop(0) if recorder.statuses else 200
                body = b'{"status": "ok"}' if status == 200 else b'{"detail": "Not Found"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tiny_policy():
    from ragteam.llm.local import LocalChatModel

    return LocalChatModel("tiny", device="cpu")


def test_full_weights_push_overwrites_the_served_folder_then_reloads_and_resets_the_cache(
    tiny_policy, tmp_path: Path
) -> None:
    from ragteam.train.sync import PushToVLLM

    served = tmp_path / "served"  # what `vllm serve served` was started on: a copy of the initial policy
    tiny_policy.model.save_pretrained(served)
    tiny_policy.tokenizer.save_pretrained(served)
    policy = tiny_policy.model
    with Recorder() as srv:
        sync = PushToVLLM(srv.url, served, retries=0)
        with torch.no_grad():
            policy.model.norm.weight.add_(1.0)  # an "update"
        try:
            sync.push(policy, 1)
            sync.push(policy, 1)  # the same version: not sent twice
        finally:
            with torch.no_grad():
                policy.model.norm.weight.sub_(1.0)
        assert srv.requests == [
            ("POST", "/collective_rpc", {"method": "reload_weights"}),
            ("POST", "/reset_prefix_cache", None),
        ]  # vLLM's dev routes live at the server root, not under /v1
    saved = load_file(str(served / "model.safetensors"))
    assert torch.equal(saved["model.norm.weight"], policy.model.norm.weight + 1.0)  # the pushed weights
    assert (served / "tokenizer.json").is_file()  # what vLLM read at start stays
    assert sync.pushes == 1 and sync.pushed == 1


def test_full_weights_push_names_what_the_server_lacks(tiny_policy, tmp_path: Path) -> None:
    from ragteam.train.sync import PushToVLLM

    with Recorder([404]) as srv:
        with pytest.raises(FileNotFoundError, match="holds no model"):
            PushToVLLM(srv.url, tmp_path / "empty").push(tiny_policy.model, 1)
        tiny_policy.model.save_pretrained(tmp_path / "served")
        with pytest.raises(RuntimeError, match="VLLM_SERVER_DEV_MODE=1") as err:
            PushToVLLM(srv.url, tmp_path / "served", retries=2).push(tiny_policy.model, 1)
        assert "HTTP 404" in str(err.value) and len(srv.requests) == 1  # a refusal is not retried
    with Recorder([503]) as srv:  # a passing server error is retried
        PushToVLLM(srv.url, tmp_path / "served", retries=1).push(tiny_policy.model, 1)
        assert [path for _, path, _ in srv.requests] == ["/collective_rpc"] * 2 + ["/reset_prefix_cache"]


def test_lora_push_loads_each_version_under_its_own_name_and_unloads_the_last(
    tiny_policy, tmp_path: Path
) -> None:
    import copy

    from peft import LoraConfig, get_peft_model

    from ragteam.train.sync import PushLoRAToVLLM

    lora = get_peft_model(
        copy.deepcopy(tiny_policy.model), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    )
    names: list[str] = []
    with Recorder() as srv:
        sync = PushLoRAToVLLM(srv.url, tmp_path / "adapters", "policy", on_loaded=names.append, retries=0)
        sync.push(lora, 1)
        assert (tmp_path / "adapters" / "v1" / "adapter_config.json").is_file()
        sync.push(lora, 2)
        assert srv.requests == [
            (
                "POST",
                "/v1/load_lora_adapter",
                {"lora_name": "policy-v1", "lora_path": str(tmp_path / "adapters" / "v1")},
            ),
            (
                "POST",
                "/v1/load_lora_adapter",
                {"lora_name": "policy-v2", "lora_path": str(tmp_path / "adapters" / "v2")},
            ),
            ("POST", "/v1/unload_lora_adapter", {"lora_name": "policy-v1"}),
        ]
    assert names == ["policy-v1", "policy-v2"]  # the rollout client asks for the newest adapter
    assert not (tmp_path / "adapters" / "v1").exists() and (tmp_path / "adapters" / "v2").is_dir()
    with pytest.raises(TypeError, match="not a LoRA"):
        sync.push(tiny_policy.model, 3)


def test_ppo_selects_the_vllm_push_for_a_served_policy(tmp_path: Path) -> None:
    from ragteam.train.ppo.run import weight_sync
    from ragteam.train.ppo_config import PPOConfig
    from ragteam.train.sync import PushToServer, PushToVLLM, SharedModule

    def cfg(**ppo) -> PPOConfig:
        served = {"backend": "openai", "base_url": "http://gpu:8000/v1", "model": "policy"}
        return PPOConfig(data="q", out=str(tmp_path), policy=served, ppo=ppo)

    vllm = weight_sync(cfg(weight_sync="vllm", sync_folder=str(tmp_path / "served")), None)
    assert isinstance(vllm, PushToVLLM) and vllm.root == "http://gpu:8000"
    assert vllm.folder == (tmp_path / "served").resolve()
    assert isinstance(weight_sync(cfg(), None), PushToServer)
    assert isinstance(weight_sync(PPOConfig(data="q", out=str(tmp_path)), None), SharedModule)
