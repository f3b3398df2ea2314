"""One writer per run folder (`ragteam.outdir.run_lock`): a second eval, collect, train or ask on the same
output stops at once naming the holder's pid, and the lock of a process killed with -9 is taken over without
anyone cleaning up. Before, two identical `eval` commands on one `--out` each wrote every question, both
exiting 0; `ask --out FILE` replaced any existing file (a run's episodes.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragteam.outdir import LOCK_FILE, RunLocked, check_out_dir, file_lock, run_lock

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "4", "--rollout.llm-max-tokens", "4"]


def _cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ragteam.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _holder(out: Path) -> subprocess.Popen:
    """Another process holding `out`'s lock until it is killed; returns once the lock is held."""
    code = (
        "import sys, time\nfrom ragteam.outdir import run_lock\n"
        "with run_lock(sys.argv[1], 'eval'):\n    print('held', flush=True)\n    time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_lock_names_its_pid_and_a_killed_holder_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "run"
    holder = _holder(out)
    try:
        with pytest.raises(RunLocked, match=rf"--out {out} is in use by pid {holder.pid}, ragteam eval"):
            with run_lock(out, "eval"):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    assert (out / LOCK_FILE).exists()  # kill -9: the file stays, the kernel dropped its lock
    with run_lock(out, "collect"):
        assert (out / LOCK_FILE).read_text().strip() == f"pid {os.getpid()}, ragteam collect"
        check_out_dir(out, "collect", overwrite=False)  # the lock file is no foreign content
    assert not (out / LOCK_FILE).exists()


def test_a_lock_on_a_new_folder_leaves_nothing_behind_and_a_file_is_left_to_the_check(tmp_path):
    with run_lock(tmp_path / "new", "eval"):
        pass
    assert not (tmp_path / "new").exists()
    (tmp_path / "a-file").write_text("x")
    with run_lock(tmp_path / "a-file", "eval"):  # check_out_dir refuses it by name
        pass
    with file_lock(tmp_path / "out.json", "ask"), pytest.raises(RunLocked, match="out.json is in use by pid"):
        with file_lock(tmp_path / "out.json", "ask"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.slow  # commands in processes of their own
def test_two_identical_evals_on_one_out_write_each_question_once(hotpot_small, tmp_path):
    out = tmp_path / "run"
    args = ["eval", "--workflow", "direct", "--data", str(hotpot_small), "--out", str(out), "--limit", "4"]
    cmd = [sys.executable, "-m", "ragteam.cli.main", *args, *TINY, "--no-progress"]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)
    ]
    done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(code for code, _ in done)
    refused = [err for code, err in done if code == 1]
    assert codes.count(0) >= 1 and all(c in (0, 1) for c in codes), done
    for err in refused:
        assert "is in use by pid" in err and "Traceback" not in err, err[-1000:]
    ids = [json.loads(x)["question"]["id"] for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 4


@pytest.mark.slow  # commands in processes of their own
def test_ask_out_refuses_a_foreign_file_and_replaces_its_own(tmp_path):
    theirs = tmp_path / "episodes.jsonl"
    theirs.write_text('{"id": "q1"}\n{"id": "q2"}\n')
    ask = ["ask", "Who wrote Hamlet?", "--workflow", "direct", *TINY]
    done = _cli(*ask, "--out", str(theirs))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not an episode `ragteam ask` wrote" in done.stderr and "--overwrite" in done.stderr
    assert theirs.read_text() == '{"id": "q1"}\n{"id": "q2"}\n'
    mine = tmp_path / "ask.json"
    for _ in range(2):  # the second run replaces the episode the first wrote
        again = _cli(*ask, "--out", str(mine))
        assert again.returncode == 0, again.stderr[-2000:]
        assert json.loads(mine.read_text())["question"]["question"] == "Who wrote Hamlet?"
    forced = _cli(*ask, "--out", str(theirs), "--overwrite")
    assert forced.returncode == 0 and json.loads(theirs.read_text())["workflow"] == "direct"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ask.json", "episodes.jsonl"]
    os.mkfifo(tmp_path / "fifo")
    started = time.monotonic()
    fifo = _cli(*ask, "--out", str(tmp_path / "fifo"), "--overwrite")
    assert fifo.returncode == 1 and "not a regular file" in fifo.stderr and time.monotonic() - started < 60
