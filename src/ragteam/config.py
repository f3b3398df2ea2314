"""Typed configs: one pydantic model per command, loaded from YAML, overridable from the command line.

Precedence: field defaults < `--config FILE.yaml` < command-line flags. Nested models become dotted flags
(`--policy.model`, `--llm.base-url`). Every flag's `--help` text is the field's description, so a config
class documents its command. `save_resolved` writes the final config and library versions beside outputs.

Config files are bounded: regular files only (a FIFO or `/dev/zero` would block or never end), at most
`MAX_CONFIG_BYTES` (counted while reading, not only from the size the file system reports), nesting at most
`MAX_CONFIG_DEPTH` levels, and at most `MAX_CONFIG_VALUES` values once YAML aliases are expanded. Why: a few
hundred bytes of nested aliases (a "billion laughs") expand to billions of values; PyYAML shares them when
constructing, but merge keys, validation and error messages walk them all. The expansion is measured on
the composed node graph, before any Python object is built. The same walk refuses a key given twice in
one mapping (YAML would keep the last silently) and an integer of more digits than Python converts, each
naming its line. Error messages quote values shortened (`got ...`), never whole.

Numbers: every float field of every config is finite (`allow_inf_nan=False` on `Config`: `--batch-wait-ms
inf` would make a server wait forever), and `check_number` is the one range check that servers and clients
built from Python (not through a config) run on their numeric arguments, with the same wording.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import platform
import reprlib
import stat
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, ValidationInfo, model_validator

from ragteam.precedence import Layer, as_given, layered, sources_of

LAYERED = "ragteam.layered"  # validation context key: the class whose layers `resolve` merged already


class Config(BaseModel):
    """Base of every command's config: unknown keys are errors, values are validated on assignment, and no
    float field takes NaN or infinity (an infinite wait or timeout is a hang, not a setting).

    Settings resolve in one place (`resolve`): defaults < the class's own `layers` (a profile, a recipe, a
    preset) < config file < flags (or, built in Python, the constructor's arguments: `code`), merged as
    plain mappings and validated once; each value's source is kept (`sources_of`) for config.yaml."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        """Equal values are equal configs, wherever each came from (`_sources` is not compared)."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    @classmethod
    def layers(cls, given: dict[str, Any]) -> list[Layer]:
        """The layers under the user's values, lowest first, chosen from `given` (the user's values merged:
        a `--recipe` or `--profile` named on the command line or in the file). None by default."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _layered(cls, data: Any, handler: Any, info: ValidationInfo) -> Any:
        """A config built in Python (`EvalConfig(workflow="mmoa", profile="paper")`) resolves like the command
        line, its arguments the top layer (`code`); a model being assigned and `resolve`'s input pass through."""
        own = cls.layers.__func__ is not Config.layers.__func__  # type: ignore[attr-defined]
        if not isinstance(data, dict) or (info.context or {}).get(LAYERED) is cls or not own:
            return handler(data)
        merged, sources = layered(cls, [("code", data)])
        model = handler(merged)
        model._sources = sources
        return model


class ConfigError(ValueError):
    """A config that does not validate; the message names the file (if any) and each bad field."""


def check_number(
    name: str, value: Any, low: float | None = None, high: float | None = None, low_open: bool = False
) -> float:
    """`value` if it is a finite real number within [low, high] (`low_open`: above `low`), else ValueError
    naming `name` and the range. Why one function: servers and clients take the same kind of numbers (waits,
    timeouts, sizes) from configs and from Python callers, and each must refuse `inf` and NaN alike."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if ok:
        return value
    lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = "" if high is None else f"<= {high:g}"
    bounds = " and ".join(b for b in (lo, hi) if b)
    raise ValueError(
        f"{name} must be a finite number{' ' + bounds if bounds else ''}, got {short_repr(value)}"
    )


MAX_CONFIG_BYTES = 1_000_000
MAX_CONFIG_DEPTH = 64
MAX_CONFIG_VALUES = 100_000

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3


def short_repr(value: Any, limit: int = 120) -> str:
    """`repr(value)` cut to about `limit` characters; walks only the first few items of a container."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_: set[int], depth: int, where: str) -> int:
    """Values under `node` with every alias expanded; memoized on shared nodes, so linear in the graph."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ConfigError(f"{where}: a YAML alias refers to a node that contains it")
    if depth > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{where}: nested deeper than {MAX_CONFIG_DEPTH} levels")
    size = 1
    _check_scalar_and_keys(node, where)
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        open_.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else [x for kv in node.value for x in kv]
        for child in children:
            size += _expanded_size(child, sizes, open_, depth + 1, where)
            if size > MAX_CONFIG_VALUES:
                raise ConfigError(
                    f"{where}: expands to more than {MAX_CONFIG_VALUES} values (nested YAML aliases?); "
                    "write the values out"
                )
        open_.discard(key)
    sizes[key] = size
    return size


_INT_TAG = "tag:yaml.org,2002:int"
_INT_DIGITS = min(4300, sys.get_int_max_str_digits() or 4300)  # Python's limit on converting text to int


def _check_scalar_and_keys(node: yaml.Node, where: str) -> None:
    """A YAML integer too long to convert, or a mapping that gives one key twice: ConfigError naming the line."""
    if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG:
        digits = sum(c.isdigit() for c in node.value)
        if digits > _INT_DIGITS:
            raise ConfigError(
                f"{where}:{node.start_mark.line + 1}: a number of {digits} digits; at most {_INT_DIGITS}"
            )
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            line = key.start_mark.line + 1
            if key.value in first and key.value != "<<":  # "<<" is a merge key, not a field
                raise ConfigError(
                    f"{where}:{line}: key {short_repr(key.value)} is given twice (first at line "
                    f"{first[key.value]}); keep one"
                )
            first.setdefault(key.value, line)


def short_path(path: str | Path, limit: int = 300) -> str:
    """A path for an error message: whole when short, else its start and end (a 5,000-character name)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def read_yaml(path: str | Path) -> Any:
    """The YAML document in `path`, bounded in size, depth and alias expansion; ConfigError otherwise."""
    p = Path(path)
    name = short_path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {name}") from None
    except (OSError, ValueError) as e:  # a name too long, a NUL byte, no permission on a parent folder
        raise ConfigError(
            f"{name}: cannot read the config file ({getattr(e, 'strerror', None) or e})"
        ) from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{name}: is a folder, not a YAML file")
    if not stat.S_ISREG(info.st_mode):  # opening a FIFO blocks; /dev/zero never ends
        raise ConfigError(f"{name}: not a regular file (a pipe or a device?); give a YAML file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name}: {info.st_size} bytes; a config file may hold at most {MAX_CONFIG_BYTES}")
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)  # bounded even if the file grows while it is read
    except OSError as e:
        raise ConfigError(f"{name}: cannot read the config file ({e.strerror or e})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name}: more than {MAX_CONFIG_BYTES} bytes; a config file may hold at most that")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{name}: not UTF-8 text (byte {e.start})") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set(), 0, name)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{name}: nested deeper than {MAX_CONFIG_DEPTH} levels") from None
    finally:
        loader.dispose()


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def add_config_arguments(
    parser: argparse.ArgumentParser, cls: type[BaseModel], prefix: str = "", defaults: Any = None
) -> None:
    """Add one flag per field of `cls` (recursing into nested models) to `parser`.

    Fields marked `json_schema_extra={"positional": True}` become positional arguments. `defaults` is the
    enclosing field's default instance, so a nested flag's help shows the default its parent gives it
    (collect's `--rollout.temperature` is 1, not RolloutConfig's 0).
    """
    for name, info in cls.model_fields.items():
        annotation, _ = _unwrap_optional(info.annotation)
        dest = f"{prefix}{name}"
        default = None if info.is_required() else info.get_default(call_default_factory=True)
        if defaults is not None and hasattr(defaults, name):
            default = getattr(defaults, name)
        if _is_model(annotation):
            add_config_arguments(parser, annotation, prefix=f"{dest}.", defaults=default)
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        described = _help_from(extra["help_from"]) if extra.get("help_from") else info.description or ""
        help_text = described.replace("%", "%%")
        if info.is_required() and not extra.get("positional"):
            help_text += " (required)"
        elif default not in (None, "", [], ()) and not extra.get("positional"):
            shown = default.value if hasattr(default, "value") else default
            help_text += f" (default: {shown})"
        kwargs: dict[str, Any] = {"help": help_text, "default": argparse.SUPPRESS}
        origin = typing.get_origin(annotation)
        if annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif origin in (list, tuple):
            kwargs["nargs"] = "+" if not extra.get("positional") else "*"
            if not extra.get("positional"):
                kwargs["action"] = "extend"  # `--gold a --gold b` accumulates, like `--gold a b`
        elif origin is Literal:
            kwargs["choices"] = [str(c) for c in typing.get_args(annotation)]
        if extra.get("positional"):
            # Optional on the command line so that a YAML file may supply it; pydantic still requires it.
            kwargs["metavar"] = name.upper()
            kwargs["nargs"] = "*" if kwargs.get("nargs") else "?"
            parser.add_argument(dest, **kwargs)
        else:
            flag = "--" + dest.replace("_", "-")
            parser.add_argument(flag, dest=dest, **kwargs)


