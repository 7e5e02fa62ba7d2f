"""Verified fix proposals (``tilescope triage BUILD --fix``): an edit of the DSL source, tried on a
copy of it, recompiled and re-run on the build's saved data before it is shown.

Invariants:
- The user's source is only read. Each candidate is written as a copy under
  ``dfx_outputs/triage/fix/`` (the source's directory stays importable), imported under a name of
  its own, compiled into ``dfx_outputs/triage/fix/builds/`` and run on the saved inputs; it is
  ``verified`` when every output is within the data's tolerances of the golden.
- The candidates come from the evidence (``debug.triage.fix``); the first that verifies is
  proposed, and every one tried is listed with why it failed. No candidate is an honest answer.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tilescope.build.paths import REPORT_DIR, TRIAGE_DIR, atomic_write, dfx_dir
from tilescope.debug.localize.metrics import close
from tilescope.debug.localize.report import LocalizeReport
from tilescope.debug.symbolize import dsl_file
from tilescope.debug.triage.fix import Edit, loop_bound_edits
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Store
from tilescope.ir.traverse import walk_stmts
from tilescope.launch.jit import JitFunction
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args

FIX_DIR = "fix"  # dfx_outputs/triage/fix/


def propose(build: CompiledProgram, rep: LocalizeReport, inputs: dict[str, Any], golden: dict[str, torch.Tensor],
            deadline: float) -> dict[str, Any]:  # fmt: skip
    """The ``fix`` of a triage report: ``{"edit", "verified", "comparison", "tried", "why_none"}``."""
    candidates, why = _candidates(build, rep)
    tried: list[dict[str, Any]] = []
    for edit in candidates:
        if time.perf_counter() > deadline:
            why = "the budget was spent before every candidate was tried"
            break
        ok, comparison = _verify(build, edit, inputs, golden, rep.rtol, rep.atol, len(tried))
        tried.append({**edit.as_dict(), "verified": ok, "result": comparison})
        if ok:
            return {"edit": edit.as_dict(), "verified": True, "comparison": comparison, "tried": tried}
    return {"edit": None, "verified": False, "tried": tried,
            "why_none": why or "no candidate edit made the outputs match the golden"}  # fmt: skip


def _candidates(build: CompiledProgram, rep: LocalizeReport) -> tuple[list[Edit], str]:
    """Edits worth trying for this report's category and culprit, and why there are none."""
    if rep.category == "pass":
        return [], "the build passes: there is nothing to fix"
    if rep.category != "uninitialized" or not rep.culprit.kernel:
        return [], f"no fix is proposed for category {rep.category!r} yet"
    found = _finding(build, rep.culprit.kernel)
    if found is None or not found.get("at"):
        return [], "the compile's coverage check named no store region for that kernel"
    path, _, line = found["at"].rpartition(":")
    source = dsl_file(path, str(build.work_dir / build.kernels[0]["source"]))
    try:
        text = source.read_text() if source is not None else None
    except OSError:
        text = None
    if text is None:
        return [], f"the DSL source {path} cannot be read"
    dim, size = _gap_dim(build, found)
    if dim is None:
        return [], "the unwritten region spans more than one dim of the store"
    loop_line = _enclosing_loop(text, int(line), dim)
    if loop_line is None:
        return [], f"no loop around {found['at']} steps the store's offset in dim {dim}"
    return loop_bound_edits(str(source), loop_line, text, found["shape"][dim], size), ""


def _finding(build: CompiledProgram, kernel: str) -> dict[str, Any] | None:
    try:
        data = json.loads((build.work_dir / REPORT_DIR / "report.json").read_text())
    except (OSError, ValueError):
        return None
    return next((u for u in data.get("unwritten", []) if u.get("kernel") == kernel), None)


def _gap_dim(build: CompiledProgram, found: dict[str, Any]) -> tuple[int | None, int]:
    """The one dim in which the unwritten boxes are a part of the param, and the store's size there."""
    shape = found["shape"]
    dims = {d for box in found["boxes"] for d, (lo, hi) in enumerate(box) if (lo, hi) != (0, shape[d])}
    if len(dims) != 1:
        return None, 0
    (dim,) = dims
    kernel = build.program().kernel(found["kernel"])
    stores = [s for s in walk_stmts(kernel.body) if isinstance(s, Store) and s.tensor.name == found["param"]]
    if not stores:
        return None, 0
    tile = tuple(stores[-1].value.type.shape)
    sizes = (1,) * (len(shape) - len(tile)) + tile
    return dim, sizes[dim]


def _enclosing_loop(text: str, store_line: int, dim: int) -> int | None:
    """The line of the innermost ``for`` around the ``ts.store`` on ``store_line`` whose variable
    appears in that store's offset for ``dim``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == store_line
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "store"), None)  # fmt: skip
    if call is None or len(call.args) < 2 or not isinstance(call.args[1], ast.List | ast.Tuple):
        return None
    offsets = call.args[1].elts
    if dim >= len(offsets):
        return None
    names = {n.id for n in ast.walk(offsets[dim]) if isinstance(n, ast.Name)}
    node: ast.AST | None = call
    while node is not None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id in names:
            return node.lineno
        node = parents.get(node)
    return None


def _verify(build: CompiledProgram, edit: Edit, inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
            atol: float, k: int) -> tuple[bool, str]:  # fmt: skip
    """Apply ``edit`` to a copy of its file, compile the program from it, run it on ``inputs``."""
    folder = dfx_dir(build.work_dir) / TRIAGE_DIR / FIX_DIR
    source = Path(edit.file)
    try:
        copy = folder / f"{source.stem}_fix{k}.py"
        atomic_write(copy, edit.apply(source.read_text()))
        jit = _load_program(copy, source.parent, build.name, k)
        compiled = jit.compile(build_dir=str(folder / "builds"), check_bounds=bool(build.runtime_config.get("check_bounds")))
        args = guarded_args([inputs[a.name] for a in compiled.args])
        compiled.run(*args, log_level="error")
    except (TilescopeError, OSError, ValueError, SyntaxError, ImportError) as e:
        return False, f"{type(e).__name__}: {str(e).splitlines()[0]}"
    got = {a.name: args[i] for i, a in enumerate(compiled.args) if a.is_output}
    bad = {n: int((~close(got[n], g, rtol, atol)).sum()) for n, g in golden.items() if n in got}
    if any(bad.values()):
        return False, "still outside tolerance: " + ", ".join(f"{n} ({c} elements)" for n, c in bad.items() if c)
    return True, "every output within tolerance of the golden: " + ", ".join(f"{n} ({golden[n].numel()} elements)"
                                                                             for n in golden)  # fmt: skip


def _load_program(path: Path, home: Path, name: str, k: int) -> JitFunction:
    """The ``@ts.jit`` program ``name`` of the module at ``path`` (imported under its own name,
    with ``home``, the original's directory, importable)."""
    spec = importlib.util.spec_from_file_location(f"_tilescope_fix_{path.stem}_{k}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(home))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(home))
    found = [v for v in vars(module).values() if isinstance(v, JitFunction) and v.name == name]
    if not found:
        raise ImportError(f"{path} has no @ts.jit program named {name!r}")
    return found[0]
