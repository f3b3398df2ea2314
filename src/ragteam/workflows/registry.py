"""The workflows by name: a registry that commands build from, open to teams written outside the package.

A name resolves, in this order, to

1. a registered factory (`register_workflow(name, factory)`: the built-in ten below, or a team registered
   by code that ran before the command built it);
2. an installed package's entry point in the group `ragteam.workflows` (its `pyproject.toml`:
   `[project.entry-points."ragteam.workflows"] search-r1 = "search_r1.workflow:SearchR1"`), loaded the
   first time the name is built, listed by name in every command's `--help` without being imported;
3. `package.module:ClassName`: imported from the module path (the module must be importable: installed,
   or on `PYTHONPATH`); it must be a `Workflow` subclass or a Python function outside the standard
   library, checked before it is called (`os:system` is refused, never run).

A factory is anything called with the workflow's options that returns a `Workflow`: a `Workflow` subclass
whose `__init__(cfg)` takes them, or a function. The options are an instance of the class the Workflow declares
as its `Options` (`workflow_options`: a `WorkflowConfig` subclass in its package), else a `WorkflowConfig`. A name that resolves to nothing, a module that fails to
import or an attribute it lacks is a one-line ValueError naming it (the CLI prints it as `ragteam: error:`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from functools import cache, partial
from importlib.metadata import EntryPoint, entry_points
from typing import TypeAlias, TypeVar

from ragteam.precedence import merge_layers, only_fields
from ragteam.protocol import Workflow
from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import AGENTS, GymAgent
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.setting import Presets, nested

__all__ = [
    "ENTRY_POINT_GROUP",
    "WORKFLOWS",
    "WorkflowFactory",
    "build_workflow",
    "register_workflow",
    "workflow_help",
    "workflow_names",
    "workflow_options",
    "workflow_package",
    "options_of",
    "workflow_presets",
    "with_options",
]

WorkflowFactory: TypeAlias = Callable[[WorkflowConfig], Workflow]
"""What a name builds from: called with the run's workflow options, returns the configured workflow."""

F = TypeVar("F", bound=WorkflowFactory)
C = TypeVar("C", bound=WorkflowConfig)

ENTRY_POINT_GROUP = "ragteam.workflows"
"""The entry-point group an installed package declares its teams in (name = "package.module:Factory")."""

_FACTORIES: dict[str, WorkflowFactory] = {}

WORKFLOWS: list[str] = []
"""Every registered workflow name, in the order commands list them (the built-in ones first)."""


def register_workflow(name: str, factory: F | None = None) -> F | Callable[[F], F]:
    """Register `factory` under `name` (once), so `--workflow NAME` builds it; returns the factory.

    Without `factory` it is a decorator: `@register_workflow("search-r1")` above a Workflow class. Register
    at import time of a module the run imports (or declare an entry point, which needs no import)."""

    def deco(fn: F) -> F:
        if not name.strip():
            raise ValueError("a workflow name may not be empty")
        if name in _FACTORIES:
            raise ValueError(f"workflow {name!r} is already registered ({_FACTORIES[name]!r})")
        _FACTORIES[name] = fn
        WORKFLOWS.append(name)
        return fn

    return deco(factory) if factory is not None else deco


for _name, _factory in (("direct", Direct), ("standard-rag", StandardRAG), ("c3po", C3PO), ("mmoa", MMOA)):
    register_workflow(_name, _factory)
for _agent in AGENTS:
    register_workflow(f"gym:{_agent}", partial(GymAgent, agent=_agent))


