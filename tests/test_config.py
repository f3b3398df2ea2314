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