def _help_from(target: str) -> str:
    """A flag's help text from `module:function` (a field's `json_schema_extra={"help_from": ...}`): for
    texts that list a registry's names, read when the parser is built, so a registry in a module that imports
    torch is not imported with the config."""
    module, _, name = target.partition(":")
    return str(getattr(importlib.import_module(module), name)())


def _not_a_group(dotted: str, keys: list[str], depth: int, inner: Any, where: str) -> ConfigError:
    """The error for a group given a value that is not a mapping (`policy: 5`) while a flag sets a field
    inside it (`--policy.model`), instead of a TypeError."""
    name = ".".join(keys[: depth + 1])
    return ConfigError(
        f"{where}: {name} is {short_repr(inner)}, but --{dotted.replace('_', '-')} sets a field "
        f"inside it; write {name} as a mapping of its fields"
    )


def _set_dotted(data: dict[str, Any], dotted: str, value: Any, where: str = "the config") -> None:
    """Set `data[a][b]... = value` for the flag `--a.b...` (`_not_a_group` when a level is not a mapping)."""
    keys = dotted.split(".")
    for depth, key in enumerate(keys[:-1]):
        inner = data.setdefault(key, {})
        if not isinstance(inner, dict):
            raise _not_a_group(dotted, keys, depth, inner, where)
        data = inner
    data[keys[-1]] = value


