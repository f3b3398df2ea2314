"""The CLI never loses or mixes what a user wrote, and input files fail clearly (issue 23, item 6), each command
run as a subprocess: a foreign `--out` refused, a FIFO or `/dev/zero` as `--config`, a truncated `.jsonl.gz`, a
5,000-digit number, a corpus row without an id and malformed DPR TSV rows, with file and line named and no
traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import hotpot_head

BIG = "9" * 5000  # more digits than Python converts to an int (4300)


# ---- item 6: the CLI never loses or mixes what a user wrote; input files fail clearly -------------------

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "8", "--rollout.llm-max-tokens", "8", "--no-progress"]


def _cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`ragteam ARGV...` as a user runs it: a subprocess (a hang is a timeout, not a stuck test run)."""
    cmd = [sys.executable, "-m", "ragteam.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode != 0, done.stdout[-500:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for needle in needles:
        assert needle in done.stderr, done.stderr[-2000:]
    return done.stderr


@pytest.fixture(scope="module")
def hotpot3(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("data3"), 3)


def _someones_folder(path: Path) -> Path:
    """What a person keeps: their own config.yaml (no ragteam command in it), metrics, a report."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("learning_rate: 3e-4\nnotes: my experiment\n")
    (path / "metrics.json").write_text('{"em": 0.61}\n')
    (path / "report.md").write_text("# my report\n")
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.mark.slow  # commands in processes of their own
def test_eval_refuses_someones_folder_unless_overwrite_and_resumes_its_own(hotpot3, tmp_path):
    theirs = _someones_folder(tmp_path / "theirs")
    before = _contents(theirs)
    args = ["eval", "--workflow", "direct", "--data", str(hotpot3), "--out", str(theirs), *TINY]
    err = _one_line_error(
        _cli(*args, "--limit", "1"), "config.yaml", "metrics.json", "report.md", "--overwrite"
    )
    assert _contents(theirs) == before  # nothing replaced
    done = _cli(*args, "--limit", "1", "--overwrite")
    assert done.returncode == 0, done.stderr[-2000:]
    assert yaml.safe_load((theirs / "config.yaml").read_text())["command"] == "eval"
    # its own folder: resumed, the finished question not run again
    resumed = _cli(*args, "--limit", "2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming: 1 of 2" in resumed.stdout + resumed.stderr
    assert len((theirs / "episodes.jsonl").read_text().splitlines()) == 2
    assert err.count("\n") <= 2


@pytest.mark.slow  # commands in processes of their own
def test_train_and_collect_refuse_an_eval_folder_and_train_resumes_its_own(hotpot3, tmp_path):
    eval_dir = tmp_path / "eval-run"
    eval_dir.mkdir()
    (eval_dir / "config.yaml").write_text(yaml.safe_dump({"command": "eval", "config": {}}))
    (eval_dir / "episodes.jsonl").write_text("")
    (eval_dir / "metrics.json").write_text("{}")
    before = _contents(eval_dir)
    rows = tmp_path / "sft.jsonl"
    row = {"role": "router", "messages": [{"role": "user", "content": "Q?"}], "target": "[Retrieval] q"}
    rows.write_text("".join(json.dumps({**row, "question_id": f"q{i}"}) + "\n" for i in range(4)))
    train = [
        "--data",
        str(rows),
        "--batch-size",
        "2",
        "--max-length",
        "64",
        "--no-progress",
    ]
    policy = ["--policy.model", "tiny"]
    for cmd, start in (
        (["train", "sft"], policy),
        (["train", "dpo"], policy),
        (["train", "prm"], ["--prm.model", "tiny"]),
    ):
        _one_line_error(
            _cli(*cmd, *train, *start, "--out", str(eval_dir)), "written by `ragteam eval`", "episodes.jsonl"
        )
    ppo = [
        "train",
        "ppo",
        "--recipe",
        "mmoa",
        "--data",
        str(hotpot3),
        "--policy.model",
        "tiny",
        "--out",
        str(eval_dir),
    ]
    _one_line_error(_cli(*ppo), "written by `ragteam eval`")
    teacher = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--no-progress"]
    collect = [
        "collect",
        "sft",
        "--workflow",
        "c3po",
        "--data",
        str(hotpot3),
        "--out",
        str(eval_dir),
        *teacher,
    ]
    _one_line_error(_cli(*collect), "written by `ragteam eval`")
    assert _contents(eval_dir) == before
    # its own run: trained, then resumed from its checkpoint; another trainer may not write into it
    out = tmp_path / "sft"
    first = _cli("train", "sft", *train, *policy, "--out", str(out), "--max-steps", "1", "--save-steps", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    again = _cli(
        "train",
        "sft",
        *train,
        *policy,
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--save-steps",
        "1",
        "--resume",
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines() if "loss" in x][
        -1
    ] == 2
    _one_line_error(
        _cli("train", "dpo", *train, *policy, "--out", str(out)), "written by `ragteam train sft`"
    )


def test_index_and_demo_refuse_a_foreign_folder(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": f"d{i}", "title": "T", "text": f"text {i}"}) + "\n" for i in range(3))
    )
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    index = ["index", "--corpus", str(corpus), "--out", str(folder), "--kinds", "bm25", "--no-progress"]
    _one_line_error(_cli(*index), "notes.txt", "--overwrite")
    assert not (folder / "docs.jsonl").exists()
    done = _cli(*index, "--overwrite")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (folder / "notes.txt").read_text() == "keep me" and (folder / "manifest.json").is_file()
    again = _cli(*index)  # its own index folder: extended or left as it is, no --overwrite needed
    assert again.returncode == 0, again.stderr[-2000:]
    demo_out = _someones_folder(tmp_path / "demo")
    demo = ["demo", "--out", str(demo_out), "--policy.model", "tiny", "--fast", "--no-progress"]
    _one_line_error(_cli(*demo), "config.yaml", "metrics.json", "--overwrite")


def test_config_that_is_a_fifo_or_dev_zero_is_refused_at_once(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        done = _cli("index", "--config", path, "--out", str(tmp_path / "x"), timeout=120)
        assert done.returncode == 2
        _one_line_error(done, path, "not a regular file")


def test_truncated_gz_question_file_is_one_line_naming_the_file(hotpot3, tmp_path):
    whole = gzip.compress(hotpot3.read_bytes() * 20)
    cut = tmp_path / "questions.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    done = _cli(
        "index", "--data", str(cut), "--out", str(tmp_path / "idx"), "--kinds", "bm25", "--no-progress"
    )
    err = _one_line_error(done, str(cut), "truncated or damaged")
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_skip_bad_skips_a_record_with_a_5000_digit_number(hotpot3, tmp_path):
    lines = hotpot3.read_text().splitlines()
    bad = json.loads(lines[1])
    bad_line = json.dumps(bad)[:-1] + f', "level": {BIG}}}'
    data = tmp_path / "q.jsonl"
    data.write_text("\n".join([lines[0], bad_line, lines[2]]) + "\n")
    index = ["index", "--data", str(data), "--kinds", "bm25", "--no-progress"]
    _one_line_error(_cli(*index, "--out", str(tmp_path / "a")), f"{data}:2:", "5000 digits")
    done = _cli(*index, "--out", str(tmp_path / "b"), "--skip-bad")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "skipped 1 malformed records" in done.stderr and f"{data}:2:" in done.stderr


def _doc_ids(index_dir: Path) -> list[str]:
    return [json.loads(x)["id"] for x in (index_dir / "docs.jsonl").read_text().splitlines()]


def test_corpus_row_without_an_id_is_refused_or_skipped_and_counted(tmp_path):
    corpus = tmp_path / "c.jsonl"
    rows = [{"id": "a", "title": "A", "text": "first"}, {"title": "B", "text": "lost its id"}]
    rows += [{"id": "c", "title": "C", "text": "third"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    index = ["index", "--corpus", str(corpus), "--kinds", "bm25", "--no-progress"]
    _one_line_error(_cli(*index, "--out", str(tmp_path / "a")), f"{corpus}:2:", "field 'id' is missing")
    done = _cli(*index, "--out", str(tmp_path / "b"), "--skip-bad")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "skipped 1 malformed records" in done.stderr and _doc_ids(tmp_path / "b") == ["a", "c"]
    # a file whose passages carry no ids at all still reads: each gets the id made from title and text
    plain = tmp_path / "plain.jsonl"
    plain.write_text(
        json.dumps({"title": "A", "text": "x"}) + "\n" + json.dumps({"title": "B", "text": "y"}) + "\n"
    )
    assert (
        _cli("index", "--corpus", str(plain), "--out", str(tmp_path / "p"), "--kinds", "bm25").returncode == 0
    )


def test_malformed_dpr_tsv_rows_are_refused_or_skipped_with_their_lines(tmp_path):
    tsv = tmp_path / "psgs_w100.tsv"
    tsv.write_text(
        "id\ttext\ttitle\n"
        '1\t"Aaron is a prophet."\tAaron\n'
        "2\ta row that lost its title column\n"
        '3\t"an unclosed quote swallows the rows after it\tThird\n'
        "4\tfourth passage\tFourth\n"
    )
    index = ["index", "--corpus", str(tsv), "--kinds", "bm25", "--no-progress"]
    _one_line_error(_cli(*index, "--out", str(tmp_path / "a")), f"{tsv}:3:", "2 columns but the header has 3")
    done = _cli(*index, "--out", str(tmp_path / "b"), "--skip-bad")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "skipped 2 malformed records" in done.stderr
    assert f"{tsv}:4: a quoted field runs from line 4 to line 5" in done.stderr
    assert _doc_ids(tmp_path / "b") == ["1"]
