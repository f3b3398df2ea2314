"""Logging where users look (issue 22, item 5): `--report-to wandb` writes a real offline Weights & Biases run
into OUT/wandb (no account: WANDB_MODE=offline), a missing `wandb` package is a one-line error naming it, and the
CLI keeps the libraries' deprecation notices out of the terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_train_sft import sft_row, write_jsonl

from ragteam.cli.main import main

pytestmark = pytest.mark.slow  # training runs logging to real offline wandb runs

ROOT = Path(__file__).resolve().parents[1]


def _wandb_records(out: Path) -> bytes:
    """The bytes of the offline run's record file (protobuf records: the logged keys appear as text), once
    W&B's service process has written them all (`teardown` waits for it to exit)."""
    import wandb

    wandb.teardown()
    (run,) = (out / "wandb").glob("offline-run-*")
    (records,) = run.glob("run-*.wandb")
    return records.read_bytes()


def _sft_flags(tmp_path: Path) -> list[str]:
    data = write_jsonl(tmp_path / "sft.jsonl", [sft_row(i) for i in range(4)])
    return ["train", "sft", "--data", str(data), "--out", str(tmp_path / "out"), "--policy.model", "tiny",
            "--batch-size", "2", "--max-length", "256", "--device", "cpu", "--no-progress", "--no-tensorboard",
            "--max-steps", "2"]  # fmt: skip


@pytest.fixture
def offline(monkeypatch, tmp_path):
    pytest.importorskip("wandb", reason="the wandb extra: pip install 'ragteam[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))  # nothing written to ~/.config
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def test_train_sft_reports_to_an_offline_wandb_run_in_out(offline, tmp_path):
    assert main([*_sft_flags(tmp_path), "--report-to", "wandb"]) == 0
    out = tmp_path / "out"
    records = _wandb_records(out)
    assert b"train/loss" in records and b"train/learning_rate" in records  # the trainer's logged steps
    assert b"report_to" in records and b"lora_r" in records  # the resolved config
    run_id = (out / "wandb-run-id").read_text().strip()  # what --resume continues
    assert list((out / "wandb").glob(f"offline-run-*-{run_id}")) and (out / "log.jsonl").stat().st_size > 0


def test_report_to_wandb_without_the_package_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: find_spec answers None
    assert main([*_sft_flags(tmp_path), "--report-to", "wandb"]) == 2
    err = capsys.readouterr().err
    assert "--report-to wandb needs the `wandb` package" in err and "pip install 'ragteam[wandb]'" in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_the_cli_keeps_library_deprecation_notices_out_of_the_terminal(tmp_path):
    """transformers' "`past_key_values` is deprecated" (a FutureWarning and a log line) on every forward pass,
    as `ragteam ask` printed it; RAGTEAM_LIBRARY_WARNINGS=1 shows them again."""
    data = ROOT / "src" / "ragteam" / "demo" / "hotpotqa-dev-50.jsonl"
    cmd = [sys.executable, "-m", "ragteam.cli.main", "ask", "Who wrote the novel?", "--workflow", "direct",
           "--data", str(data), "--llm.model", "tiny", "--llm.device", "cpu", "--rollout.llm-max-tokens", "4"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "RAGTEAM_LIBRARY_WARNINGS")}
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "Answer:" in quiet.stdout
    assert "deprecated" not in quiet.stderr and "Warning" not in quiet.stderr, quiet.stderr
    loud = subprocess.run(
        cmd, capture_output=True, text=True, env=env | {"RAGTEAM_LIBRARY_WARNINGS": "1"}, timeout=300
    )
    assert loud.returncode == 0 and "deprecated" in loud.stderr


def test_train_ppo_reports_each_iteration_to_the_offline_run(offline, hotpot_small, tmp_path):
    from test_ppo import tiny_cfg

    from ragteam.train.ppo import train_ppo

    out = train_ppo(tiny_cfg(hotpot_small, tmp_path / "ppo", iterations=2, report_to="wandb"))
    records = _wandb_records(out)
    for key in (b"reward/f1", b"credit/act", b"credit/episode", b"acts/trained", b"roles/selector/kl",
                b"train/policy_loss", b"kl_beta"):  # fmt: skip
        assert key in records, key  # the log row's numbers, as in TensorBoard
    assert b"questions_per_iteration" in records  # the resolved config
    assert (out / "wandb-run-id").read_text().strip()
