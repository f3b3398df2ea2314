"""`ragteam eval` end to end: real HotpotQA records, the tiny model, a real BM25 index over the pooled
paragraphs, a real judge server on loopback; resuming, determinism and config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import hotpot_head

from ragteam.assemble.build import build_models
from ragteam.assemble.config import TeamConfig
from ragteam.assemble.folder import TRACE_FILE, check_resumable, config_differences, select_questions
from ragteam.cli.main import main
from ragteam.llm.config import ModelConfig
from ragteam.rollout.traces import load_trace
from ragteam.types import Question

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "12", "--rollout.llm-max-tokens", "8", "--no-progress"]


@pytest.fixture(scope="module")
def hotpot5(shared_data: Path, tmp_path_factory) -> Path:
    """The first 5 records of the HotpotQA dev file (their ~50 paragraphs are the pooled corpus)."""
    return hotpot_head(shared_data, tmp_path_factory.mktemp("data"), 5)


def _eval(data: Path, out: Path, *extra: str) -> int:
    return main(["eval", "--data", str(data), "--out", str(out), *TINY, *extra])


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("workflow", ["standard-rag", "c3po"])
def test_eval_writes_every_output(workflow, hotpot5, tmp_path, capsys):
    out = tmp_path / workflow
    assert _eval(hotpot5, out, "--workflow", workflow, "--limit", "3") == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["workflow"] == workflow and m["n"] == 3
    assert set(m["metrics"]) == {"em", "f1", "cover_em"}
    assert all(0.0 <= v <= 1.0 for v in m["metrics"].values())
    assert m["failed"] == 0 and m["failures"] == {}
    assert m["normalization"] and m["config"]["workflow"] == workflow
    stats = m["stats"]
    assert stats["episodes"] == 3 and stats["depth"]["n"] == 3
    assert stats["per_question"]["calls"]["llm"] >= 1.0
    assert stats["per_question"]["tokens"]["llm"]["prompt"] > 0
    assert stats["latency_seconds"]["total"] > 0
    assert len(_lines(out / "episodes.jsonl")) == 3
    assert len(_lines(out / "predictions.jsonl")) == 3
    report = (out / "report.md").read_text()
    assert f"| {workflow} | 3 |" in report
    # C-3PO's depth t (section and plot) only in a report of C-3PO: the run that records its strategy
    assert (out / "depth.png").exists() == (workflow == "c3po") == ("Depth (C-3PO" in report)
    assert "command: eval" in (out / "config.yaml").read_text()
    if workflow == "c3po":
        # the ratio counts valid router acts only; the tiny model's malformed ones are counted apart
        excluded = stats["strategy_excluded"]
        assert sum(stats["strategy"]["counts"].values()) == excluded["valid"]
        assert excluded["valid"] + sum(excluded[r]["n"] for r in ("invalid", "forced", "no_act")) == 3
        assert (out / "strategy.png").exists()
        assert stats["invalid_actions"]["acts"] >= 3  # at least the router acted on every question
        assert stats["per_question"]["calls"]["policy"] >= 1.0
    else:
        assert stats["depth"]["histogram"] == {"0": 3}  # no policy act in the baseline
        assert stats["per_question"]["calls"]["policy"] == 0.0
    assert f"| {workflow} | 3 |" in capsys.readouterr().out


def test_resume_runs_only_missing_questions(hotpot5, tmp_path):
    out = tmp_path / "run"
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "2") == 0
    first = _lines(out / "episodes.jsonl")
    assert len(first) == 2
    # interrupted mid-write: half of a third record at the end of the file
    third = load_trace(out / "episodes.jsonl")
    partial = next(iter(third.values())).to_json()[:80]
    with open(out / "episodes.jsonl", "a", encoding="utf-8") as f:
        f.write(partial)
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "4") == 0
    lines = _lines(out / "episodes.jsonl")
    assert lines[:2] == first and len(lines) == 4
    m = json.loads((out / "metrics.json").read_text())
    assert m["n"] == 4
    assert m["engine_calls"]["llm_requests"] == 2  # only questions 3 and 4 ran
    llm = m["prefix_cache"]["llm"]  # the in-process LLM's prompt tokens, and how many its prefix cache spared
    assert llm["prompt_tokens"] == m["engine_calls"]["llm_prompt_tokens"] > llm["prefill_tokens"] > 0
    ids = [json.loads(line)["question"]["id"] for line in lines]
    assert len(set(ids)) == 4
    # everything done: nothing runs, the reports are rewritten from the trace
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "4") == 0
    assert json.loads((out / "metrics.json").read_text())["engine_calls"] == {}
    assert len(_lines(out / "episodes.jsonl")) == 4


def test_torn_line_in_the_middle_stops_resume_until_repair(hotpot5, tmp_path, capsys):
    out = tmp_path / "run"
    trace = out / "episodes.jsonl"
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "3") == 0
    first = _lines(trace)
    torn = first[1][:80]  # line 2 lost its end (a full disk, a second writer), line 3 is intact
    trace.write_text("\n".join([first[0], torn, first[2]]) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "3") == 1
    err = capsys.readouterr().err
    assert "episodes.jsonl:2:" in err and "--repair" in err and "keeps the 2 intact episodes" in err
    assert "Traceback" not in err and _lines(trace)[1] == torn  # nothing was changed
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "3", "--repair") == 0
    lines = _lines(trace)
    assert lines[:2] == [first[0], first[2]] and len(lines) == 3  # intact episodes kept, in place
    assert json.loads(lines[2])["question"]["id"] == json.loads(first[1])["question"]["id"]  # rerun
    m = json.loads((out / "metrics.json").read_text())
    assert m["n"] == 3 and m["engine_calls"]["llm_requests"] == 1  # only the torn question ran again
    assert _lines(out / "episodes.jsonl.torn") == [torn]
    # any bad bytes count: a line that is not UTF-8, or not an episode, before the end
    trace.write_bytes(trace.read_bytes().replace(b"\n", b"\n\xff\xfe garbage\n[1]\n", 1))
    with pytest.raises(ValueError, match=r"episodes.jsonl:2: .*\n.*2 bad line\(s\) .*line 2, 3"):
        load_trace(trace)
    assert len(load_trace(trace, drop_bad=True)) == 3 and len(_lines(trace)) == 3


def test_offset_and_determinism(hotpot5, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert _eval(hotpot5, out, "--workflow", "standard-rag", "--offset", "2", "--limit", "2") == 0
    pa, pb = _lines(a / "predictions.jsonl"), _lines(b / "predictions.jsonl")
    assert pa == pb
    questions = [json.loads(line)["id"] for line in pa]
    all_ids = [json.loads(line)["question_id"] for line in _lines(hotpot5)]
    assert questions == all_ids[2:4]


def test_resume_with_other_settings_is_refused(hotpot5, tmp_path, capsys):
    out = tmp_path / "run"
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "1") == 0
    capsys.readouterr()
    assert _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "1", "--topk", "1") == 1
    err = capsys.readouterr().err
    assert "topk" in err and "--overwrite" in err
    assert (
        _eval(hotpot5, out, "--workflow", "standard-rag", "--limit", "1", "--topk", "1", "--overwrite") == 0
    )
    assert json.loads(_lines(out / "episodes.jsonl")[0])["nodes"][0]["k"] == 1


def test_judge_endpoint_on_loopback(hotpot5, tmp_path):
    from ragteam.llm.factory import build_chat_model
    from ragteam.serve.llm import make_app
    from ragteam.serve.testing import BackgroundServer

    judge_model = build_chat_model(ModelConfig(model="tiny"))
    out = tmp_path / "judged"
    with BackgroundServer(make_app(judge_model, "tiny-judge")) as srv:
        rc = _eval(
            hotpot5,
            out,
            "--workflow",
            "direct",
            "--limit",
            "2",
            "--judge.base-url",
            srv.url + "/v1",
            "--judge.model",
            "tiny-judge",
        )
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= m["metrics"]["judge"] <= 1.0
    assert m["judge"]["counts"]["judged"] == 2 and m["judge"]["endpoint"].startswith("http://127.0.0.1:")
    assert "judge" in (out / "report.md").read_text()


def test_multiple_choice_reports_mc_accuracy(shared_data, tmp_path):
    out = tmp_path / "mc"
    rc = main(
        [
            "eval",
            "--workflow",
            "direct",
            "--data",
            str(shared_data / "formats" / "medqa-sample.jsonl"),
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["n"] == 3 and "mc_acc" in m["metrics"] and m["n_multiple_choice"] == 3
    assert "MC acc" in (out / "report.md").read_text()


def test_unknown_workflow_is_a_clear_error(hotpot5, tmp_path, capsys):
    assert _eval(hotpot5, tmp_path / "x", "--workflow", "nope", "--limit", "1") == 1
    err = capsys.readouterr().err
    assert "nope" in err and "standard-rag" in err


def test_no_questions_at_offset(hotpot5, tmp_path, capsys):
    assert _eval(hotpot5, tmp_path / "x", "--workflow", "direct", "--offset", "9") == 1
    assert "no questions at offset 9" in capsys.readouterr().err


def test_policy_and_llm_alike_share_one_model():
    cfg = TeamConfig(workflow="c3po", policy=ModelConfig(model="tiny"), llm=ModelConfig(model="tiny"))
    policy, llm = build_models(cfg)
    assert policy is llm
    cfg = TeamConfig(
        workflow="c3po", policy=ModelConfig(model="tiny"), llm=ModelConfig(model="tiny", max_batch_size=4)
    )
    policy, llm = build_models(cfg)
    assert policy is not llm
    policy, llm = build_models(cfg, need_policy=False)
    assert policy is None and llm is not None
    policy, llm = build_models(cfg, need_llm=False)
    assert policy is not None and llm is None


def test_a_team_without_an_llm_role_loads_no_llm(hotpot5):
    """MMOA-RAG's roles are all the policy's: the LLM config (here one that could not load) is never built."""
    from ragteam.assemble.build import build_team

    cfg = TeamConfig(
        workflow="mmoa", policy=ModelConfig(model="tiny"), llm=ModelConfig(model="/nonexistent/model")
    )
    team = build_team(cfg, data=str(hotpot5))
    assert team.llm is None and team.policy is not None


def test_workflow_options_are_flat_fields_of_that_workflow_alone():
    cfg = TeamConfig(workflow="mmoa", variant="s-g", topk=3)
    wf = cfg.workflow_config()
    assert (wf.variant, wf.topk) == ("s-g", 3) and type(wf).__name__ == "MMOAOptions"
    with pytest.raises(ValueError, match="strategy"):
        TeamConfig(workflow="mmoa", strategy="planning")  # C-3PO's option, not MMOA-RAG's
    assert TeamConfig(workflow="c3po", strategy="planning").workflow_config().strategy == "planning"


def test_a_run_recorded_with_every_workflows_options_resumes(tmp_path):
    """config.yaml of a run made before workflows owned their options lists the others' (`variant` beside
    `--workflow c3po`): they read nowhere now, so the run resumes; a changed option of its own still refuses."""
    import yaml

    from ragteam.eval.run import EvalConfig

    cfg = EvalConfig(workflow="c3po", data="d.jsonl", out=str(tmp_path))
    old = {**cfg.model_dump(mode="json"), "variant": "qr-s-g", "candidates": 10, "max_steps": 10}
    (tmp_path / TRACE_FILE).write_text("", encoding="utf-8")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"config": old}), encoding="utf-8")
    check_resumable(cfg, tmp_path)
    with pytest.raises(ValueError, match="max_rounds"):
        check_resumable(
            EvalConfig(workflow="c3po", max_rounds=2, data="d.jsonl", out=str(tmp_path)), tmp_path
        )


def test_config_differences_ignore_operational_settings():
    old = {
        "workflow": "c3po",
        "limit": 5,
        "policy": {"model": "a", "timeout": 1.0},
        "judge": {"base_url": None},
    }
    new = {
        "workflow": "c3po",
        "limit": 50,
        "policy": {"model": "a", "timeout": 9.0},
        "judge": {"base_url": "u"},
    }
    assert config_differences(old, new) == []
    new["policy"]["model"] = "b"
    new["topk"] = 3
    assert config_differences(old, new) == ["policy.model", "topk"]


def test_config_differences_sees_one_file_under_two_spellings(tmp_path, monkeypatch):
    """A run started in a subfolder with `../q.jsonl` resumes from the parent with `q.jsonl`; another file, or a
    path that does not exist, still differs."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "q.jsonl").write_text("{}\n")
    (tmp_path / "other.jsonl").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    old = {"data": "../q.jsonl", "policy": {"model": "../gone"}}
    started = str(tmp_path / "sub")
    assert config_differences(old, {"data": "q.jsonl", "policy": {"model": "../gone"}}, old_cwd=started) == []
    assert (
        config_differences(
            old, {"data": str(tmp_path / "q.jsonl"), "policy": {"model": "../gone"}}, old_cwd=started
        )
        == []
    )
    assert config_differences(
        old, {"data": "other.jsonl", "policy": {"model": "../gone"}}, old_cwd=started
    ) == ["data"]
    assert config_differences(old, {"data": "q.jsonl", "policy": {"model": "gone"}}, old_cwd=started) == [
        "policy.model"
    ]
    assert config_differences(old, {"data": "q.jsonl", "policy": {"model": "../gone"}}) == [
        "data"
    ]  # no cwd saved


