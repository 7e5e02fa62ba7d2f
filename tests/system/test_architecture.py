"""The house rules of ``src/tilescope`` (docs/architecture.md): imports go one way, from the base
up through the rooms, and no import cycle exists — counting imports inside functions and under
``TYPE_CHECKING`` — and no module grows past the size a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tilescope

PACKAGE = Path(tilescope.__file__).resolve().parent

# The rooms, lowest first. A module may import its own room and any room below it; rooms on one
# row are siblings and never import each other. The package root (the ``tilescope`` facade)
# and ``cli`` sit on top, under ``__main__`` (``python -m tilescope``).
BASE = ("_version", "errors", "_logging", "knobs", "_tracebacks")  # one room: the modules every room may use
LAYERS: list[tuple[str, ...]] = [
    ("base",),
    ("ir",),
    ("language",),
    ("passes",),
    ("codegen",),
    ("toolchain",),
    ("build",),
    ("runtime",),
    ("debug",),
    ("launch",),
    ("analysis",),
    ("harness", "tools"),
    ("agents",),
    ("cli", "__init__"),
    ("__main__",),
]
ROOM_LEVEL = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}
MAX_LINES = 600  # per module, Python and C++ alike
# Modules still over MAX_LINES, with the reason they have not been split yet. Keep it short.
OVERSIZED: dict[str, str] = {}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> list[tuple[str, int]]:
    """Every tilescope module ``path`` imports (anywhere in the file), with its line."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "tilescope"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "tilescope":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in known else base, node.lineno))
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return "base" if parts[1] in BASE else parts[1]


def _graph() -> tuple[dict[str, Path], dict[str, set[str]], list[str]]:
    modules = _modules()
    known = set(modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    upward = []
    for name, path in modules.items():
        src_room = _room(name)
        for target, line in _imports(path, name, known):
            if target not in known:
                continue  # an attribute of a package (e.g. `from tilescope import __version__`)
            if target == name:
                continue
            edges[name].add(target)
            dst_room = _room(target)
            if dst_room == src_room:
                continue
            src_level, dst_level = ROOM_LEVEL[src_room], ROOM_LEVEL[dst_room]
            if dst_level > src_level or (dst_level == src_level and dst_room != src_room):
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: {src_room} imports {target} ({dst_room})"
                )
    return modules, edges, upward


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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


def test_every_room_is_placed_in_the_order():
    rooms = {_room(m) for m in _modules()}
    assert rooms <= set(ROOM_LEVEL), (
        f"rooms missing from LAYERS (and docs/architecture.md): {rooms - set(ROOM_LEVEL)}"
    )


def test_no_import_goes_against_the_direction():
    _, _, upward = _graph()
    assert not upward, "imports against the direction (docs/architecture.md):\n  " + "\n  ".join(upward)


def test_no_import_cycle():
    _, edges, _ = _graph()
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n  " + "\n  ".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_what_it_must():
    """The walker itself: an import inside a function and one under TYPE_CHECKING are edges, a
    relative import resolves, and a cycle and an upward import are caught."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tilescope.launch.program import CompiledProgram\n"
        "def f():\n    from . import records\n"
    )
    path = PACKAGE / "runtime" / "graph.py"
    tree_imports = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            tree_imports.add((node.module, node.level))
    assert ("tilescope.launch.program", 0) in tree_imports and (None, 1) in tree_imports
    fake = path.with_name("_probe_imports.py")
    fake.write_text(source)
    try:
        found = {m for m, _ in _imports(fake, "tilescope.runtime._probe_imports", set(_modules()))}
    finally:
        fake.unlink()
    assert {"tilescope.launch.program", "tilescope.runtime.records"} <= found
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("suffix", [".py", ".cpp", ".hpp", ".h"])
def test_no_module_is_oversized(suffix):
    too_long = []
    for path in sorted(PACKAGE.rglob(f"*{suffix}")):
        rel = str(path.relative_to(PACKAGE))
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and rel not in OVERSIZED:
            too_long.append(f"{rel}: {n} lines")
    assert not too_long, f"modules over {MAX_LINES} lines (split them by responsibility):\n  " + "\n  ".join(
        too_long
    )


def test_the_oversized_list_only_holds_oversized_modules():
    stale = [rel for rel in OVERSIZED if len((PACKAGE / rel).read_text().splitlines()) <= MAX_LINES]
    assert not stale, f"no longer over {MAX_LINES} lines: drop them from OVERSIZED: {stale}"


def test_no_module_name_is_in_two_rooms():
    # a name says what a module is: `run.py` in two folders, or `trace.py` for both the observer
    # that writes trace.json and the viewer that reads it, leaves a reader to guess which is meant
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            where.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"module names in more than one folder (name each for what it is): {twice}"
