"""Numeric options are finite and in range, checked once (`Config` refuses NaN and infinity in every float
field; `check_number` for what Python callers pass to the servers), and YAML configs are strict: a key given
twice, a 5,000-digit integer, a scalar where a flag sets a field inside it, a 5,000-character file name are
each one line naming the file (and line), never a traceback. Before, `--batch-wait-ms inf` was accepted and
every request then hung, `--read-timeout inf` was a traceback, and duplicate keys passed silently."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from ragteam.config import ConfigError, check_number, load_config
from ragteam.serve.batcher import RequestBatcher
from ragteam.serve.guard import check_read_timeout


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ragteam.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-1000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for needle in needles:
        assert needle in done.stderr, done.stderr[-1000:]


def test_check_number_refuses_inf_nan_bools_and_out_of_range():
    assert check_number("x", 5, 0, 10) == 5
    for bad in (math.inf, -math.inf, math.nan, True, "3", 11, -1):
        with pytest.raises(ValueError, match="x must be a finite number >= 0 and <= 10"):
            check_number("x", bad, 0, 10)
    with pytest.raises(ValueError, match="> 0"):
        check_number("t", 0, 0, low_open=True)


def test_servers_built_from_python_refuse_infinite_waits_and_timeouts():
    with pytest.raises(ValueError, match="batch wait"):
        RequestBatcher(4, math.inf)
    with pytest.raises(ValueError, match="read_timeout"):
        check_read_timeout(math.inf)
    from ragteam.serve.retriever import make_app

    with pytest.raises(ValueError, match="read_timeout must be a finite number > 0"):
        make_app(object(), read_timeout=float("inf"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["serve", "llm", "--model.model", "tiny", "--batch-wait-ms", "inf"],
            "--batch-wait-ms: Input should be a finite",
        ),
        (["serve", "team", "--batch-wait-ms", "nan"], "--batch-wait-ms: Input should be a finite"),
        (["serve", "retriever", "--index", "x", "--batch-window-ms", "inf"], "--batch-window-ms"),
        (
            ["serve", "retriever", "--index", "x", "--read-timeout", "inf"],
            "--read-timeout: Input should be a finite",
        ),
        (
            ["serve", "llm", "--model.model", "tiny", "--read-timeout", "86400"],
            "--read-timeout: Input should be less",
        ),
        (
            ["serve", "llm", "--model.model", "tiny", "--batch-wait-ms", "1e9"],
            "--batch-wait-ms: Input should be less",
        ),
        (["compare", "a", "b", "--resamples", "1000000000"], "--resamples: Input should be less"),
        (
            ["eval", "--rollout.temperature", "inf", "--data", "x"],
            "--rollout.temperature: Input should be a finite",
        ),
    ],
)
def test_cli_numbers_out_of_range_are_one_line(argv, needle):
    _one_line(_cli(*argv), needle)


def test_yaml_duplicate_keys_huge_ints_and_scalars_beside_flags(tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text("data: a.jsonl\nlimit: 3\nlimit: 5\n")
    _one_line(_cli("eval", "--config", str(dup)), f"{dup}:3: key 'limit' is given twice (first at line 2)")
    nested = tmp_path / "nested.yaml"
    nested.write_text("policy:\n  model: tiny\n  model: smollm2\n")
    with pytest.raises(ConfigError, match=r"nested\.yaml:3: key 'model' is given twice"):
        from ragteam.cli.evaluate import Config

        load_config(Config, nested)
    big = tmp_path / "big.yaml"
    big.write_text("data: a.jsonl\nlimit: " + "9" * 5000 + "\n")
    _one_line(_cli("eval", "--config", str(big)), f"{big}:2: a number of 5000 digits; at most 4300")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("data: a.jsonl\npolicy: 5\n")
    _one_line(
        _cli("eval", "--config", str(scalar), "--policy.model", "tiny"),
        "policy is 5, but --policy.model sets a field inside it",
    )
    long_name = tmp_path / ("x" * 5000)
    done = _cli("eval", "--config", str(long_name))
    _one_line(done, "cannot read the config file (File name too long)")
    assert len(done.stderr) < 1000
    merged = tmp_path / "merge.yaml"  # merge keys are no duplicates
    merged.write_text("base: &b {model: tiny}\npolicy:\n  <<: *b\n  <<: *b\n")
    with pytest.raises(ConfigError, match="base"):  # an unknown field, not a duplicate key
        load_config(Config, merged)
