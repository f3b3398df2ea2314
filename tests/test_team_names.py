"""A team has one name everywhere (issue 31): its class's `name` in metrics.json, report.md and the served model
id, the `--workflow` module path accepted as an alias by the server; report sections only for the workflows
they describe (C-3PO's depth t).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import TEST_DEVICE

from ragteam.protocol import Workflow, team_name

MODULE = """
from ragteam.workflows.baselines import Direct


class SelfAsk(Direct):
    name = "self-ask"


class Unnamed(Direct):
    name = "workflow"  # the base's placeholder: the --workflow value names it
"""


@pytest.fixture
def selfask(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "selfask_team.py").write_text(MODULE, encoding="utf-8")
    info = tmp_path / "selfask_team-0.3.dist-info"  # as `pip install` of the team's package leaves it
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: selfask-team\nVersion: 0.3\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text("selfask_team\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "selfask_team:SelfAsk"


def test_a_teams_name_is_its_classs_unless_it_keeps_the_placeholder(selfask: str) -> None:
    from ragteam.workflows.registry import build_workflow

    assert team_name(build_workflow(selfask), selfask) == "self-ask"
    assert team_name(build_workflow("selfask_team:Unnamed"), "selfask_team:Unnamed") == "selfask_team:Unnamed"
    assert Workflow.name == "workflow"


def test_eval_names_the_team_by_its_class_and_leaves_out_c3pos_depth(
    selfask: str, hotpot_small, tmp_path
) -> None:
    from ragteam.cli.main import main

    out = tmp_path / "eval"
    argv = ["eval", "--workflow", selfask, "--data", str(hotpot_small), "--out", str(out), "--limit", "2",
            "--llm.model", "tiny", "--llm.device", TEST_DEVICE, "--rollout.llm-max-tokens", "4", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["workflow"] == "self-ask"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.startswith("# Evaluation of `self-ask`")
    assert "C-3PO" not in report and not (out / "depth.png").exists()  # the section is C-3PO's alone
    saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    assert saved["team"] == {"module": "selfask_team", "package": "selfask-team", "version": "0.3"}


def test_a_command_that_fails_its_checks_leaves_no_run_folder(hotpot_small, tmp_path, capfd) -> None:
    from ragteam.cli.main import main

    for command in (["eval"], ["collect", "sft"]):
        out = tmp_path / "-".join(command)
        assert main([*command, "--workflow", "nope", "--data", str(hotpot_small), "--out", str(out)]) == 1
        assert "unknown workflow 'nope'" in capfd.readouterr().err
        assert not out.exists()
    kept = tmp_path / "kept"  # a folder that was there before is the user's: kept, with what it held
    kept.mkdir()
    (kept / "notes.txt").write_text("mine", encoding="utf-8")
    assert main(["eval", "--workflow", "nope", "--data", str(hotpot_small), "--out", str(kept)]) == 1
    assert (kept / "notes.txt").is_file()


def test_the_server_serves_the_class_name_and_answers_to_the_module_path(selfask: str, hotpot_small) -> None:
    from ragteam.assemble.build import build_team
    from ragteam.cli.serve_team import Config, served_names
    from ragteam.serve.team import make_app
    from ragteam.serve.testing import BackgroundServer

    cfg = Config(
        workflow=selfask, llm={"model": "tiny", "device": TEST_DEVICE}, rollout={"llm_max_tokens": 4}
    )
    parts = build_team(cfg)
    name, aliases = served_names(None, parts.workflow, selfask)
    assert (name, aliases) == ("self-ask", (selfask,))
    assert served_names("mine", parts.workflow, selfask) == ("mine", ())
    with BackgroundServer(make_app(parts.engine, parts.workflow, name, aliases=aliases)) as srv:
        assert httpx.get(srv.url + "/v1/models").json()["data"][0]["id"] == "self-ask"
        assert httpx.get(srv.url + "/health").json()["workflow"] == "self-ask"
        for model, status in (("self-ask", 200), (selfask, 200), ("other", 404)):
            r = httpx.post(
                srv.url + "/v1/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "Who wrote Hamlet?"}]},
                timeout=120,
            )
            assert r.status_code == status, (model, r.text)
            if status == 200:
                assert r.json()["model"] == "self-ask"
