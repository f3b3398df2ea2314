"""Typed configs: YAML < flags precedence, dotted nested flags, errors that name the field and the file."""

from __future__ import annotations

import argparse
from typing import Literal

import pytest
from pydantic import Field

from ragteam.cli.main import COMMANDS, build_parser
from ragteam.config import (
    Config,
    ConfigError,
    add_config_arguments,
    config_from_args,
    load_config,
    save_resolved,
)


class Inner(Config):
    base_url: str = Field("http://a", description="where")
    retries: int = Field(3, ge=0, description="how often")


class Outer(Config):
    query: str = Field(..., description="the query", json_schema_extra={"positional": True})
    k: int = Field(5, ge=1, description="top k")
    mode: Literal["x", "y"] = Field("x", description="mode")
    json_out: bool = Field(False, description="print JSON")
    gold: list[str] = Field(default_factory=list, description="gold answers")
    llm: Inner = Field(default_factory=Inner, description="the llm")


def parse(argv: list[str]) -> Outer:
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    add_config_arguments(p, Outer)
    return config_from_args(Outer, p.parse_args(argv))  # type: ignore[return-value]


def test_flags_and_nested_dotted_flags():
    cfg = parse(
        ["hello", "--k", "7", "--mode", "y", "--json-out", "--llm.base-url", "http://b", "--gold", "a", "b"]
    )
    assert (cfg.query, cfg.k, cfg.mode, cfg.json_out, cfg.gold) == ("hello", 7, "y", True, ["a", "b"])
    assert cfg.llm.base_url == "http://b" and cfg.llm.retries == 3


def test_yaml_then_flags_override(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("query: q\nk: 9\nllm:\n  retries: 1\n  base_url: http://yaml\n")
    cfg = parse(["--config", str(path), "--llm.retries", "4"])
    assert (cfg.query, cfg.k, cfg.llm.retries, cfg.llm.base_url) == ("q", 9, 4, "http://yaml")


def test_errors_name_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("query: q\nllm:\n  retries: -1\n  nope: 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(Outer, path)
    msg = str(e.value)
    assert str(path) in msg and "llm.retries" in msg and "llm.nope" in msg
    with pytest.raises(ConfigError, match="k: "):
        parse(["q", "--k", "zero"])
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(Outer, tmp_path / "list.yaml")


def _laughs(levels: int, width: int = 10, merge: bool = False) -> str:
    """A "billion laughs": each level an alias list (or merge) of the previous one, `width`**levels values."""
    lines = ["query: q", 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        if merge:
            lines.append(f"m{i}: &m{i}\n  <<: [{', '.join([f'*m{i - 1}'] * width)}]\n  k{i}: {i}")
        else:
            lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    if merge:
        lines.insert(1, "m0: &m0 {a: 1}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("merge", [False, True])
def test_yaml_alias_bombs_are_refused_fast_with_a_short_message(tmp_path, merge):
    import time
    import tracemalloc

    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs(9 if not merge else 18, width=10 if not merge else 3, merge=merge))
    assert path.stat().st_size < 2000
    tracemalloc.start()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="expands to more than 100000 values") as e:
        load_config(Outer, path)
    took = time.monotonic() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert took < 2 and peak < 50_000_000, (took, peak)
    assert str(path) in str(e.value) and len(str(e.value)) < 300
    # a few aliases stay fine
    (tmp_path / "ok.yaml").write_text("query: &q hello\ngold: [*q, *q]\n")
    assert load_config(Outer, tmp_path / "ok.yaml").gold == ["hello", "hello"]


def test_hostile_config_files_get_one_short_config_error(tmp_path):
    cases = {
        "self.yaml": ("query: q\ngold: &a [*a]\n", "refers to a node that contains it"),
        "deep.yaml": ("query: q\ngold: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64"),
        "big.yaml": ("query: q\n# " + "x" * 1_100_000 + "\n", "at most 1000000"),
        "latin1.yaml": (b"query: caf\xe9\n", "not UTF-8"),
    }
    for name, (text, needle) in cases.items():
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(ConfigError, match=needle):
            load_config(Outer, path)
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(Outer, tmp_path)
    # a huge bad value is quoted shortened, not echoed whole
    (tmp_path / "huge.yaml").write_text("query: q\nk: " + "9" * 200_000 + "x\n")
    with pytest.raises(ConfigError, match=r"k: .*\.\.\.") as e:
        load_config(Outer, tmp_path / "huge.yaml")
    assert len(str(e.value)) < 400


def test_save_resolved_records_config_and_versions(tmp_path):
    import yaml

    cfg = parse(["q"])
    doc = yaml.safe_load(save_resolved(cfg, tmp_path, "test").read_text())
    assert doc["command"] == "test" and doc["config"]["llm"]["retries"] == 3 and "python" in doc["versions"]


def test_every_command_module_has_config_and_run():
    import importlib

    for words, (module, _) in COMMANDS.items():
        mod = importlib.import_module(f"ragteam.cli.{module}")
        assert issubclass(mod.Config, Config), words
        assert callable(mod.run), words
    assert build_parser().format_help()


def test_a_retriever_url_alone_means_the_remote_service():
    import pytest

    from ragteam.retrieval.config import RetrieverConfig

    assert RetrieverConfig(url="http://127.0.0.1:8001").kind == "remote"
    assert RetrieverConfig().kind == "hybrid"
    with pytest.raises(ValueError, match="retriever.url is read only by retriever.kind remote"):
        RetrieverConfig(url="http://127.0.0.1:8001", kind="bm25")