def _check_group(data: dict[str, Any], dotted: str, where: str) -> None:
    """`_not_a_group` when the file gives a group of `--a.b...` a value that is not a mapping."""
    keys = dotted.split(".")
    for depth, key in enumerate(keys[:-1]):
        inner = data.get(key)
        if inner is None:
            return
        if not isinstance(inner, dict):
            raise _not_a_group(dotted, keys, depth, inner, where)
        data = inner


def load_config(
    cls: type[Config],
    path: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    source: str = "code",
) -> Config:
    """`cls` from an optional YAML file and dotted overrides (`source`: `flag` from the command line, else
    `code`), resolved by `resolve`; ConfigError naming bad fields."""
    data: dict[str, Any] = {}
    where = "command line"
    if path is not None:
        where = short_path(path)
        try:
            loaded = read_yaml(path)
        except yaml.YAMLError as e:
            problem = str(e) if len(str(e)) <= 600 else str(e)[:597] + "..."  # it quotes the line
            raise ConfigError(f"{where}: not valid YAML: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{where}: the top level must be a mapping of field names to values")
        data = loaded or {}
    given: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(given, dotted, value, where)
        _check_group(data, dotted, where)
    return resolve(cls, [("file", data), (source, given)], where)


def config_from_args(cls: type[Config], args: argparse.Namespace) -> Config:
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    return load_config(cls, getattr(args, "config", None), overrides, source="flag")


# ---------------------------------------------------------------------------------------------- resolving


def resolve(cls: type[Config], given: Iterable[Layer], where: str = "command line") -> Config:
    """The one resolver of every command's settings: field defaults < `cls.layers` (profile, recipe, preset)
    < `given` (config file, then flags), merged as plain mappings, validated once; the model keeps each
    value's source (`sources_of`). ConfigError naming `where` and each bad field."""
    merged, sources = layered(cls, list(given))
    try:
        model = cls.model_validate(merged, context={LAYERED: cls})
    except ValidationError as e:
        lines = [f"{where}: invalid config for {cls.__name__}:"]
        for err in e.errors():  # a missing field's input is the whole mapping around it: not printed
            field = ".".join(str(p) for p in err["loc"])
            got = f" (got {short_repr(err.get('input'))})" if err["type"] != "missing" else ""
            lines.append(f"  {as_given(field, sources, cls)}: {err['msg'] if got else 'required'}{got}")
        raise ConfigError("\n".join(lines)) from None
    model._sources = sources
    return model