def test_select_questions_slices_and_rejects_duplicate_ids():
    qs = [Question(id=str(i), question="?", golden_answers=[]) for i in range(5)]
    assert [q.id for q in select_questions(qs, 1, 2)] == ["1", "2"]
    assert [q.id for q in select_questions(qs, 3, None)] == ["3", "4"]
    with pytest.raises(ValueError, match="unique"):
        select_questions(qs + [Question(id="4", question="?", golden_answers=[])], 3, None)


@pytest.mark.parametrize(
    "workflow",
    ["direct", "mmoa", "gym:direct", "gym:cot", "gym:rag", "gym:react", "gym:search-o1", "gym:re2search"],
)
def test_every_other_workflow_evaluates(workflow, hotpot5, tmp_path):
    out = tmp_path / "w"
    # K=2 candidates keep MMOA's prompts short (the tiny model's BPE is a poor compressor)
    k = ["--candidates", "2"] if workflow == "mmoa" else []  # MMOA-RAG's option alone
    assert _eval(hotpot5, out, "--workflow", workflow, "--limit", "1", *k) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["n"] == 1 and m["failed"] == 0, m["failures"]
    assert m["stats"]["episodes"] == 1 and (out / "report.md").exists()
    needs_policy = workflow != "direct"
    assert (m["stats"]["per_question"]["calls"]["policy"] >= 1) == needs_policy
