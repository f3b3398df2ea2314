"""Benchmark readers on the real sample files in ../shared/data, plus bad-record errors and --skip-bad."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from ragteam.data import FORMATS, QuestionSet, pool_corpus, read_questions, write_questions
from ragteam.data.questions import detect_format
from ragteam.types import doc_id

SAMPLES = {
    "hotpotqa-dev-500.jsonl": "hotpotqa",
    "nq-open-dev.jsonl": "nq-open",
    "triviaqa-test-1000.jsonl": "triviaqa",
    "popqa-1000.json": "popqa",
    "ambignq-dev-light.json": "ambignq",
    "formats/2wikimultihopqa-sample.jsonl": "2wikimultihopqa",
    "formats/bamboogle-sample.tsv": "bamboogle",
    "formats/freshqa-sample.jsonl": "freshqa",
    "formats/hotpotqa-hf-schema-sample.jsonl": "hotpotqa-hf",
    "formats/medqa-sample.jsonl": "medqa",
    "formats/multihop-rag-sample.jsonl": "multihop-rag",
    "formats/musique-sample.jsonl": "musique",
}


def raw_records(path: Path) -> list[dict]:
    """The file's records read independently of ragteam (to compare counts and fields)."""
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    if path.suffix == ".tsv":
        rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))
        return [dict(zip(rows[0], r)) for r in rows[1:] if any(r)]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sets(shared_data) -> dict[str, QuestionSet]:
    return {name: read_questions(shared_data / name) for name in SAMPLES}


def test_every_sample_is_detected_and_fully_read(shared_data, sets):
    assert set(SAMPLES.values()) <= set(FORMATS)
    for name, fmt in SAMPLES.items():
        qset = sets[name]
        assert qset.format == fmt, name
        assert detect_format(shared_data / name) == fmt
        assert len(qset.questions) == len(raw_records(shared_data / name)), name
        assert qset.skipped == 0
        assert len({q.id for q in qset.questions}) == len(qset.questions), f"{name}: ids must be unique"
        for q in qset.questions:
            assert q.question.strip() and q.golden_answers and all(a.strip() for a in q.golden_answers)
            assert all(d.id == doc_id(d.title, d.text) for d in q.context)
            assert set(q.supporting_ids) <= {d.id for d in q.context}


def test_named_format_and_aliases(shared_data):
    path = shared_data / "formats/musique-sample.jsonl"
    assert read_questions(path, fmt="MuSiQue-Ans").format == "musique"
    with pytest.raises(ValueError, match="unknown format 'nope'.*hotpotqa"):
        read_questions(path, fmt="nope")
    # named wrongly: the first record does not fit, and the error names the field
    with pytest.raises(
        ValueError, match=r"musique-sample.jsonl:1: field 'question_id' is missing \(hotpotqa record\)"
    ):
        read_questions(path, fmt="hotpotqa")


def test_hotpotqa_ircot(sets, shared_data):
    qs = sets["hotpotqa-dev-500.jsonl"].questions
    raw = raw_records(shared_data / "hotpotqa-dev-500.jsonl")
    assert [q.id for q in qs] == [r["question_id"] for r in raw]
    assert qs[0].golden_answers == raw[0]["answers_objects"][0]["spans"]
    for q, r in zip(qs, raw):
        assert len(q.context) == len(r["contexts"]) and len(q.supporting_ids) == 2
    first = raw[0]["contexts"]
    assert {d.title for d in qs[0].context if d.id in qs[0].supporting_ids} == {
        c["title"] for c in first if c["is_supporting"]
    }
    # the reference corpus: 4,858 distinct paragraphs pooled from the 500 records
    assert len(pool_corpus(qs)) == 4858


def test_hotpotqa_hf_schema_joins_sentences(sets, shared_data):
    q = sets["formats/hotpotqa-hf-schema-sample.jsonl"].questions[0]
    raw = raw_records(shared_data / "formats/hotpotqa-hf-schema-sample.jsonl")[0]
    assert q.id == raw["id"] and q.golden_answers == [raw["answer"]]
    assert q.metadata["type"] == "comparison" and q.metadata["level"] == "hard"
    assert [d.title for d in q.context] == raw["context"]["title"]
    # HotpotQA's sentences carry their own leading spaces
    assert q.context[0].text == "".join(raw["context"]["sentences"][0]).strip()
    assert {d.title for d in q.context if d.id in q.supporting_ids} == set(raw["supporting_facts"]["title"])


