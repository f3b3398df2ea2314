"""One corpus option on every command that retrieves (issue 29 item 7), indexes that cost what the run needs
and one per-user cache (issue 31 item 6): real HotpotQA records, real BM25 indexes, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import hotpot_head

from ragteam.assemble.config import TeamConfig
from ragteam.assemble.corpus import CorpusSpec, choose_corpus, open_corpus, parse_corpus
from ragteam.cli.main import main
from ragteam.config import default_home, ragteam_home
from ragteam.data import read_questions, write_corpus
from ragteam.data.corpus import pool_corpus
from ragteam.retrieval.factory import build_estimate, questions_index
from ragteam.retrieval.index import build_index
from ragteam.types import Doc

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--no-progress", "--retriever.kind", "bm25"]
TINY += ["--rollout.llm-max-tokens", "4", "--topk", "3"]


@pytest.fixture(scope="module")
def hotpot12(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("corpus-choice"), 12)


def own_paragraphs(path: Path, offset: int, limit: int) -> int:
    return len(pool_corpus(read_questions(path).questions[offset : offset + limit]))


# ---------------------------------------------------------------------------------------------- the option


def test_the_corpus_option_reads_one_grammar():
    assert parse_corpus(None) == parse_corpus("distractor") == CorpusSpec("distractor")
    assert parse_corpus("pooled") == CorpusSpec("pooled")
    assert parse_corpus("pooled+a.jsonl+b.jsonl") == CorpusSpec("pooled", ("a.jsonl", "b.jsonl"))
    assert parse_corpus("pooled:../data") == CorpusSpec("folder", ("../data",))
    assert parse_corpus("indexes/wiki") == CorpusSpec("path", ("indexes/wiki",))
    with pytest.raises(ValueError, match="empty file name after"):
        parse_corpus("pooled+")


def test_distractor_indexes_only_the_runs_own_paragraphs(hotpot12, tmp_path):
    """`eval --limit 3`: the index holds those 3 questions' ~30 paragraphs, not the file's ~120, every gold
    paragraph among them (the distractor setting)."""
    out = tmp_path / "run"
    args = ["eval", "--workflow", "standard-rag", "--data", str(hotpot12), "--out", str(out), *TINY]
    assert main([*args, "--offset", "2", "--limit", "3"]) == 0
    c = json.loads((out / "metrics.json").read_text())["corpus"]
    assert c["kind"] == "distractor" and "3 questions" in c["name"]
    assert c["passages"] == own_paragraphs(hotpot12, 2, 3) < own_paragraphs(hotpot12, 0, 12)
    assert c["gold"] == {"questions": 3, "all_present": 3}
    assert Path(c["index"]).name.startswith("own-") and Path(c["index"]).is_relative_to(ragteam_home())


def test_pooled_is_every_paragraph_of_the_file_and_joins_other_corpora(hotpot12, shared_data, tmp_path):
    cfg = TeamConfig(workflow="standard-rag", retriever={"kind": "bm25"}, corpus="pooled")
    questions = read_questions(hotpot12).questions[:2]
    _, pooled = choose_corpus(cfg, str(hotpot12), None, True, False, questions)
    assert pooled.kind == "pooled" and len(pooled.index) == own_paragraphs(hotpot12, 0, 12)
    wiki = tmp_path / "wiki.jsonl"  # a Wikipedia-like passage file: one passage already in the file, one new
    first = questions[0].context[0]
    write_corpus(wiki, [Doc("w1", first.title, first.text), Doc("w2", "Elsewhere", "Nothing asked here.")])
    joined = cfg.model_copy(update={"corpus": f"pooled+{wiki}"})
    _, both = choose_corpus(joined, str(hotpot12), None, True, False, questions)
    assert len(both.index) == len(pooled.index) + 1 and str(wiki) in both.name  # deduplicated by content
    sample = shared_data / "wiki18-sample-1000.jsonl"
    spec = parse_corpus(f"pooled+{sample}")
    big = open_corpus(spec, str(hotpot12), None, questions, ("bm25",), progress=False)
    assert len(big.index) == len(pooled.index) + 1000


def test_an_index_folder_is_a_corpus_and_a_plain_folder_says_how_to_pool_it(hotpot12, tmp_path):
    docs = pool_corpus(read_questions(hotpot12).questions[:1])
    folder = build_index(docs, tmp_path / "idx", kinds=["bm25"], progress=False)
    made = open_corpus(parse_corpus(str(folder.path)), str(hotpot12), None, None, ("bm25",), False)
    assert made.kind == "index" and len(made.index) == len(docs)
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="pooled:.*plain"):
        open_corpus(parse_corpus(str(tmp_path / "plain")), str(hotpot12), None, None, ("bm25",), False)


def test_a_profiles_corpus_yields_to_a_named_index_a_users_clashes(hotpot12, tmp_path):
    docs = pool_corpus(read_questions(hotpot12).questions[:1])
    folder = build_index(docs, tmp_path / "idx", kinds=["bm25"], progress=False)
    paper = TeamConfig(
        workflow="c3po", profile="paper", retriever={"kind": "bm25", "index": str(folder.path)}
    )
    assert paper.corpus == "pooled"  # the paper profile's (its source says so)
    _, made = choose_corpus(paper, str(hotpot12), None, True, False)
    assert made.kind == "index" and len(made.index) == len(docs)
    mine = TeamConfig(
        workflow="c3po",
        profile="paper",
        corpus="pooled",
        retriever={"kind": "bm25", "index": str(folder.path)},
    )  # the user names the same corpus
    with pytest.raises(ValueError, match="--corpus pooled and --retriever.index both name a corpus"):
        choose_corpus(mine, str(hotpot12), None, True, False)


def test_collect_has_the_option_and_records_its_corpus(hotpot12, tmp_path):
    out = tmp_path / "collect"
    args = ["collect", "sft", "--workflow", "mmoa", "--data", str(hotpot12), "--out", str(out)]
    args += ["--policy.model", "tiny", "--rollout.max-tokens", "8", "--samples", "1", "--limit", "2"]
    args += ["--no-progress", "--retriever.kind", "bm25", "--corpus", "pooled", "--variant", "s-g"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"].startswith("pooled: every paragraph of")


def test_train_ppo_retrieves_from_its_training_and_held_out_questions(hotpot12, shared_data, tmp_path):
    """distractor: the training and held-out questions' own paragraphs; pooled: both files, every paragraph."""
    from ragteam.assemble.build import build_workflow
    from ragteam.train.ppo.run import run_corpus
    from ragteam.train.ppo_config import PPOConfig

    held_out = hotpot_head(shared_data, tmp_path, 14)  # questions 12-13 are not in the training file
    cfg = PPOConfig(
        workflow="standard-rag", data=str(hotpot12), limit=2, out=str(tmp_path / "o"),
        eval_data=str(held_out), eval_offset=12, retriever={"kind": "bm25"}, progress=False,
    )  # fmt: skip
    train_q = read_questions(hotpot12).questions[:2]
    eval_q = read_questions(held_out).questions[12:]
    built = run_corpus(cfg, build_workflow(cfg), None, [*train_q, *eval_q], main=False)
    assert len(questions_index([*train_q, *eval_q], ("bm25",), False).docs) == len(
        pool_corpus([*train_q, *eval_q])
    )
    # the built config opens the index; the saved one keeps the choice, not the cache path
    assert built.retriever.index is not None and cfg.retriever.index is None
    pooled = run_corpus(cfg.model_copy(update={"corpus": "pooled"}), build_workflow(cfg), None, [], False)
    from ragteam.retrieval.index import open_index

    assert len(open_index(pooled.retriever.index)) == own_paragraphs(held_out, 0, 14)  # 12 + 2 questions


