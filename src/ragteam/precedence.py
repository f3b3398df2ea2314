"""Settings precedence, said once: layers of plain mappings merged in order, each value's source kept.

Every command resolves its settings as defaults < profile < recipe (or preset) < config file < flags
(`ragteam.config.resolve`): each layer is a mapping nested like the config, merged here key by key before
the one pydantic validation, and the source of every key is recorded so a run's config.yaml can say where
each value came from (`sources_of`). This module imports no ragteam code: the configs sit above it.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

Layer = tuple[str, Mapping[str, Any]]
"""One source of settings: its name (`default`, `profile`, `recipe`, `preset`, `file`, `flag`, `code`) and its
values, a plain mapping nested like the config (`{"ppo": {"lr": 3e-6}}`)."""


def layered(cls: Any, given: list[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """`given` over `cls`'s own layers (chosen from the merged `given`), as one mapping, and the source of
    each key the layers set (dotted; a key stands for everything under it)."""
    explicit, _ = merge_layers(given)
    return merge_layers([*cls.layers(explicit), *given])


def merge_layers(layers: Iterable[Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    """The layers merged, later over earlier: mappings merge key by key, anything else (a value, a list, a
    group given as a model object) replaces what is under it; and the source of each key set."""
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, data in layers:
        _merge_into(merged, data, source, sources, "")
    return merged, sources


def _merge_into(into: dict, data: Mapping, source: str, sources: dict[str, str], prefix: str) -> None:
    """Merge `data` into `into`, naming `source` for each value it sets (a mapping's own values, one by
    one, so a profile's `rollout:` group names the keys it states, not every field of the group)."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if not isinstance(into.get(key), dict):
                _forget(sources, dotted)
                into[key] = {}
            _merge_into(into[key], value, source, sources, dotted + ".")
            continue
        _forget(sources, dotted)
        into[key] = copy.deepcopy(value)
        sources[dotted] = source


def _forget(sources: dict[str, str], dotted: str) -> None:
    """Drop the sources recorded for `dotted` and everything under it (a later layer replaces them)."""
    for key in [k for k in sources if k == dotted or k.startswith(dotted + ".")]:
        del sources[key]


def only_fields(
    cls: type[BaseModel], data: Mapping[str, Any], fields: Mapping[str, Any] | None = None
) -> dict:
    """`data` without the keys `cls` has no field for (nested groups included): a profile states values for
    every command, each command takes those it has. `fields` narrows `cls.model_fields`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        info = (fields if fields is not None else cls.model_fields).get(key)
        if info is None:
            continue
        model = _model_of(info.annotation)
        out[key] = only_fields(model, value) if isinstance(value, Mapping) and model is not None else value
    return out


def sources_of(cfg: BaseModel) -> dict[str, str]:
    """Every resolved value's source, by dotted key: default, profile, recipe, preset, file, flag or code
    (a config built without `resolve` marks the fields it was given as code)."""
    recorded = getattr(cfg, "_sources", None) or {k: "code" for k in _set_keys(cfg)}
    out: dict[str, str] = {}
    for key in _leaf_keys(cfg):
        parts = key.split(".")
        found = (".".join(parts[:i]) for i in range(len(parts), 0, -1))
        out[key] = next((recorded[k] for k in found if k in recorded), "default")
    return out


def _leaf_keys(model: BaseModel, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            keys += _leaf_keys(value, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _set_keys(model: BaseModel, prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name in model.model_fields_set:
        value = getattr(model, name)
        keys += _set_keys(value, f"{prefix}{name}.") if isinstance(value, BaseModel) else [f"{prefix}{name}"]
    return keys


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model class a field holds (`RolloutConfig`, `RolloutConfig | None`), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if len(args) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def as_given(field: str, sources: Mapping[str, str], cls: Any) -> str:
    """A bad field named as the user wrote it: `--max-rounds` for a flag or a command's required field
    (`--workflow`), `max_rounds` for a key of a config file or a recipe."""
    spec = cls.model_fields.get(field)
    if sources.get(field) == "flag" or (spec is not None and spec.is_required() and field not in sources):
        return "--" + field.replace("_", "-")
    return field
