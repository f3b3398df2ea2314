"""The public API: `import ragteam` is light, and a team written outside the package runs by `module:Class`,
by an installed package's entry point and by `register_workflow`; a module or attribute that fails to load is
one line naming it."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import hotpot_head

import ragteam
from ragteam.cli.main import main
from ragteam.workflows import registry

# A team of one policy role and the LLM, written against the public names only (as docs/extend.md does).
TEAM = '''
"""A two-role team for the tests: the policy writes a query, the LLM answers from its hits."""

from ragteam import Action, Answer, Retrieve, Role, Workflow, WorkflowConfig


def query_messages(question):
    return [{"role": "user", "content": f"Write a search query for: {question}"}]


def parse_query(text, **fields):  # never raises: an empty reply falls back to the question
    query = text.strip().splitlines()[0] if text.strip() else ""
    return Action("search", query) if query else Action("search", None, valid=False, error="empty")


def answer_messages(question, docs):
    context = "\\n".join(d.text for d in docs)
    return [{"role": "user", "content": f"{context}\\nQuestion: {question}\\nAnswer:"}]


QUERY = Role("query", render=query_messages, parse=parse_query, max_tokens=12)
ANSWER = Role("answer", render=answer_messages, max_tokens=8, docs="docs")


class Team(Workflow):
    name = "test-team"
    roles = (QUERY,)

    def __init__(self, cfg: WorkflowConfig | None = None) -> None:
        self.cfg = cfg if cfg is not None else WorkflowConfig()

    def run(self, question):
        acted = yield QUERY.act(question=question.question)
        query = acted.action.value if acted.action.valid else question.question
        hits = yield Retrieve([query], k=self.cfg.topk)
        text = yield ANSWER.ask(question=question.question, docs=[h.doc for h in hits[0]])
        return Answer(text.strip(), info={"query": query})


def build(cfg):
    return Team(cfg)
'''

TINY = ["--policy.model", "tiny", "--llm.model", "tiny", "--retriever.kind", "bm25", "--topk", "2"]
TINY += ["--rollout.max-tokens", "12", "--rollout.llm-max-tokens", "8"]


@pytest.fixture
def team_dir(tmp_path, monkeypatch) -> Path:
    """A folder on sys.path holding the package `myteams` with the team module `myteams.team`."""
    root = tmp_path / "site"
    (root / "myteams").mkdir(parents=True)
    (root / "myteams" / "__init__.py").write_text("")
    (root / "myteams" / "team.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m == "myteams" or m.startswith("myteams.")]:
        del sys.modules[name]


def _dist_info(root: Path, entries: dict[str, str]) -> None:
    """An installed distribution's metadata as pip writes it: entry_points.txt in a .dist-info folder."""
    info = root / "myteams-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myteams\nVersion: 0.1\n")
    lines = [f"{name} = {target}" for name, target in entries.items()]
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def hotpot3(shared_data: Path, tmp_path_factory) -> Path:
    return hotpot_head(shared_data, tmp_path_factory.mktemp("data"), 3)


# ---------------------------------------------------------------------------------------------- import ragteam