def test_hotpotqa_original_list_layout(tmp_path, shared_data):
    raw = raw_records(shared_data / "formats/hotpotqa-hf-schema-sample.jsonl")[0]
    orig = {
        "_id": raw["id"],
        "question": raw["question"],
        "answer": raw["answer"],
        "type": raw["type"],
        "level": raw["level"],
        "supporting_facts": [
            list(p) for p in zip(raw["supporting_facts"]["title"], raw["supporting_facts"]["sent_id"])
        ],
        "context": [list(p) for p in zip(raw["context"]["title"], raw["context"]["sentences"])],
    }
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps([orig], indent=1))
    a = read_questions(path).questions[0]
    b = read_questions(shared_data / "formats/hotpotqa-hf-schema-sample.jsonl").questions[0]
    assert a.to_dict() == b.to_dict()


def test_2wiki_chunks(sets, shared_data):
    qs = sets["formats/2wikimultihopqa-sample.jsonl"].questions
    raw = raw_records(shared_data / "formats/2wikimultihopqa-sample.jsonl")
    q = qs[0]
    assert q.golden_answers == ["Małgorzata Braunek"] and q.metadata["hops"] == 2
    assert q.metadata["evidences"][0] == ["Polish-Russian War", "director", "Xawery Żuławski"]
    assert len(q.context) == len(raw[0]["chunks"])
    # "Title: ...\n0. ..." numbering is stripped and sentences are joined with a space
    film = next(d for d in q.context if d.title == "Polish-Russian War (film)")
    assert film.text.startswith("Polish-Russian War (Wojna polsko-ruska) is a 2009 Polish film")
    assert not any(d.text.startswith(("Title:", "0.")) for d in q.context)
    for q, r in zip(qs, raw):
        assert {d.title for d in q.context if d.id in q.supporting_ids} == {
            f["title"] for f in r["supporting_facts"]
        }


def test_2wiki_original_layout(tmp_path):
    rec = {
        "_id": "x1",
        "type": "compositional",
        "question": "Who is the mother of the director of Z?",
        "answer": "M",
        "context": [["Z", ["Z is a film.", "It was directed by D."]], ["Other", ["Unrelated."]]],
        "supporting_facts": [["Z", 1]],
        "evidences": [["Z", "director", "D"]],
    }
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([rec]))
    qset = read_questions(path)
    q = qset.questions[0]
    assert qset.format == "2wikimultihopqa"
    assert q.context[0].text == "Z is a film. It was directed by D."
    assert q.supporting_ids == [q.context[0].id] and q.metadata["evidences"] == [["Z", "director", "D"]]


def test_musique(sets, shared_data):
    qs = sets["formats/musique-sample.jsonl"].questions
    raw = raw_records(shared_data / "formats/musique-sample.jsonl")
    for q, r in zip(qs, raw):
        assert len(q.context) == 20
        assert q.golden_answers == [r["answer"], *r["answer_aliases"]]
        assert {d.title for d in q.context if d.id in q.supporting_ids} == {
            p["title"] for p in r["paragraphs"] if p["is_supporting"]
        }
        assert q.metadata["hops"] == len(r["question_decomposition"]) and q.metadata["answerable"] is True
    assert "Orioles" in qs[2].golden_answers


def test_multihop_rag_both_shapes(sets, tmp_path):
    q = sets["formats/multihop-rag-sample.jsonl"].questions[0]
    assert q.golden_answers == ["Sam Bankman-Fried"] and len(q.supporting_ids) == len(q.context) == 3
    published = {
        "query": "Which company did both outlets cover?",
        "answer": "OpenAI",
        "question_type": "inference_query",
        "evidence_list": [
            {"title": "T1", "fact": "OpenAI said x.", "source": "Fortune", "url": "u1"},
            {"title": "T2", "fact": "OpenAI said y.", "source": "TechCrunch", "url": "u2"},
        ],
    }
    path = tmp_path / "MultiHopRAG.json"
    path.write_text(json.dumps([published]))
    qset = read_questions(path)
    q = qset.questions[0]
    assert (
        qset.format == "multihop-rag" and q.id == "multihop-rag-0" and q.metadata["type"] == "inference_query"
    )
    assert [d.text for d in q.context] == ["OpenAI said x.", "OpenAI said y."] and len(q.supporting_ids) == 2


