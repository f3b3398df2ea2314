"""The documentation stays true to the code: the generated CLI reference is current, every relative link in
README.md and docs/*.md resolves (file, and heading anchor where it names one), and every `ragteam ...`
command shown in the guides parses with the real parser and builds a valid config (nothing is run)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from ragteam.cli import main as cli_main
from ragteam.config import ConfigError, add_config_arguments, config_from_args
from ragteam.workflows.registry import WORKFLOWS, workflow_options

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# The guides whose `ragteam ...` commands must parse (the other pages quote commands with placeholders).
GUIDES = ["quickstart.md", "concepts.md", "byo.md", "data-formats.md", "extend.md"]


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "scripts" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


# ---- the generated reference -----------------------------------------------------------------------------------


def test_cli_reference_is_current():
    ref = _cli_reference()
    current = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert current == ref.render(), (
        "docs/cli.md is stale (a command or a flag changed): regenerate it with "
        "`.venv/bin/python scripts/cli_reference.py`"
    )


def test_cli_reference_lists_every_flag_of_every_command():
    """Every option string argparse knows for a command appears in its section of the reference."""
    ref = _cli_reference()
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for words in cli_main.COMMANDS:
        name = "ragteam " + " ".join(words)
        start = text.index(f"## `{name}`")
        end = text.find("\n## ", start + 1)
        section = text[start : end if end != -1 else len(text)]
        parser, _, _ = ref.command_parser(words)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in ("-h", "--help"):
                    continue
                assert f"`{flag}`" in section, f"{name}: {flag} missing from docs/cli.md"


# ---- links -----------------------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code (links there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (lower case, punctuation dropped, duplicates numbered)."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    problems = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            problems.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not problems, f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(problems)


def test_anchor_rules_match_github():
    page = DOCS / "cli.md"
    anchors = _anchors(page)
    assert "ragteam-train-ppo" in anchors and "ragteam-eval-retrieval" in anchors


# ---- commands in the guides -----------------------------------------------------------------------------------


def _commands(page: Path) -> list[tuple[int, str]]:
    """(line, command) for every `ragteam ...` line in the page's bash blocks (continuations joined)."""
    found: list[tuple[int, str]] = []
    fenced = shell = False
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if FENCE.match(line):
            fenced = not fenced
            shell = fenced and line[3:].strip() in ("bash", "sh", "shell", "console")
            continue
        if not shell:
            continue
        if pending:
            pending.append(line)
        elif re.match(r"^(\.venv/bin/)?ragteam(\s|$)", line):
            pending, start = [line], number
        if pending and not line.endswith("\\"):
            found.append((start, " ".join(part.rstrip("\\").strip() for part in pending)))
            pending = []
    return found


def _parse(command: str):
    """The command's validated Config, built as `ragteam` builds it; AssertionError saying what is wrong."""
    argv = shlex.split(command, comments=True)[1:]
    if "--help" in argv or "-h" in argv:  # `ragteam --help`, `ragteam train --help`, `ragteam eval --help`
        words = tuple(a for a in argv if not a.startswith("-"))
        assert any(w[: len(words)] == words for w in cli_main.COMMANDS), f"unknown command: {command}"
        return None
    module_name = cli_main._command_from_argv(argv)
    assert module_name is not None, f"unknown command: {command}"
    module = importlib.import_module(f"ragteam.cli.{module_name}")
    config_cls = cli_main.command_config(module.Config, argv)  # with the chosen workflow's own options
    parser = cli_main.build_parser()
    cli_main._add_command_flags(parser, module_name, module, config_cls)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse printed the reason on stderr
        raise AssertionError(f"does not parse (exit {e.code}): {command}") from None
    try:
        return config_from_args(config_cls, cli_main._strip(args))
    except ConfigError as e:
        raise AssertionError(f"invalid config: {command}\n{e}") from None


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_commands_parse(guide: str, monkeypatch):
    monkeypatch.chdir(ROOT)  # the guides' relative paths (a recipe file) are from the repository's root
    if guide == "extend.md":  # its team, as installed (`pip install -e examples/search_r1`): `search-r1`
        _install_search_r1(monkeypatch)
    page = DOCS / guide
    commands = _commands(page)
    if guide == "quickstart.md":
        words = {tuple(shlex.split(c, comments=True)[1:3]) for _, c in commands}
        for needed in [("eval",), ("collect", "sft"), ("train", "sft"), ("train", "ppo")]:
            assert any(w[: len(needed)] == needed for w in words), (
                f"quickstart lacks `ragteam {' '.join(needed)}`"
            )
    failures = []
    for line, command in commands:
        assert "$" not in command, f"{guide}:{line}: write the command out (no shell variables): {command}"
        try:
            _parse(command)
        except AssertionError as e:
            failures.append(f"{guide}:{line}: {e}")
    assert not failures, "\n".join(failures)


