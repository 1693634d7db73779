"""The floor plan of the one package: no import circles, and no import from a lower floor to a higher one.

Floors, from the ground up (docs/architecture.md): the shared pieces and the record contract;
the event log service; the source, the sink and the worker (its pure core below its faust
runtime); operating a running pipeline; the local launchers and tools; the CLI. A module may import
its own part and anything on a lower floor; the three services never import one another. The
commands a deployment runs (the services, and status, errors, replay, explain) reach no local
launcher, even through the CLI.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = REPO / "olstream"

# (prefix, floor); the longest matching prefix names a module's part
PARTS = (
    ("olstream.shared", 0),
    ("olstream.contract", 1),
    ("olstream.eventlog", 2),
    ("olstream.connectors", 3),
    ("olstream.connectors.source", 3),
    ("olstream.connectors.sink", 3),
    ("olstream.streams", 3),
    ("olstream.streams.runtime", 4),
    ("olstream.operations", 5),
    ("olstream.devkit", 6),  # the local launchers and tools (demo, graph): never below them
    ("olstream.cli", 7),
    ("olstream.__main__", 7),
)
ROOT_MODULE = ("olstream", 0)  # the package's own __init__: __version__ only
SERVICES = ("olstream.connectors.source", "olstream.connectors.sink", "olstream.streams")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    name = ".".join(parts)
    return name.removesuffix(".__init__")


def modules() -> dict[str, Path]:
    found = {}
    # followlinks: olstream/connectors and olstream/streams are symlinks to the top-level folders
    for root, _dirs, files in os.walk(PACKAGE, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                path = Path(root) / name
                found[module_name(path)] = path
    assert "olstream.streams.runtime.agent" in found and "olstream.connectors.sink.sink" in found
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every olstream module `path` imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in known:
                out.add(name)
    return out


def part_of(module: str) -> tuple[str, int]:
    """The part a module belongs to (the longest matching prefix); a KeyError for a module of none."""
    if module == ROOT_MODULE[0]:
        return ROOT_MODULE
    matches = [p for p in PARTS if module == p[0] or module.startswith(p[0] + ".")]
    if not matches:
        raise KeyError(f"{module} is on no floor: add its folder to PARTS (and to docs/architecture.md)")
    return max(matches, key=lambda p: len(p[0]))


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports_of(p, known) - {m} for m, p in mods.items()}


def upward_imports(g: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, deps in sorted(g.items()):
        part, floor = part_of(module)
        for dep in sorted(deps):
            dep_part, dep_floor = part_of(dep)
            if dep_floor > floor:
                problems.append(f"{module} (floor {floor}) imports {dep} (floor {dep_floor})")
            service = next((s for s in SERVICES if part.startswith(s)), None)
            dep_service = next((s for s in SERVICES if dep_part.startswith(s)), None)
            if service and dep_service and service != dep_service:
                problems.append(f"{module} imports {dep}: services do not import one another")
    return problems


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_every_module_belongs_to_a_floor() -> None:
    for module in modules():
        part_of(module)
    with pytest.raises(KeyError, match="on no floor"):
        part_of("olstream.newfolder.thing")


def test_no_import_goes_up_a_floor_or_across_services() -> None:
    assert upward_imports(graph()) == []


RUNTIME_COMMANDS = (
    "olstream.cli.source",
    "olstream.cli.worker",
    "olstream.cli.sink",
    "olstream.cli.log",
    "olstream.cli.status",
    "olstream.cli.errors",
    "olstream.cli.replay",
    "olstream.cli.explain",
)
"""The commands of a deployed pipeline: the services and the operations commands."""


def reachable(g: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for dep in g.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def launchers_reached(g: dict[str, set[str]]) -> dict[str, set[str]]:
    found = {c: {m for m in reachable(g, c) if part_of(m)[0] == "olstream.devkit"} for c in RUNTIME_COMMANDS}
    return {c: mods for c, mods in found.items() if mods}


def test_the_runtime_commands_import_no_local_launcher() -> None:
    g = graph()
    assert set(RUNTIME_COMMANDS) <= set(g)
    assert launchers_reached(g) == {}
    # and the check can fail
    g["olstream.cli.errors"] = g["olstream.cli.errors"] | {"olstream.devkit.settings"}
    assert "olstream.devkit.marquez" in launchers_reached(g)["olstream.cli.errors"]


def test_no_import_circles() -> None:
    assert cycles(graph()) == []


@pytest.mark.parametrize(
    ("g", "expect"),
    [
        ({"olstream.contract.codec": {"olstream.cli.main"}, "olstream.cli.main": set()}, "floor 1) imports"),
        (
            {"olstream.connectors.sink.sink": {"olstream.streams.state"}, "olstream.streams.state": set()},
            "services",
        ),
    ],
)
def test_the_floor_check_can_fail(g: dict[str, set[str]], expect: str) -> None:
    assert any(expect in p for p in upward_imports(g))


def test_the_circle_check_can_fail() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_modules_stay_under_about_400_lines() -> None:
    long = {
        m: n for m, p in modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450
    }
    assert long == {}, long