def test_nq_open_and_triviaqa(sets, shared_data):
    nq = sets["nq-open-dev.jsonl"].questions
    raw = raw_records(shared_data / "nq-open-dev.jsonl")
    assert nq[0].id == "nq-open-0" and nq[0].golden_answers == raw[0]["answer"]
    tq = sets["triviaqa-test-1000.jsonl"].questions
    raw = raw_records(shared_data / "triviaqa-test-1000.jsonl")[0]
    assert tq[0].id == raw["id"] and tq[0].metadata["question_id"] == raw["question_id"]
    assert "Yuri Gagarin" in tq[0].golden_answers and len(tq[0].golden_answers) == len(set(raw["answers"]))


def test_triviaqa_hf_and_official_layouts(tmp_path):
    hf = {
        "question": "Q?",
        "question_id": "tc_1",
        "answer": {"value": "Paris", "aliases": ["Paris", "Paree"]},
    }
    (tmp_path / "hf.jsonl").write_text(json.dumps(hf) + "\n")
    q = read_questions(tmp_path / "hf.jsonl").questions[0]
    assert (q.id, q.golden_answers) == ("tc_1", ["Paris", "Paree"])
    official = {
        "Version": 1.0,
        "Data": [{"Question": "Q2?", "QuestionId": "tc_2", "Answer": {"Value": "Rome", "Aliases": ["Roma"]}}],
    }
    (tmp_path / "official.json").write_text(json.dumps(official, indent=2))
    qset = read_questions(tmp_path / "official.json")
    assert qset.format == "triviaqa" and qset.questions[0].golden_answers == ["Rome", "Roma"]


def test_popqa(sets, shared_data, tmp_path):
    qs = sets["popqa-1000.json"].questions
    raw = raw_records(shared_data / "popqa-1000.json")
    assert qs[0].golden_answers == json.loads(raw[0]["possible_answers"])  # a JSON-encoded string in the file
    assert qs[0].metadata["s_pop"] == raw[0]["s_pop"] and qs[0].metadata["prop"] == raw[0]["prop"]
    assert all(len(q.context) == 2 and len(q.supporting_ids) == 2 for q in qs)
    # the published TSV (no paragraphs, numbers as text)
    cols = ["id", "subj", "prop", "obj", "s_pop", "question", "possible_answers"]
    r = raw[0]
    (tmp_path / "popQA.tsv").write_text(
        "\t".join(cols) + "\n" + "\t".join(str(r[c]) for c in cols) + "\n", encoding="utf-8"
    )
    qset = read_questions(tmp_path / "popQA.tsv")
    assert qset.format == "popqa" and qset.questions[0].golden_answers == qs[0].golden_answers
    assert qset.questions[0].metadata["s_pop"] == r["s_pop"] and qset.questions[0].context == []


def test_ambignq_aliases_from_all_annotations(sets, shared_data):
    qs = {q.id: q for q in sets["ambignq-dev-light.json"].questions}
    raw = raw_records(shared_data / "ambignq-dev-light.json")
    multi = next(r for r in raw if any(a["type"] == "multipleQAs" for a in r["annotations"]))
    q = qs[multi["id"]]
    expected = []
    for a in multi["annotations"]:
        answers = (
            a["answer"] if a["type"] == "singleAnswer" else [x for p in a["qaPairs"] for x in p["answer"]]
        )
        expected += [x for x in answers if x not in expected]
    assert q.golden_answers == expected and q.metadata["ambiguous"] is True
    assert len(q.metadata["qa_pairs"]) == sum(len(a.get("qaPairs", [])) for a in multi["annotations"])
    single = qs[raw[0]["id"]]
    assert (
        single.golden_answers == raw[0]["annotations"][0]["answer"] and single.metadata["ambiguous"] is False
    )


def test_bamboogle_tsv_and_json(sets, tmp_path):
    qs = sets["formats/bamboogle-sample.tsv"].questions
    assert [q.golden_answers for q in qs] == [["james madison"], ["Titan IIIE"], ["1999"]]
    assert qs[0].id == "bamboogle-0" and qs[0].question.startswith("Who was president")
    (tmp_path / "bamboogle.json").write_text(
        json.dumps([{"Question": "Q?", "Answer": "A1", "Answer 2": "A2"}])
    )
    qset = read_questions(tmp_path / "bamboogle.json")
    assert qset.format == "bamboogle" and qset.questions[0].golden_answers == ["A1", "A2"]