def _entry_points() -> dict[str, EntryPoint]:
    """The installed packages' workflows by name (a registered name wins over an entry point's)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _FACTORIES}


def workflow_names() -> list[str]:
    """Every name `build_workflow` knows without a module path: registered ones, then installed ones."""
    return [*WORKFLOWS, *sorted(_entry_points())]


def workflow_help(what: str = "workflow") -> str:
    """A `--workflow` option's description: `what`, then the names this install knows (registered and
    installed), so `--help` lists a package's teams as soon as it is installed; a command that runs one team
    also says that naming it lists its own options."""
    names = f"{what}: {', '.join(workflow_names())}, or package.module:ClassName (a Workflow of your own)"
    return names + ("; --workflow NAME --help lists that team's own options" if what == "workflow" else "")


def workflow_package(name: str) -> dict[str, str | None] | None:
    """Where the team `name` comes from, for a run's config.yaml: its module, and the installed distribution
    that holds it with its version (`package`/`version` None for a module on PYTHONPATH, with its `file`);
    None for ragteam's own teams (ragteam's version is already recorded) and names that resolve to nothing."""
    import sys
    from importlib.metadata import PackageNotFoundError, packages_distributions, version

    if name in _FACTORIES:
        factory = _FACTORIES[name]
        module = getattr(getattr(factory, "func", factory), "__module__", "") or ""
    elif name in (installed := _entry_points()):
        module = installed[name].value.partition(":")[0]
    elif ":" in name:
        module = name.partition(":")[0]
    else:
        return None
    top = module.split(".")[0]
    if not top or top == "ragteam":
        return None
    for dist in packages_distributions().get(top, []):
        try:
            return {"module": module, "package": dist, "version": version(dist)}
        except PackageNotFoundError:
            continue
    file = getattr(sys.modules.get(module), "__file__", None)
    return {"module": module, "package": None, "version": None, "file": file}


def workflow_options(name: str) -> type[WorkflowConfig]:
    """The options class the team `name` declares (the `Options` attribute of its Workflow class: a
    `WorkflowConfig` subclass with fields of its own, such as MMOA-RAG's `candidates` or Search-R1's
    `max_turns`), else `WorkflowConfig`; also for a name that resolves to nothing (building it reports that)."""
    try:
        factory = _factory(name)
    except ValueError:
        return WorkflowConfig
    options = getattr(getattr(factory, "func", factory), "Options", None)
    return options if isinstance(options, type) and issubclass(options, WorkflowConfig) else WorkflowConfig


def workflow_presets(name: str) -> Presets:
    """The rows of each profile the team `name` states (the `presets` of its Workflow class, in its package:
    `workflows/<paper>/options.py`); none for a team that states none or a name that resolves to nothing,
    whose own defaults then hold under every profile."""
    try:
        factory = _factory(name)
    except ValueError:
        return {}
    presets = getattr(getattr(factory, "func", factory), "presets", None)
    return presets if isinstance(presets, dict) else {}


def with_options(cls: type[C], name: str) -> type[C]:
    """A command's config class `cls` with the options team `name` declares (`workflow_options`), flat, as
    the command's flags (`--candidates`, `--max-turns`); `cls` itself when the team declares none it lacks,
    or when `cls` already holds a team's options (a class is combined with one options class, once)."""
    options = workflow_options(name)
    if set(options.model_fields) <= set(cls.model_fields) or options_of(cls) is not None:
        return cls
    return _combined(cls, options)


def options_of(cls: type) -> type[WorkflowConfig] | None:
    """The options class `with_options` combined `cls` with; None for a class it did not make."""
    return cls.__dict__.get("__workflow_options__")


@cache
def _combined(cls: type[C], options: type[WorkflowConfig]) -> type[C]:
    attrs = {
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
        "__reduce__": _reduce,
        "__workflow_options__": options,
    }
    return type(cls.__name__, (cls, options), attrs)


def _reduce(cfg: WorkflowConfig) -> tuple:
    """How a config of a combined class pickles: by its two classes and its values."""
    base, options = type(cfg).__bases__
    return _rebuilt, (base, options, cfg.model_dump())


def _rebuilt(base: type[C], options: type[WorkflowConfig], values: dict) -> C:
    return _combined(base, options).model_validate(values)


