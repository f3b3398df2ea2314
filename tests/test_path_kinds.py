"""Every path an operator or a client names is opened only if it is a regular file (or folder) of the kind
expected, and a server checks it off its event loop. Before, `POST /v1/load_weights` with a folder whose
`model.safetensors` is a FIFO froze every route of `serve llm` (`/health` too): safetensors opened the pipe
holding the GIL. A FIFO as `--corpus` was "no such corpus file", `--corpus pooled:/nonexistent` "a file is in
the way of an output folder (None)"."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from conftest import TEST_DEVICE

from ragteam.serve.llm import weights_folder_problem
from ragteam.serve.testing import ServerProcess
from ragteam.train.data import read_sft_rows

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "4", "--rollout.llm-max-tokens", "4", "--no-progress"]


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ragteam.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_weights_folder_problem_never_opens_what_it_checks(tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    os.mkfifo(weights / "model.safetensors")
    started = time.monotonic()
    assert "model.safetensors is not a regular file" in weights_folder_problem(str(weights))
    assert time.monotonic() - started < 1
    (weights / "model.safetensors").unlink()
    (weights / "model.safetensors").mkdir()
    assert "is not a regular file" in weights_folder_problem(str(weights))
    assert weights_folder_problem(str(tmp_path / "none")).startswith("does not exist")


@pytest.mark.slow  # serve llm in a process of its own
def test_load_weights_with_a_fifo_is_a_400_and_health_keeps_answering(tmp_path):
    weights = tmp_path / "weights"
    weights.mkdir()
    fifo = weights / "model.safetensors"
    os.mkfifo(fifo)
    args = [
        "llm",
        "--model.model",
        "tiny",
        "--model.device",
        TEST_DEVICE,
        "--allow-weight-updates",
        "--model.threads",
        "1",
    ]
    with ServerProcess(args, timeout=90) as srv:
        answer: dict[str, httpx.Response] = {}

        def load() -> None:
            answer["r"] = httpx.post(f"{srv.url}/v1/load_weights", json={"path": str(weights)}, timeout=30)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        try:
            health = httpx.get(f"{srv.url}/health", timeout=5)  # a frozen server: a timeout here
            assert health.status_code == 200
            loader.join(timeout=10)
            assert not loader.is_alive(), "load_weights did not answer within 10 s"
        finally:
            if loader.is_alive():  # free the server (and this test) by opening the pipe's other end
                with open(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK), "wb"):
                    pass
        r = answer["r"]
        assert r.status_code == 400, r.text[:300]
        assert "model.safetensors is not a regular file" in r.json()["error"]["message"]
        assert httpx.get(f"{srv.url}/health", timeout=5).status_code == 200


def test_a_fifo_or_a_missing_folder_as_an_input_is_one_line_naming_it(tmp_path):
    fifo = tmp_path / "corpus.jsonl"
    os.mkfifo(fifo)
    data = tmp_path / "q.jsonl"
    data.write_text('{"id": "q1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}\n')
    base = ["eval", "--workflow", "standard-rag", "--data", str(data), *TINY]
    for corpus, needle in (
        (str(fifo), f"{fifo}: not a regular file (a pipe or a device?)"),
        ("pooled:/nonexistent", "/nonexistent: not a folder of benchmark files"),
    ):
        done = _cli(*base, "--out", str(tmp_path / corpus.replace("/", "_")), "--corpus", corpus)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert needle in done.stderr and "in the way" not in done.stderr, done.stderr[-1000:]
    with pytest.raises(ValueError, match="not a regular file"):
        read_sft_rows(fifo)