def test_freshqa_jsonl_and_csv(sets, shared_data, tmp_path):
    q = sets["formats/freshqa-sample.jsonl"].questions[0]
    assert q.golden_answers == [
        "No animal has ever landed on the moon yet.",
        "Since humans are animals, one could say Neil Armstrong.",
    ]
    assert q.metadata["false_premise"] is True and q.metadata["fact_type"] == "slow-changing"
    raw = raw_records(shared_data / "formats/freshqa-sample.jsonl")
    path = tmp_path / "FreshQA.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["FreshQA, as of this week", ""])  # note rows above the header, as in the release
        w.writerow([])
        w.writerow(list(raw[0]))
        for r in raw:
            w.writerow(
                [
                    "" if v is None else ("TRUE" if v is True else "FALSE" if v is False else v)
                    for v in r.values()
                ]
            )
    qset = read_questions(path)
    assert qset.format == "freshqa" and [x.golden_answers for x in qset.questions] == [
        x.golden_answers for x in sets["formats/freshqa-sample.jsonl"].questions
    ]
    assert (
        qset.questions[0].metadata["false_premise"] is True and "\n" in qset.questions[0].metadata["source"]
    )


def test_medqa_choices(sets, shared_data):
    qs = sets["formats/medqa-sample.jsonl"].questions
    raw = raw_records(shared_data / "formats/medqa-sample.jsonl")
    for q, r in zip(qs, raw):
        assert q.golden_answers == [r["answer_idx"]] and q.choices == r["options"]
        assert q.metadata["answer_text"] == r["answer"] == r["options"][r["answer_idx"]]
        assert q.metadata["meta_info"] == r["meta_info"]


def test_flashrag_roundtrip_for_every_sample(sets, tmp_path):
    for name, qset in sets.items():
        path = tmp_path / (Path(name).stem + ".flashrag.jsonl")
        assert write_questions(path, qset.questions) == len(qset.questions)
        back = read_questions(path)
        assert back.format == "flashrag"
        assert [q.to_dict() for q in back.questions] == [q.to_dict() for q in qset.questions], name


def test_flashrag_metadata_paragraphs_and_choice_index(tmp_path):
    rec = {
        "id": "h1",
        "question": "Who?",
        "golden_answers": ["X"],
        "metadata": {
            "type": "bridge",
            "supporting_facts": {"title": ["P1"], "sent_id": [0]},
            "context": {"title": ["P1", "P2"], "sentences": [["One.", " Two."], ["Three."]]},
        },
    }
    mmlu = {"id": "m1", "question": "2+2?", "golden_answers": [1], "choices": ["3", "4", "5", "6"]}
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(mmlu) + "\n")
    h, m = read_questions(path).questions
    assert [d.text for d in h.context] == ["One. Two.", "Three."] and h.supporting_ids == [h.context[0].id]
    assert "context" not in h.metadata and h.metadata["type"] == "bridge"
    assert m.golden_answers == ["B"] and m.choices == {"A": "3", "B": "4", "C": "5", "D": "6"}


def _corrupt(src: Path, dst: Path, line_no: int, drop: str) -> None:
    """Copy the first 3 JSONL records of `src` to `dst`, removing field `drop` from record `line_no`."""
    lines = src.read_text(encoding="utf-8").splitlines()[:3]
    rec = json.loads(lines[line_no - 1])
    del rec[drop]
    lines[line_no - 1] = json.dumps(rec)
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "name, field",
    [
        ("hotpotqa-dev-500.jsonl", "question_text"),
        ("formats/musique-sample.jsonl", "paragraphs"),
        ("formats/medqa-sample.jsonl", "options"),
        ("formats/2wikimultihopqa-sample.jsonl", "answer"),
        ("nq-open-dev.jsonl", "answer"),
    ],
)
def test_bad_record_names_file_line_and_field(shared_data, tmp_path, name, field):
    bad = tmp_path / Path(name).name
    fmt = SAMPLES[name]
    _corrupt(shared_data / name, bad, 2, field)
    with pytest.raises(ValueError) as err:
        read_questions(bad, fmt=fmt)
    assert str(err.value).startswith(f"{bad}:2: field '{field}'"), str(err.value)
    qset = read_questions(bad, fmt=fmt, skip_bad=True)
    assert (len(qset.questions), qset.skipped) == (2, 1) and f"{bad}:2:" in qset.errors[0]