def versions() -> dict[str, str]:
    """Versions of the libraries a run's results depend on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("ragteam", "torch", "transformers", "trl", "sentence-transformers", "tantivy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def save_resolved(cfg: BaseModel, out_dir: str | Path, command: str, team: dict | None = None) -> Path:
    """Write `config.yaml` (the full resolved config, command, versions and the working folder that its relative
    paths start from) into `out_dir`; `team`: where a team from outside ragteam comes from, its package's
    version included (`workflows.registry.workflow_package`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    doc = {
        "command": command,
        "config": cfg.model_dump(mode="json"),
        "sources": sources_of(cfg),  # where each value came from: default, profile, recipe, file, flag...
        "versions": versions(),
        "cwd": os.getcwd(),
    }
    if team:
        doc["team"] = team
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def ragteam_home() -> Path:
    """The one per-user folder for caches (converted models, pooled corpora, indexes): `$RAGTEAM_HOME`, else
    the platform's cache folder (`default_home`). Per user, not per working directory: a run started in
    another folder reuses the converted SmolLM2 and the indexes instead of building them again."""
    raw = os.environ.get("RAGTEAM_HOME")
    home = Path(raw).expanduser().resolve() if raw else default_home()
    home.mkdir(parents=True, exist_ok=True)
    return home


def default_home(env: Mapping[str, str] | None = None, system: str | None = None) -> Path:
    """The platform's per-user cache folder for ragteam: `$XDG_CACHE_HOME/ragteam` or `~/.cache/ragteam`
    (Linux and other Unix), `~/Library/Caches/ragteam` (macOS), `%LOCALAPPDATA%\\ragteam\\Cache` (Windows)."""
    env = os.environ if env is None else env
    system = sys.platform if system is None else system
    if system == "win32" and env.get("LOCALAPPDATA"):
        return Path(env["LOCALAPPDATA"]) / "ragteam" / "Cache"
    if system == "darwin":
        return Path.home() / "Library" / "Caches" / "ragteam"
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "ragteam"


def setup_caches() -> None:
    """Point Hugging Face and other library caches inside ragteam's working folder, and go offline."""
    home = ragteam_home()
    os.environ.setdefault("HF_HOME", str(home / "hf"))
    os.environ.setdefault("HF_DATASETS_CACHE", str(home / "hf" / "datasets"))
    os.environ.setdefault("WANDB_DIR", str(home / "wandb"))
    os.environ.setdefault("MPLCONFIGDIR", str(home / "matplotlib"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no "Loading weights" bar per model load
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# Library notices a user of the CLI cannot act on: deprecations inside the libraries (transformers'
# "`past_key_values` is deprecated" on every forward pass), and transformers' / datasets' warnings about
# their own internals ("Token indices sequence length is longer than ...": ragteam fits prompts itself).
_QUIET_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_QUIET_LOGGERS = ("TRANSFORMERS_VERBOSITY", "DATASETS_VERBOSITY")


# The library notices ragteam's own calls trigger, which a user of the Python API cannot act on either:
# transformers' deprecation of the `past_key_values` argument our decoders pass, once per forward pass as a
# FutureWarning and once as a log line. Quieted by message, so the user's own warnings stay as they are.
_OWN_NOTICES = ("`past_key_values` is deprecated", "`past_key_values`/`cache_params` are deprecated")


class _DropOwnNotices:
    """A logging filter dropping `_OWN_NOTICES` (added to transformers' handlers)."""

    def filter(self, record) -> bool:
        return not any(m in record.getMessage() for m in _OWN_NOTICES)


def quiet_own_notices() -> bool:
    """Keep the notices in `_OWN_NOTICES` out of a Python API user's terminal (the CLI hides them with the
    rest, `quiet_libraries`); nothing is hidden under `python -W ...`, `PYTHONWARNINGS` or
    `RAGTEAM_LIBRARY_WARNINGS=1`. True when quieted."""
    import logging
    import re
    import sys
    import warnings

    if sys.warnoptions or os.environ.get("RAGTEAM_LIBRARY_WARNINGS", "") not in ("", "0"):
        return False
    for message in _OWN_NOTICES:
        warnings.filterwarnings("ignore", message=re.escape(message), category=FutureWarning)
    import transformers  # noqa: F401  (its logger and handler exist once imported)

    for handler in logging.getLogger("transformers").handlers:
        if not any(isinstance(f, _DropOwnNotices) for f in handler.filters):
            handler.addFilter(_DropOwnNotices())
    return True


def quiet_libraries() -> bool:
    """Keep the dependencies' deprecation notices and internal warnings out of the terminal, in this one place
    at CLI start; progress bars and ragteam's own messages stay. Nothing is hidden when the user asks for
    warnings (`python -W ...`, `PYTHONWARNINGS`) or sets `RAGTEAM_LIBRARY_WARNINGS=1`. True when quieted."""
    import sys
    import warnings

    if sys.warnoptions or os.environ.get("RAGTEAM_LIBRARY_WARNINGS", "") not in ("", "0"):
        return False
    for category in _QUIET_CATEGORIES:
        warnings.filterwarnings("ignore", category=category)
    for name in _QUIET_LOGGERS:
        os.environ.setdefault(name, "error")  # read when the library is imported
    if "transformers" in sys.modules:  # already imported (ragteam used from Python, then the CLI)
        sys.modules["transformers"].logging.set_verbosity_error()
    return True
