"""The package's shape, checked on every run: no import cycles, imports only point down the layers of
docs/architecture.md, no module over 500 lines.

Every module under src/ragteam is parsed with `ast` (nothing is imported) and every `import ragteam...` /
`from ragteam... import ...` in it is collected: at the top, inside functions (lazy imports) and under
`if TYPE_CHECKING:` alike, since each names a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "ragteam"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

LAYERS: list[tuple[str, ...]] = [
    ("__init__", "api", "cli", "demo"),  # the public API and the commands
    ("eval", "collect", "train", "serve"),  # entry points: eval runs, training data, trainers, servers
    ("assemble",),  # run assembly: a team from its config; the resumable trace folder
    ("credit", "stats"),  # pure functions over episode trees: node rewards; statistics and tests
    ("rollout",),  # the engine, forks, keep-one-of-N, fitting prompts, the tree and its traces
    ("workflows",),  # the teams: roles, prompts, parsers, control flow; each paper's settings
    ("protocol", "depth"),  # what a workflow declares and yields; how its depth is counted
    ("retrieval", "llm", "metrics", "data"),  # backends, answer metrics, benchmark readers
    ("config", "types", "outdir", "allocator"),  # typed configs, data types, the folder guard, malloc
    ("precedence",),  # settings precedence: layers of mappings merged, each value's source kept
]
"""ragteam's layers, top first, as docs/architecture.md draws them: a module may import modules of its own
layer (when that makes no cycle) and of the layers below it, never above. Names are top-level modules or
packages of `ragteam` (`__init__` is the package's own `__init__.py`)."""

MAX_LINES = 500

OVER_500_ALLOWED: dict[str, str] = {
    # Modules over MAX_LINES that another helper is splitting right now. The lead empties this list once
    # they land; a module not listed here fails the size test.
}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` refers to: itself, or the nearest package or module above it that exists."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import of a ragteam module by a ragteam module (module-level, lazy, TYPE_CHECKING alike)."""
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from pkg import sub` imports the module pkg.sub; `from mod import name`, mod itself
                targets = [
                    f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names
                ]
            for target in targets:
                if target == "ragteam" or target.startswith("ragteam."):
                    resolved = _resolve(target, modules)
                    if resolved is not None and resolved != name:
                        edges.append(Edge(name, resolved, node.lineno))
    return edges


def _layer_of(module: str) -> int | None:
    """The index in LAYERS of the module's top-level name (`ragteam` itself is `__init__`)."""
    top = module.split(".")[1] if "." in module else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    return None


def _cycles(modules: dict[str, Path], edges: list[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    edges = _edges(modules)
    cycles = _cycles(modules, edges)
    shown = []
    for component in cycles:
        inside = set(component)
        links = sorted(
            f"{e.source} -> {e.target} (line {e.line})"
            for e in edges
            if e.source in inside and e.target in inside
        )
        shown.append(f"{', '.join(component)}:\n    " + "\n    ".join(links))
    assert not cycles, "import cycles (lazy imports included):\n" + "\n".join(shown)


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in _modules() if _layer_of(m) is None)
    assert not missing, (
        f"modules in no layer: {missing}; add their top-level name to LAYERS here and to the layer table of "
        "docs/architecture.md"
    )


def test_imports_point_down_the_layers() -> None:
    modules = _modules()
    upward = []
    for e in _edges(modules):
        src_layer, dst_layer = _layer_of(e.source), _layer_of(e.target)
        if src_layer is not None and dst_layer is not None and dst_layer < src_layer:
            path = modules[e.source].relative_to(ROOT)
            upward.append(
                f"{path}:{e.line}: {e.source} ({' · '.join(LAYERS[src_layer])}) imports {e.target} "
                f"({' · '.join(LAYERS[dst_layer])}, a higher layer)"
            )
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_no_module_over_500_lines() -> None:
    sizes = {
        str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
        for p in PACKAGE.rglob("*.py")
    }
    over = sorted(
        f"{name} ({n} lines)" for name, n in sizes.items() if n > MAX_LINES and name not in OVER_500_ALLOWED
    )
    assert not over, f"modules over {MAX_LINES} lines (split them along their concerns): {over}"
    stale = sorted(name for name in OVER_500_ALLOWED if sizes.get(name, 0) <= MAX_LINES)
    assert not stale, f"OVER_500_ALLOWED lists modules that are {MAX_LINES} lines or fewer now: drop {stale}"


def test_the_architecture_doc_draws_these_layers() -> None:
    """docs/architecture.md's layer block lists the same names, row by row, as LAYERS."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"## Layers.*?```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ``` block under its '## Layers' heading"
    rows = []
    for line in block.group(1).splitlines():
        if line and not line[0].isspace():  # a row starts at column 0; its description may wrap, indented
            names = re.split(r"\s{2,}", line, maxsplit=1)[0]
            rows.append(tuple(n.strip() for n in names.split("·")))
    assert rows == LAYERS, f"docs/architecture.md's layers {rows} differ from tests/test_layers.py's {LAYERS}"


def test_the_architecture_doc_lists_every_module() -> None:
    """docs/architecture.md's file list names every module under src/ragteam (a subpackage's `__init__.py`
    left out), and nothing else."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    block = re.search(r"## Files.*?```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ``` block under its '## Files' heading"
    listed: set[str] = set()
    folder = ""
    for line in block.group(1).splitlines():
        if line and not line[0].isspace():  # a folder's row; its files may wrap onto indented lines
            folder, _, line = line.partition(" ")
            folder = "" if folder == "ragteam/" else folder
        listed.update(folder + name for name in line.split())
    actual = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" or p.parent == PACKAGE
    }
    assert listed == actual, (
        f"docs/architecture.md's file list is stale: add {sorted(actual - listed)}, drop {sorted(listed - actual)}"
    )