# ---------------------------------------------------------------------------------------------- the cache


def test_the_cache_is_one_per_user_folder():
    assert default_home({}, "linux") == Path.home() / ".cache" / "ragteam"
    assert default_home({"XDG_CACHE_HOME": "/srv/cache"}, "linux") == Path("/srv/cache/ragteam")
    assert default_home({"XDG_CACHE_HOME": "relative"}, "linux") == Path.home() / ".cache" / "ragteam"
    assert default_home({}, "darwin") == Path.home() / "Library" / "Caches" / "ragteam"
    assert default_home({"LOCALAPPDATA": "/w"}, "win32") == Path("/w") / "ragteam" / "Cache"
    assert "test-cache" in str(ragteam_home())  # conftest points the tests at the project, not the home


def test_a_long_build_is_announced_with_an_estimate():
    assert build_estimate(50, ["bm25", "dense"]) is None  # a few seconds: no line
    line = build_estimate(4858, ["bm25", "dense"])
    assert line is not None and "4,858 passages" in line and "min" in line and "all-MiniLM-L6-v2" in line
    assert build_estimate(4858, ["bm25"]) is None  # BM25 alone is quick


def test_a_corpus_of_the_question_file_without_one_says_what_to_give():
    for corpus in ("distractor", "pooled"):
        with pytest.raises(ValueError, match=f"the corpus {corpus} .* give --data FILE, or name a corpus"):
            open_corpus(parse_corpus(corpus), None, None, None, ("bm25",), progress=False)