def build_workflow(name: str, cfg: WorkflowConfig | None = None) -> Workflow:
    """The workflow called `name`, configured by `cfg` (its options class, else the fields of `cfg` it
    declares, the others at their defaults); a one-line ValueError naming what failed otherwise."""
    cfg = with_profile(workflow_options(name).of(cfg), name)
    workflow = _factory(name)(cfg)
    if not isinstance(workflow, Workflow):
        raise ValueError(
            f"workflow {name!r} built a {type(workflow).__name__}, not a ragteam.Workflow (subclass "
            "ragteam.Workflow and take the WorkflowConfig as the constructor's argument)"
        )
    return workflow


def _factory(name: str) -> WorkflowFactory:
    """The factory of a registered name, an entry point or a `module:attribute` path."""
    if name in _FACTORIES:
        return _FACTORIES[name]
    installed = _entry_points()
    if name in installed:
        return _load(name, installed[name].value, f"entry point {name!r} of group {ENTRY_POINT_GROUP!r}")
    if ":" in name:
        return _load(name, name, None)
    raise ValueError(f"unknown workflow {name!r}; {_choices()}")


def _load(name: str, target: str, origin: str | None) -> WorkflowFactory:
    """Import `module:attribute` (`target`); `origin` names where the path came from (an entry point)."""
    module_name, _, attr = target.partition(":")
    where = f"{origin} ({target})" if origin else f"workflow {name!r}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if origin is None and (module_name == missing or module_name.startswith(missing + ".")):
            raise ValueError(
                f"unknown workflow {name!r}: no module {missing!r} to import it from; {_choices()}"
            ) from None
        raise ValueError(f"{where}: module {module_name!r} failed to import: {_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 (any error while importing user code is reported, one line)
        raise ValueError(f"{where}: module {module_name!r} failed to import: {_one_line(e)}") from None
    obj: object = module
    for part in attr.split(".") if attr else ():
        if not hasattr(obj, part):
            raise ValueError(f"{where}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not attr or not callable(obj):
        raise ValueError(
            f"{where}: {target!r} is not a Workflow class or factory (give package.module:ClassName)"
        )
    if origin is None and not _may_build(obj):
        # a path typed on the command line is checked before anything is called (`os:system` would run)
        raise ValueError(
            f"{where}: {target!r} is a {type(obj).__name__}, not a ragteam.Workflow subclass or a factory "
            "function of your own (give package.module:ClassName)"
        )
    return obj  # type: ignore[return-value]


def _may_build(obj: object) -> bool:
    """Whether a `module:attribute` path may be called to build a workflow: a Workflow subclass, or a function
    written in Python outside the standard library (a factory of one's own). Builtins (`os:system`), other
    classes and the standard library's functions (`subprocess:run`) are never called."""
    if isinstance(obj, type):
        return issubclass(obj, Workflow)
    module = getattr(obj, "__module__", None) or ""
    return inspect.isfunction(obj) and module.partition(".")[0] not in sys.stdlib_module_names


def _one_line(e: BaseException) -> str:
    """An exception as `Type: message` on one line (a SyntaxError names its file and line)."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"SyntaxError: {e.msg} ({e.filename}, line {e.lineno})"
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _choices() -> str:
    return f"choose one of: {', '.join(workflow_names())}, or give package.module:ClassName"


def with_profile(cfg: WorkflowConfig, name: str) -> WorkflowConfig:
    """`cfg` with its profile's options for `name` under the ones it was given: a command's config has them
    already (its profile layer knows the workflow); a bare `WorkflowConfig(profile="paper")` built in code
    names no workflow, so they are layered here, by the same resolver."""
    given = cfg.model_dump(exclude_unset=True)
    profile = only_fields(type(cfg), nested(workflow_presets(name).get(cfg.profile, ())))
    merged, _ = merge_layers([("profile", profile), ("code", given)])
    return type(cfg).model_validate(merged) if merged != given else cfg