def test_ill_typed_fields_and_bad_json(tmp_path):
    path = tmp_path / "nq.jsonl"
    path.write_text(
        '{"question": "q0", "answer": ["a"]}\n'
        '{"question": 7, "answer": ["a"]}\n'
        "\n"
        "{not json\n"
        '{"question": "q4", "answer": [["nested"]]}\n'
        '{"question": "q5", "answer": []}\n'
        '{"question": "q6", "answer": ["ok"]}\n'
    )
    with pytest.raises(ValueError, match=r"nq.jsonl:2: field 'question' must be a string, got int"):
        read_questions(path)
    qset = read_questions(path, skip_bad=True)
    assert [q.question for q in qset.questions] == ["q0", "q6"] and qset.skipped == 4
    assert any(":4: not valid JSON" in e for e in qset.errors)
    assert any(":5: field 'answer[0]' must be a string" in e for e in qset.errors)
    assert any(":6: field 'answer' holds no non-empty answer" in e for e in qset.errors)


def test_json_array_errors_report_the_record_line(tmp_path, shared_data):
    raw = raw_records(shared_data / "popqa-1000.json")[:3]
    del raw[2]["possible_answers"]
    path = tmp_path / "popqa.json"
    text = json.dumps(raw, indent=4)
    path.write_text(text)
    third = text.splitlines().index("    {", text.splitlines().index("    {", 2) + 1) + 1  # line of record 3
    with pytest.raises(ValueError, match=rf"popqa.json:{third}: field 'possible_answers' is missing"):
        read_questions(path, fmt="popqa")
    raw[1]["possible_answers"] = "[not json"
    path.write_text(json.dumps(raw, indent=4))
    qset = read_questions(path, fmt="popqa", skip_bad=True)
    assert qset.skipped == 2 and len(qset.questions) == 1
    assert "field 'possible_answers' is not a JSON-encoded list" in qset.errors[0]


def test_duplicate_ids_and_undetectable_files(tmp_path):
    path = tmp_path / "dup.jsonl"
    rec = {"id": "same", "question": "q", "answer": ["a"]}
    path.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(ValueError, match=r"dup.jsonl:2: field 'id' repeats 'same' \(first at line 1\)"):
        read_questions(path)
    assert read_questions(path, skip_bad=True).skipped == 1
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"prompt": "x", "completion": "y"}\n')
    with pytest.raises(ValueError, match=r"odd.jsonl:1: cannot tell the format .*--format"):
        read_questions(odd)
    with pytest.raises(FileNotFoundError):
        read_questions(tmp_path / "missing.jsonl")


def test_container_variants(tmp_path):
    rec = {"question": "q?", "answer": ["a"]}
    # JSON Lines in a .json file, with a byte-order mark
    (tmp_path / "lines.json").write_text(
        "\ufeff" + json.dumps(rec) + "\n" + json.dumps(rec | {"id": "x"}) + "\n"
    )
    assert [q.id for q in read_questions(tmp_path / "lines.json").questions] == ["nq-open-0", "x"]
    # a minified wrapper object on one line, and a gzipped JSONL file
    (tmp_path / "wrapped.json").write_text(json.dumps({"version": 1, "data": [rec, rec | {"id": "y"}]}))
    assert len(read_questions(tmp_path / "wrapped.json").questions) == 2
    (tmp_path / "dev.jsonl.gz").write_bytes(gzip.compress((json.dumps(rec) + "\n").encode()))
    assert read_questions(tmp_path / "dev.jsonl.gz").questions[0].golden_answers == ["a"]
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no records"):
        read_questions(tmp_path / "empty.jsonl")