def test_import_ragteam_does_not_import_torch():
    code = (
        "import sys, ragteam\n"
        "assert 'torch' not in sys.modules, 'import ragteam'\n"
        "from ragteam import Workflow, Role, Act, AskLLM, Retrieve, Answer, register_workflow, register_credit\n"
        "from ragteam import evaluate, collect, train_sft, train_dpo, train_prm, train_ppo, EvalConfig\n"
        "assert 'torch' not in sys.modules, 'the public names'\n"
        "from ragteam import register_advantage\n"
        "assert 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_public_name_resolves_to_its_home():
    listed = [name for names in ragteam._HOMES.values() for name in names]
    assert len(listed) == len(set(listed)), "a public name listed under two homes"
    assert ragteam.__all__ == sorted(listed)
    for name in ragteam.__all__:
        assert getattr(ragteam, name) is not None, name
    assert ragteam.Workflow is registry.Workflow and ragteam.register_workflow is registry.register_workflow
    from ragteam.credit import register_credit

    assert ragteam.register_credit is register_credit
    with pytest.raises(AttributeError, match="no_such_name"):
        ragteam.no_such_name  # noqa: B018


def test_the_readmes_public_names_are_the_codes():
    """README.md's paragraph of public names (`The names: ...`) names only what `ragteam` exports: a renamed
    or removed name cannot linger there."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    start = readme.index("The names: ")
    paragraph = readme[start : readme.index("\n\n", start)]
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", paragraph))
    assert len(named) >= 10, paragraph
    assert named <= set(ragteam.__all__), f"README.md names {sorted(named - set(ragteam.__all__))}"


def test_api_configs_are_the_commands_own():
    from ragteam.cli import collect, evaluate, train_dpo, train_ppo, train_prm, train_sft

    assert ragteam.EvalConfig is evaluate.Config and ragteam.CollectConfig is collect.Config
    assert ragteam.SFTConfig is train_sft.Config and ragteam.DPOConfig is train_dpo.Config
    assert ragteam.PRMTrainConfig is train_prm.Config and ragteam.PPOConfig is train_ppo.Config


def test_the_public_api_imports_nothing_from_the_cli():
    """The configs and functions `ragteam` exports are the library's: api.py imports no `ragteam.cli` module
    (at its top or inside a function), and importing it loads none."""
    import ast

    import ragteam.api

    tree = ast.parse(Path(ragteam.api.__file__).read_text(encoding="utf-8"))
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert imported and not [m for m in imported if m.startswith("ragteam.cli")], imported
    code = "import sys, ragteam.api\nassert not [m for m in sys.modules if m.startswith('ragteam.cli')]\n"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------- module:Class


def test_module_class_builds_picklable_workflow(team_dir):
    cfg = ragteam.WorkflowConfig(topk=3)
    for spec in ("myteams.team:Team", "myteams.team:build"):
        wf = ragteam.build_workflow(spec, cfg)
        assert type(wf).__name__ == "Team" and wf.name == "test-team" and wf.cfg.topk == 3
        assert [r.name for r in wf.roles] == ["query"]
        assert pickle.loads(pickle.dumps(wf)).cfg == wf.cfg


def test_module_class_runs_in_ask_and_eval(team_dir, hotpot3, capsys, tmp_path):
    rc = main(["ask", "Who wrote Hamlet?", "--workflow", "myteams.team:Team", "--data", str(hotpot3), *TINY])
    assert rc == 0
    out = capsys.readouterr().out
    assert "query" in out and "\nAnswer: " in out

    cfg = ragteam.EvalConfig(
        workflow="myteams.team:Team",
        data=str(hotpot3),
        out=str(tmp_path / "eval"),
        policy={"model": "tiny"},
        llm={"model": "tiny"},
        retriever={"kind": "bm25"},
        topk=2,
        rollout={"max_tokens": 12, "llm_max_tokens": 8},
        progress=False,
    )
    lines: list[str] = []
    summary = ragteam.evaluate(cfg, log=lines.append)
    assert summary["n"] == 3 and "f1" in summary["metrics"]
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["n"] == 3
    episodes = (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 3 and all(json.loads(e)["workflow"] == "test-team" for e in episodes)


# ---------------------------------------------------------------------------------------------- entry points


def test_entry_point_builds_by_name_and_is_listed(team_dir):
    _dist_info(team_dir, {"my-team": "myteams.team:Team"})
    assert "my-team" in registry.workflow_names()
    assert "my-team" in registry.workflow_help()
    wf = ragteam.build_workflow("my-team", ragteam.WorkflowConfig(topk=4))
    assert type(wf).__name__ == "Team" and wf.cfg.topk == 4
    assert "myteams.team" in sys.modules  # imported only when built


@pytest.mark.slow  # installs a package, then a command in a process of its own
def test_entry_point_shows_in_help(team_dir):
    _dist_info(team_dir, {"my-team": "myteams.team:Team"})
    for command in (["eval"], ["ask"], ["collect"], ["train", "ppo"], ["serve", "team"], ["demo"]):
        out = subprocess.run(
            [sys.executable, "-m", "ragteam.cli.main", *command, "--help"],
            capture_output=True,
            text=True,
            check=True,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(team_dir), os.environ.get("PYTHONPATH", "")]),
            },
        ).stdout
        assert "my-team" in " ".join(out.split()), command


def test_entry_point_that_fails_names_it(team_dir):
    _dist_info(team_dir, {"broken": "myteams.nowhere:Team", "typo": "myteams.team:Taem"})
    with pytest.raises(ValueError) as err:
        ragteam.build_workflow("broken")
    message = str(err.value)
    assert "entry point 'broken'" in message and "myteams.nowhere" in message and "\n" not in message
    with pytest.raises(ValueError, match="entry point 'typo'.*has no attribute 'Taem'"):
        ragteam.build_workflow("typo")


# ---------------------------------------------------------------------------------------------- errors


def test_bad_module_is_one_line_naming_it(team_dir, capsys):
    (team_dir / "myteams" / "broken.py").write_text("import math\nraise RuntimeError('boom at import')\n")
    (team_dir / "myteams" / "syntax.py").write_text("def f(:\n")
    rc = main(["ask", "Who wrote Hamlet?", "--workflow", "myteams.broken:Team", *TINY])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("ragteam: error: workflow 'myteams.broken:Team': module 'myteams.broken' failed")
    assert "RuntimeError: boom at import" in err
    with pytest.raises(ValueError, match=r"module 'myteams.syntax' failed to import: SyntaxError.*line 1"):
        ragteam.build_workflow("myteams.syntax:Team")
    with pytest.raises(ValueError, match="unknown workflow 'nosuchpkg.team:Team': no module 'nosuchpkg'"):
        ragteam.build_workflow("nosuchpkg.team:Team")


def test_bad_attribute_is_one_line_naming_it(team_dir, capsys):
    rc = main(["ask", "Who wrote Hamlet?", "--workflow", "myteams.team:Teem", *TINY])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert "module 'myteams.team' has no attribute 'Teem'" in err
    with pytest.raises(ValueError, match="not a ragteam.Workflow"):
        ragteam.build_workflow("myteams.team:query_messages", ragteam.WorkflowConfig())  # not a factory
    with pytest.raises(ValueError, match="not a Workflow class or factory"):
        ragteam.build_workflow("myteams.team:QUERY")


# ---------------------------------------------------------------------------------------------- register


def test_register_workflow_by_call_and_decorator(team_dir, monkeypatch):
    from myteams.team import Team

    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    monkeypatch.setattr(registry, "WORKFLOWS", list(registry.WORKFLOWS))
    assert ragteam.register_workflow("mine", Team) is Team

    @ragteam.register_workflow("mine-too")
    def mine_too(cfg):
        return Team(cfg)

    assert registry.WORKFLOWS[-2:] == ["mine", "mine-too"]
    assert isinstance(ragteam.build_workflow("mine-too"), Team)
    with pytest.raises(ValueError, match="already registered"):
        ragteam.register_workflow("c3po", Team)
