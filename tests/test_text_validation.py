"""Text that no encoder can write (a lone UTF-16 surrogate, `"\\ud800"` in JSON; a byte that is not UTF-8 in a
shell argument) is refused where it enters: a question, corpus or SFT row is a bad record naming its file,
line and field (skipped and counted under `--skip-bad`), an argument is refused naming its position. Before,
the row passed the reader and `eval --skip-bad` died writing its episode, and again on every resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragteam.data.corpus import read_corpus
from ragteam.data.questions import read_questions
from ragteam.data.records import RecordError, unencodable_field
from ragteam.train.data import DataError, read_sft_rows

LONE = '"lone \\ud800 surrogate?"'  # as it sits in the file: valid JSON, no encodable text
TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "4", "--rollout.llm-max-tokens", "4", "--no-progress"]


def _cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ragteam.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="backslashreplace")


def _questions(path: Path) -> Path:
    rows = [
        '{"id": "q1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"]}',
        '{"id": "s1", "question": ' + LONE + ', "golden_answers": ["x"]}',
        '{"id": "q2", "question": "What is the capital of France?", "golden_answers": ["Paris"]}',
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_unencodable_field_names_the_nested_field():
    assert unencodable_field({"a": {"b": ["ok", "x\ud800"]}}) == (
        "field 'a.b[1]' is not Unicode text: a lone surrogate \\ud800 at character 2"
    )
    assert unencodable_field({"é": ["ünïcode"], "n": 1}) is None


def test_question_reader_refuses_or_skips_a_lone_surrogate(tmp_path):
    path = _questions(tmp_path / "q.jsonl")
    with pytest.raises(RecordError, match=r"q\.jsonl:2: field 'question' is not Unicode text"):
        read_questions(path)
    qset = read_questions(path, skip_bad=True)
    assert [q.id for q in qset.questions] == ["q1", "q2"] and qset.skipped == 1
    # a JSON array document: the same, with the record's line
    array = tmp_path / "q.json"
    array.write_text("[\n" + ",\n".join(path.read_text().splitlines()) + "\n]\n")
    with pytest.raises(RecordError, match=r"q\.json:3: field 'question'"):
        read_questions(array, fmt="flashrag")


def test_corpus_and_sft_readers_name_file_line_and_field(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        '{"id": "a", "title": "A", "text": "fine"}\n{"id": "b", "title": "B", "text": ' + LONE + "}\n"
    )
    with pytest.raises(RecordError, match=r"c\.jsonl:2: field 'text' is not Unicode text"):
        read_corpus(corpus)
    assert [d.id for d in read_corpus(corpus, skip_bad=True)] == ["a"]
    sft = tmp_path / "sft.jsonl"
    row = '{"role": "answer", "messages": [{"role": "user", "content": ' + LONE + '}], "target": "x"}'
    sft.write_text(row + "\n")
    with pytest.raises(DataError, match=r"sft\.jsonl:1: field 'messages\[0\]\.content'"):
        read_sft_rows(sft)
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe{}\n")
    with pytest.raises(RecordError, match=r"bin\.jsonl:1: not UTF-8"):
        read_sft_rows(binary)


@pytest.mark.slow  # commands in processes of their own
def test_eval_skip_bad_runs_past_a_lone_surrogate_and_resumes(tmp_path):
    data = _questions(tmp_path / "q.jsonl")
    out = tmp_path / "run"
    args = ["eval", "--workflow", "direct", "--data", str(data), "--out", str(out), *TINY]
    refused = _cli(*args)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{data}:2: field 'question' is not Unicode text" in refused.stderr
    done = _cli(*args, "--skip-bad")
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [json.loads(x)["question"]["id"] for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["q1", "q2"]
    again = _cli(*args, "--skip-bad")  # a resume: the bad row never reaches the writer
    assert again.returncode == 0, again.stderr[-2000:]
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2


def test_ask_refuses_an_argument_that_is_not_utf8_and_an_id_on_a_bad_row(tmp_path):
    bad_arg = "who is \udcff here?"  # what Python makes of the byte 0xff in argv
    done = subprocess.run(
        [sys.executable, "-m", "ragteam.cli.main", "ask", bad_arg, *TINY],
        capture_output=True, timeout=120, env=None,
    )  # fmt: skip
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and "Traceback" not in err
    assert "argument 2" in err and "not UTF-8 text (byte 0xff at character 8)" in err
    data = _questions(tmp_path / "q.jsonl")
    by_id = _cli("ask", "--data", str(data), "--id", "q1", "--workflow", "direct", *TINY[:-1])
    assert "Traceback" not in by_id.stderr
    assert by_id.returncode == 1 and f"{data}:2: field 'question'" in by_id.stderr