def test_command_extraction_joins_continuations(tmp_path: Path):
    page = tmp_path / "x.md"
    page.write_text(
        "```bash\nragteam eval --workflow mmoa \\\n  --data d.jsonl --out o   # note\necho hi\n```\n"
        "```text\nragteam not a command\n```\n",
        encoding="utf-8",
    )
    assert _commands(page) == [(2, "ragteam eval --workflow mmoa --data d.jsonl --out o   # note")]
    cfg = _parse(_commands(page)[0][1])
    assert cfg.workflow == "mmoa" and cfg.out == "o"
    with pytest.raises(AssertionError, match="does not parse"):
        _parse("ragteam eval --no-such-flag 1")
    with pytest.raises(AssertionError, match="invalid config"):
        _parse("ragteam eval --workflow mmoa --data d --out o --topk zero")
    assert _parse("ragteam --help") is None and _parse("ragteam train --help") is None
    with pytest.raises(AssertionError, match="unknown command"):
        _parse("ragteam trian --help")


def test_reference_defaults_are_the_default_profiles():
    """docs/cli.md shows field defaults and says they are the default profile's: keep that true."""
    from ragteam.assemble.config import TeamConfig
    from ragteam.workflows import profiles

    for workflow in WORKFLOWS:
        for setting in profiles.settings(profiles.DEFAULT_PROFILE, workflow):
            value: object = TeamConfig.for_workflow(workflow)  # with the workflow's own options
            for part in setting.key.split("."):
                info = value.model_fields[part]  # type: ignore[attr-defined]
                value = info.get_default(call_default_factory=True)
                if part != setting.key.split(".")[-1]:
                    value = type(value)
            assert value == setting.value, (
                f"profile {profiles.DEFAULT_PROFILE!r} sets {setting.key}={setting.value!r} for {workflow}, "
                f"the field default is {value!r}: docs/cli.md's defaults (and its header) need updating"
            )


# Flags of other programs that the guides show (vLLM's and SGLang's launch commands).
FOREIGN_FLAGS = {"--model-path", "--host", "--port"}


def _install_search_r1(monkeypatch) -> type:
    """The Search-R1 example's team under its installed name `search-r1` for this test (on sys.path and in the
    registry, both undone after, with the credit and reward its import registers); its options class."""
    from ragteam import credit
    from ragteam.metrics import rewards
    from ragteam.workflows import registry

    monkeypatch.setattr(credit, "CREDITS", dict(credit.CREDITS))  # --help reads these when a parser is built
    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "search_r1"))
    from search_r1 import SearchR1

    monkeypatch.setitem(registry._FACTORIES, "search-r1", SearchR1)
    return SearchR1.Options


def test_every_flag_named_in_the_guides_exists(monkeypatch):
    """A flag named anywhere in a guide (prose or code) is a flag of some ragteam command (`--X.` stands for
    any model group), or an option of extend.md's example team (Search-R1's `--max-turns`)."""
    ref = _cli_reference()
    team_options = _install_search_r1(monkeypatch).model_fields
    known = {"--help", "--config", *("--" + name.replace("_", "-") for name in team_options)}
    for words in cli_main.COMMANDS:
        parser, _, _ = ref.command_parser(words)
        for action in parser._actions:
            known.update(action.option_strings)
    for name in WORKFLOWS:  # each workflow's own options, flags of the commands that run it
        own = argparse.ArgumentParser()
        add_config_arguments(own, workflow_options(name))
        known.update(s for action in own._actions for s in action.option_strings)
    problems = []
    for guide in GUIDES:
        text = (DOCS / guide).read_text(encoding="utf-8")
        for flag, group in sorted(set(re.findall(r"(?<![\w-])(--[a-zA-Z][\w.-]*\w)(\.\*)?", text))):
            flag = re.sub(r"(^--|^--no-)X\.", r"\1policy.", flag)
            if group:  # `--policy.*`: a group some command has
                ok = any(k.startswith(flag + ".") for k in known)
            else:
                ok = flag in known or flag in FOREIGN_FLAGS
            if not ok:
                problems.append(f"{guide}: {flag}{group}")
    assert not problems, "flags that no command has:\n  " + "\n  ".join(problems)
