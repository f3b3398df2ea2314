"""Passage corpora: FlashRAG and {id, title, text} JSONL, DPR TSV, pooling, and errors naming file and line."""

from __future__ import annotations

import gzip
import json

import pytest

from ragteam.data import pool_corpus, read_corpus, read_questions, write_corpus
from ragteam.data.formats.flashrag import split_contents
from ragteam.types import Doc, Question, doc_id


def test_flashrag_wiki_sample(shared_data):
    path = shared_data / "wiki18-sample-1000.jsonl"
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    docs = read_corpus(path)
    assert len(docs) == len(raw) == 1000
    assert [d.id for d in docs] == [r["id"] for r in raw]
    assert docs[0].title == "Evan Morris"  # the quotes around the title are removed
    assert docs[0].text == raw[0]["contents"].split("\n", 1)[1]
    assert all(d.title and d.text and not d.title.startswith('"') for d in docs)


def test_split_contents():
    assert split_contents('"Aaron"\nAaron is a prophet.') == ("Aaron", "Aaron is a prophet.")
    assert split_contents('"""Weird Al"" Yankovic"\nAn artist.') == ('"Weird Al" Yankovic', "An artist.")
    assert split_contents("Tappet\nA tappet is a projection.") == ("Tappet", "A tappet is a projection.")
    assert split_contents("no title here") == ("", "no title here")


def test_write_read_roundtrip_both_layouts(tmp_path):
    docs = [
        Doc("1", 'The "Boss"', "Bruce Springsteen."),
        Doc("2", "", "Untitled text."),
        Doc("x", "Ünïcode", "Çà."),
    ]
    for contents in (False, True):
        path = tmp_path / f"c{contents}.jsonl"
        assert write_corpus(path, docs, contents=contents) == 3
        first = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        assert set(first) == ({"id", "contents"} if contents else {"id", "title", "text"})
        assert read_corpus(path) == docs
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress((tmp_path / "cFalse.jsonl").read_bytes()))
    assert read_corpus(gz) == docs


def test_dpr_tsv_and_missing_ids(tmp_path):
    path = tmp_path / "psgs_w100.tsv"
    path.write_text(
        'id\ttext\ttitle\n1\t"Aaron ( or ; ""Ahärôn"") is a prophet."\tAaron\n2\tSecond passage.\tB\n'
    )
    docs = read_corpus(path)
    assert docs == [
        Doc("1", "Aaron", 'Aaron ( or ; "Ahärôn") is a prophet.'),
        Doc("2", "B", "Second passage."),
    ]
    path = tmp_path / "noid.jsonl"
    path.write_text('{"title": "T", "text": "body"}\n')
    assert read_corpus(path) == [Doc(doc_id("T", "body"), "T", "body")]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"id": "b", "title": "T"}', "field 'text' is missing"),
        ('{"id": "b", "text": 5}', "field 'text' must be a string, got int"),
        ('{"id": "b", "contents": "\\"Only a title\\"\\n"}', "field 'contents' holds a title but no text"),
        ('{"id": ["b"], "text": "x"}', "field 'id' must be a non-empty string"),
        ('{"id": "a", "text": "again"}', "field 'id' repeats 'a' (first at line 1)"),
        ("{broken", "not valid JSON"),
    ],
)
def test_errors_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "a", "title": "T", "text": "ok"}\n\n' + line + "\n")
    with pytest.raises(ValueError) as err:
        read_corpus(path)
    assert str(err.value).startswith(f"{path}:3: ") and message in str(err.value)


def test_pool_corpus_dedups_by_title_and_text(shared_data):
    qs = read_questions(shared_data / "popqa-1000.json").questions
    pooled = pool_corpus(qs)
    distinct = {(d.title.strip(), d.text.strip()) for q in qs for d in q.context}
    assert len(pooled) == len(distinct) < sum(len(q.context) for q in qs)
    assert len({d.id for d in pooled}) == len(pooled)
    assert all(d.id == doc_id(d.title, d.text) for d in pooled)
    supporting = {s for q in qs for s in q.supporting_ids}
    assert supporting <= {d.id for d in pooled}  # every question's support competes in one corpus
    # first-seen order, and a paragraph repeated with other whitespace is one passage
    a = Question("1", "q", ["a"], context=[Doc(doc_id("T", "x"), "T", "x"), Doc("p", "U", "y")])
    b = Question("2", "q", ["a"], context=[Doc("other-id", " T ", "x "), Doc("z", "V", "w")])
    assert [(d.title, d.text) for d in pool_corpus([a, b])] == [("T", "x"), ("U", "y"), ("V", "w")]
    assert [d.id for d in pool_corpus([a, b])] == [doc_id("T", "x"), doc_id("U", "y"), doc_id("V", "w")]