GOOD = {"question": "q?", "answer": ["a"]}
DEEP = '{"question": "q?", "answer": ["a"], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def _hostile(tmp_path: Path, kind: str) -> tuple[Path, int, str]:
    """A file holding one hostile record between good ones: (path, its line, what the error says)."""
    good = json.dumps(GOOD)
    if kind == "deep-jsonl":
        path, body, line, needle = (
            tmp_path / "deep.jsonl",
            f"{good}\n{DEEP}\n{good}\n",
            2,
            "nested too deeply",
        )
    elif kind == "deep-array":
        path, body = tmp_path / "deep.json", f"[\n{good},\n{DEEP},\n{good}\n]\n"
        line, needle = 3, "nested too deeply"
    elif kind == "latin1":
        path = tmp_path / "latin1.jsonl"
        path.write_bytes(f"{good}\n".encode() + '{"question": "café?", "answer": ["a"]}\n'.encode("latin-1"))
        return path, 2, "not UTF-8 text (byte 0xe9"
    elif kind == "trailing":
        path, body = tmp_path / "trail.json", f"[\n{good},\n{good}\n]\n\n]garbage\n"
        line, needle = 6, "unexpected text after the JSON document: ']garbage"
    else:  # a 50 MB question
        path, line, needle = tmp_path / "huge.jsonl", 2, "a record of 50000"
        body = (
            good + "\n" + json.dumps({"question": "why " * 12_500_000, "answer": ["a"]}) + "\n" + good + "\n"
        )
    path.write_text(body, encoding="utf-8")
    return path, line, needle


@pytest.mark.parametrize("kind", ["deep-jsonl", "deep-array", "latin1", "trailing", "huge"])
def test_hostile_data_files_name_file_and_line_or_are_skipped(tmp_path, kind):
    path, line, needle = _hostile(tmp_path, kind)
    with pytest.raises(ValueError) as err:
        read_questions(path, fmt="nq-open")
    assert str(err.value).startswith(f"{path}:{line}: ") and needle in str(err.value), str(err.value)
    qset = read_questions(path, fmt="nq-open", skip_bad=True)
    assert qset.skipped == 1 and qset.errors[0].startswith(f"{path}:{line}: ")
    assert len(qset.questions) >= 1 and all(len(q.question) < 100 for q in qset.questions)
    # format detection on a file whose only record is hostile names that record, not "no records"
    if kind in ("deep-jsonl", "huge"):
        only = tmp_path / f"only-{path.name}"
        only.write_text(path.read_text(encoding="utf-8").splitlines()[1] + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"{only.name}:1: .*{needle[:12]}"):
            read_questions(only)


def test_a_folder_given_as_data_file_and_index_skip_bad(tmp_path, capsys):
    from ragteam.cli.main import main
    from ragteam.data import read_corpus

    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_questions(folder)
    assert main(["index", "--data", str(folder), "--out", str(tmp_path / "idx")]) == 1
    err = capsys.readouterr().err
    assert f"{folder}: is a folder" in err and "Traceback" not in err
    # a corpus with a non-UTF-8 line and a deeply nested one: stops, or skipped and counted with --skip-bad
    corpus = tmp_path / "corpus.jsonl"
    rows = [json.dumps({"id": str(i), "title": f"T{i}", "text": f"passage number {i}"}) for i in range(3)]
    corpus.write_bytes(
        "\n".join([rows[0], DEEP, rows[1]]).encode()
        + b'\n{"id": "x", "text": "caf\xe9"}\n'
        + rows[2].encode()
    )
    with pytest.raises(ValueError, match=r"corpus.jsonl:2: .*nested too deeply"):
        read_corpus(corpus)
    errors: list[str] = []
    assert [d.id for d in read_corpus(corpus, skip_bad=True, errors=errors)] == ["0", "1", "2"]
    assert [e.split(": ")[0] for e in errors] == [f"{corpus}:2", f"{corpus}:4"]
    out = tmp_path / "idx"
    argv = ["index", "--corpus", str(corpus), "--out", str(out), "--kinds", "bm25", "--no-progress"]
    assert main(argv) == 1 and "corpus.jsonl:2:" in capsys.readouterr().err
    assert main([*argv, "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert "skipped 2 malformed records" in captured.err and "3 passages" in captured.out
    # an output path that is a file: one line, no traceback
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    bad_out = [
        "index",
        "--corpus",
        str(corpus),
        "--out",
        str(blocker / "idx"),
        "--kinds",
        "bm25",
        "--skip-bad",
    ]
    assert main(bad_out) == 1
    err = capsys.readouterr().err
    assert "a file is in the way" in err and "Traceback" not in err
