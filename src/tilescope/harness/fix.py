"""Verified fix proposals (``tilescope triage BUILD --fix``): an edit, tried on a copy, recompiled
and re-run on the build's saved data before it is shown.

Invariants:
- Nothing the user made is written. A DSL edit is made to a copy of the source under
  ``dfx_outputs/triage/fix/`` (the source's directory stays importable), imported under a name
  of its own and compiled into ``dfx_outputs/triage/fix/builds/``; an edit of the build's own
  files (hand-edited C++ restored to what the generator writes, or the IR dump when the DSL
  source is gone or changed since the build) is made to a copy of the build there.
- A candidate is ``verified`` when its run, isolated and under the budget's watchdog, puts every
  output within the data's tolerances of the golden. Candidates come from the evidence
  (``debug.triage.fix_rules``), smallest first within each rule; the first that verifies is
  proposed, and every one tried is listed with why it failed. No candidate is an honest answer.
- A precision verdict of ``innocent`` gets no kernel patch: the test-side change (the tolerance
  the data justify), checked on the saved data the same way.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope._logging import level_kept
from tilescope.build.manifest import Build
from tilescope.build.paths import DATA_DIR, DFX_DIR, IR_DIR, REPORT_DIR, TRIAGE_DIR, atomic_write, dfx_dir
from tilescope.build.state import hand_edited
from tilescope.codegen.orchestration_cpp import orchestration_cpp
from tilescope.debug.localize.metrics import close
from tilescope.debug.localize.report import LocalizeReport
from tilescope.debug.localize.source_map import (
    diff_lines,
    edited_lines,
    kernel_sites,
    orchestration_sites,
    submits,
)
from tilescope.debug.symbolize import dsl_file
from tilescope.debug.triage import fix_rules as rules
from tilescope.debug.triage.fix import Edit, Source, loop_bound_edits
from tilescope.errors import DSLError, TilescopeError
from tilescope.ir.nodes import Store
from tilescope.ir.traverse import walk_stmts
from tilescope.launch.jit import JitFunction
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args

FIX_DIR = "fix"  # dfx_outputs/triage/fix/
_OUT_READ = re.compile(r"kernel (?P<kernel>\w+): ts\.load reads the Out param '(?P<param>\w+)'")
MIN_RUN_S = 5.0  # the watchdog of a candidate's run never goes below this


@dataclass(frozen=True)
class Candidate:
    """An edit to try, and what it edits: ``dsl`` (the user's DSL file, by copy) or ``build`` (a
    file of the build, ``edit.file`` relative to it, by copy of the build)."""

    edit: Edit
    target: str


def propose(build: Build, rep: LocalizeReport, inputs: dict[str, Any], golden: dict[str, torch.Tensor],
            deadline: float) -> dict[str, Any]:  # fmt: skip
    """The ``fix`` of a triage report (see ``debug.localize.report``)."""
    if rep.category == "precision" and rep.verdict == "innocent" and isinstance(build, CompiledProgram):
        return _tolerance(build, rep, inputs, golden)
    found = _Found()
    if rep.category == "pass":
        found.why = "the build passes: there is nothing to fix"
    else:
        _candidates(build, rep, found)
    tried: list[dict[str, Any]] = []
    why = found.why
    for c in found.candidates:
        if time.perf_counter() > deadline:
            why = "the budget was spent before every candidate was tried"
            break
        ok, comparison = _verify(build, c, inputs, golden, rep.rtol, rep.atol, len(tried), deadline)
        tried.append({**c.edit.as_dict(), "target": c.target, "verified": ok, "result": comparison})
        if ok:
            return {"kind": c.target, "edit": c.edit.as_dict(), "verified": True, "comparison": comparison,
                    "tried": tried, "notes": found.notes}  # fmt: skip
    if tried and why == "":
        why = "no candidate edit made the outputs match the golden"
    return {"kind": None, "edit": None, "verified": False, "tried": tried, "notes": found.notes,
            "why_none": why or f"the evidence for category {rep.category!r} points to no edit"}  # fmt: skip


class _Found:
    """The candidates gathered so far, notes about where they apply, and why there are none."""

    def __init__(self) -> None:
        self.candidates: list[Candidate] = []
        self.notes: list[str] = []
        self.why = ""

    def add(self, edits: list[Edit], target: str) -> None:
        seen = {(c.edit.file, c.edit.line, c.edit.after) for c in self.candidates}
        for e in sorted(edits, key=lambda e: e.size):  # NOTE: stable: the rule's order among equals
            if (e.file, e.line, e.after) not in seen:
                self.candidates.append(Candidate(e, target))


def _candidates(build: Build, rep: LocalizeReport, found: _Found) -> None:
    """Every edit the evidence points to, the culprit's own first."""
    c = rep.culprit
    found.add(_restored_cpp(build, c.cpp_line), "build")
    src, line, target = _dsl_at(build, c.kernel, c.dsl_line, found)
    cat, op = rep.category, c.op or ""
    if cat == "uninitialized":
        _store_loop(build, c.kernel, found)
    elif src is not None and line is not None:
        if op == "cast":
            found.add(rules.cast_mode_edits(src, line), target)
        if cat in ("nan", "precision"):
            feeding = src.feeding(line)
            found.add(rules.stable_exp_edits(src, feeding), target)
            found.add(rules.stable_variance_edits(src, feeding), target)
            found.add(rules.sibling_call_edits(src, feeding), target)
        if cat == "algorithm":
            if op in ("call", "load", "store"):
                found.add(rules.loop_variable_edits(src, line), target)
            found.add(rules.sibling_op_edits(src, line, op), target)
    if not found.candidates and not found.why:
        found.why = (f"no candidate edit for category {rep.category!r}"
                     + (f" at op {op}" if op else "") + (" (the culprit names no DSL line)" if not c.dsl_line else ""))  # fmt: skip


def _restored_cpp(build: Build, cpp_line: str | None) -> list[Edit]:
    """Each hand-edited C++ line of the build put back as the generator writes it, the culprit's
    file first."""
    edited = hand_edited(build.work_dir, build.config)
    if not edited:
        return []
    first = (cpp_line or "").rpartition(":")[0]
    out = []
    b = Build(build.work_dir)
    for rel in sorted(edited, key=lambda r: r != first):
        if rel == b.config["ORCHESTRATION"].get("source"):
            try:
                now = (b.work_dir / rel).read_text()
            except OSError:
                continue
            lines = diff_lines(rel, orchestration_cpp(b.program()), now)
        else:
            kernel = next((k for k in b.kernels if k["source"] == rel), None)
            lines = edited_lines(b, b.program().kernel(kernel["name"])) if kernel else []
            now = (b.work_dir / rel).read_text() if kernel else ""
        text = now.splitlines()
        for d in lines:
            if d.cpp_line and d.generated and d.now and 0 < d.cpp_line <= len(text) and d.now in text[d.cpp_line - 1]:
                before = text[d.cpp_line - 1]
                out.append(Edit(rel, d.cpp_line, before, before.replace(d.now, d.generated, 1),
                                "a hand edit of the build's C++: the line as the generator writes it from the program"))  # fmt: skip
    return out


def _dsl_at(build: Build, kernel: str | None, dsl_line: str | None,
            found: _Found) -> tuple[Source | None, int | None, str]:  # fmt: skip
    """The DSL source to edit and the culprit's line in it: the user's file as it was built, else
    the build's IR dump (the file is gone or has changed since; ``found.notes`` says so)."""
    if not dsl_line:
        return None, None, "dsl"
    path, _, line = dsl_line.rpartition(":")
    if not line.isdigit():
        return None, None, "dsl"
    file = dsl_file(path, str(build.work_dir / build.kernels[0]["source"]))
    recorded = _recorded_sources(build)
    if file is not None:
        sha = recorded.get(str(file.resolve()))
        try:
            text = file.read_text()
            same = sha is None or _sha256(file) == sha
        except OSError:
            text, same = None, False
        if text is not None and same:
            try:
                return Source(str(file), text), int(line), "dsl"
            except SyntaxError as e:
                found.notes.append(f"{file} does not parse ({e.msg}, line {e.lineno}): proposing against the "
                                   "build's IR dump instead")  # fmt: skip
        elif text is not None:
            found.notes.append(f"{file} has changed since the build: proposing against the build's IR dump "
                               f"{IR_DIR}/{build.name}.py instead")  # fmt: skip
    else:
        found.notes.append(f"the DSL source {path} is gone: proposing against the build's IR dump "
                           f"{IR_DIR}/{build.name}.py instead")  # fmt: skip
    return _ir_at(build, kernel, dsl_line, found)


def _ir_at(build: Build, kernel: str | None, dsl_line: str,
           found: _Found) -> tuple[Source | None, int | None, str]:  # fmt: skip
    """The build's IR dump and the line in it of the statement the culprit's DSL line names."""
    rel = f"{IR_DIR}/{build.name}.py"
    b = Build(build.work_dir)
    try:
        program = b.program()
        src = Source(rel, (b.work_dir / rel).read_text())
    except (OSError, SyntaxError, TilescopeError) as e:
        found.notes.append(f"the build's IR dump {rel} cannot be read: {str(e).splitlines()[0]}")
        return None, None, "build"
    want = _same_place(dsl_line)
    stmts = []
    if kernel:
        try:
            sites, _ = kernel_sites(b, program.kernel(kernel))
            stmts = [s.stmt for s in sites.values() if s.dsl_line and _same_place(s.dsl_line) == want]
        except KeyError:
            pass
    if not stmts:
        sites, _ = orchestration_sites(b, program)
        calls = submits(program.body)
        stmts = [calls[s.index] for s in sites.values() if s.dsl_line and _same_place(s.dsl_line) == want]
    line = next((s.loc.line for s in stmts if s.loc is not None), None)
    if line is None:
        found.notes.append(f"no statement of the build's IR dump comes from {dsl_line}")
    return src, line, "build"


def _same_place(loc: str) -> tuple[str, str]:
    path, _, line = loc.rpartition(":")
    return os.path.basename(path), line


def _store_loop(build: Build, kernel: str | None, found: _Found) -> None:
    """``uninitialized``: the bound of the loop around the store that leaves part of the Out
    param unwritten (the compile's coverage finding)."""
    u = _finding(build, kernel) if kernel else None
    if u is None or not u.get("at"):
        found.why = "the compile's coverage check named no store region for that kernel"
        return
    src, line, target = _dsl_at(build, kernel, u["at"], found)
    if src is None or line is None:
        found.why = f"the DSL source of {u['at']} cannot be read"
        return
    dim, size = _gap_dim(build, u)
    if dim is None:
        found.why = "the unwritten region spans more than one dim of the store"
        return
    loop_line = _enclosing_loop(src, line, dim)
    if loop_line is None:
        found.why = f"no loop around {u['at']} steps the store's offset in dim {dim}"
        return
    found.add(loop_bound_edits(src, loop_line, u["shape"][dim], size), target)


def _finding(build: Build, kernel: str) -> dict[str, Any] | None:
    data = _report(build)
    return next((u for u in data.get("unwritten", []) if u.get("kernel") == kernel), None)


def _recorded_sources(build: Build) -> dict[str, str]:
    sources = _report(build).get("dsl_sources")
    return sources if isinstance(sources, dict) else {}


def _report(build: Build) -> dict[str, Any]:
    try:
        data = json.loads((build.work_dir / REPORT_DIR / "report.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _gap_dim(build: Build, found: dict[str, Any]) -> tuple[int | None, int]:
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


def _enclosing_loop(src: Source, store_line: int, dim: int) -> int | None:
    """The line of the innermost ``for`` around the ``ts.store`` on ``store_line`` whose variable
    appears in that store's offset for ``dim``."""
    call = next(iter(src.calls(store_line, "store")), None)
    if call is None or len(call.args) < 2 or not isinstance(call.args[1], ast.List | ast.Tuple):
        return None
    offsets = call.args[1].elts
    if dim >= len(offsets):
        return None
    names = {n.id for n in ast.walk(offsets[dim]) if isinstance(n, ast.Name)}
    node = src.parents.get(call)
    while node is not None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id in names:
            return node.lineno
        node = src.parents.get(node)
    return None


def _verify(build: Build, c: Candidate, inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
            atol: float, k: int, deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Apply the candidate to a copy, build it, run it isolated on ``inputs`` and compare."""
    folder = dfx_dir(build.work_dir) / TRIAGE_DIR / FIX_DIR
    tag = f"{k}_{os.getpid()}"
    made: Path | None = None
    try:
        if c.target == "dsl":
            compiled = _compiled_copy(c.edit, build.name, folder, tag, bool(build.runtime_config.get("check_bounds")))
        else:
            made = folder / f"build_fix{tag}"
            shutil.rmtree(made, ignore_errors=True)
            shutil.copytree(build.work_dir, made, ignore=shutil.ignore_patterns(DFX_DIR, DATA_DIR, ".lock"))
            target = made / c.edit.file
            target.write_text(c.edit.apply(target.read_text()))
            compiled = CompiledProgram.from_dir(made)
        made = compiled.work_dir
        ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
    except (TilescopeError, OSError, ValueError, SyntaxError, ImportError, KeyError) as e:
        _drop(made)
        return False, f"{type(e).__name__}: {str(e).splitlines()[0]}"
    if not ok:
        _drop(made)
    return ok, text if not ok else f"{text}; the fixed build is {made}"


def _compiled_copy(edit: Edit, name: str, folder: Path, tag: str, check_bounds: bool) -> CompiledProgram:
    """Program ``name`` compiled from a copy of its DSL file with ``edit`` made (into ``folder``)."""
    source = Path(edit.file)
    copy = folder / f"{source.stem}_fix{tag}.py"
    atomic_write(copy, edit.apply(source.read_text()))
    jit = _load_program(copy, source.parent, name, tag)
    return jit.compile(build_dir=str(folder / "builds"), check_bounds=check_bounds)


def propose_for_compile_error(fn: JitFunction, e: DSLError, data: Callable[[CompiledProgram], tuple[dict, dict]],
                              rtol: float, atol: float, budget: float = 60.0) -> dict[str, Any]:  # fmt: skip
    """``--fix`` for a program that does not compile (the harness's ``--triage --fix``): an Out
    param that a kernel reads, declared InOut. ``data(compiled)`` gives the inputs and the golden
    to verify a candidate on."""
    deadline = time.perf_counter() + budget
    none: dict[str, Any] = {"kind": None, "edit": None, "verified": False, "tried": [], "notes": []}
    m = _OUT_READ.search(str(e))
    if m is None or e.loc is None:
        return {**none, "why_none": "no candidate edit for this compile error: fix the line it names"}
    try:
        src = Source(e.loc.file, Path(e.loc.file).read_text())
    except (OSError, SyntaxError) as err:
        return {**none, "why_none": f"the DSL source {e.loc.file} cannot be read: {err}"}
    root = Path(fn.compile_cfg.get("build_dir") or knobs.COMPILE_KNOBS["build_dir"].value())
    folder = root / f"_fix_{fn.name}"
    tried = []
    for k, edit in enumerate(rules.inout_edits(src, m["kernel"], m["param"])):
        tag = f"{k}_{os.getpid()}"
        try:
            compiled = _compiled_copy(edit, fn.name, folder, tag, bool(fn.compile_cfg.get("check_bounds")))
            inputs, golden = data(compiled)
            ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
        except (TilescopeError, OSError, ValueError, SyntaxError, ImportError, KeyError) as err:
            ok, text = False, f"{type(err).__name__}: {str(err).splitlines()[0]}"
        tried.append({**edit.as_dict(), "target": "dsl", "verified": ok, "result": text})
        if ok:
            return {**none, "kind": "dsl", "edit": edit.as_dict(), "verified": True, "comparison": text, "tried": tried}
    return {**none, "tried": tried, "why_none": "no candidate edit made the program compile and match the golden"
            if tried else f"kernel {m['kernel']} declares no ts.Out param {m['param']} to make InOut"}  # fmt: skip


def _check_run(compiled: CompiledProgram, inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
               atol: float, deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Run ``compiled`` isolated on copies of ``inputs``, its tasks stopped past the budget, and
    compare its outputs with ``golden``."""
    args = guarded_args([inputs[a.name] for a in compiled.args])
    limit = max(MIN_RUN_S, deadline - time.perf_counter())
    with level_kept():
        compiled.run(*args, log_level="error", isolate=True, task_timeout_s=limit)
    got = {a.name: args[i] for i, a in enumerate(compiled.args) if a.is_output}
    return _compare(got, golden, rtol, atol)


def _compare(got: dict[str, torch.Tensor], golden: dict[str, torch.Tensor], rtol: float,
             atol: float) -> tuple[bool, str]:  # fmt: skip
    bad = {n: int((~close(got[n], g, rtol, atol)).sum()) for n, g in golden.items() if n in got}
    if any(bad.values()):
        return False, "still outside tolerance: " + ", ".join(f"{n} ({c} of {golden[n].numel()} elements)"
                                                              for n, c in bad.items() if c)  # fmt: skip
    return True, (f"every output within rtol={rtol:g}, atol={atol:g} of the golden: "
                  + ", ".join(f"{n} ({golden[n].numel()} elements)" for n in golden))  # fmt: skip


def _drop(made: Path | None) -> None:
    """A candidate's build that did not verify is not kept."""
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)


def _load_program(path: Path, home: Path, name: str, tag: str) -> JitFunction:
    """The ``@ts.jit`` program ``name`` of the module at ``path`` (imported under its own name,
    with ``home``, the original's directory, importable)."""
    spec = importlib.util.spec_from_file_location(f"_tilescope_fix_{path.stem}_{tag}", path)
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


def _tolerance(build: CompiledProgram, rep: LocalizeReport, inputs: dict[str, Any],
               golden: dict[str, torch.Tensor]) -> dict[str, Any]:  # fmt: skip
    """An innocent precision verdict: the test's tolerance, checked by a run on the saved data."""
    tol = rep.tolerance or {}
    rtol, atol = tol.get("rtol"), tol.get("atol")
    why = ("the error is rounding the program's dtypes allow, not a defect: no kernel patch; change the test "
           "(this tolerance, or smaller input magnitudes)")  # fmt: skip
    if rtol is None or atol is None:
        return {"kind": None, "edit": None, "verified": False, "tried": [], "notes": [],
                "why_none": "precision is innocent, but no tolerance that passes was found"}  # fmt: skip
    args = guarded_args([inputs[a.name] for a in build.args])
    try:
        with level_kept():
            build.run(*args, log_level="error", isolate=True)
    except TilescopeError as e:
        return {"kind": None, "edit": None, "verified": False, "tried": [], "notes": [],
                "why_none": f"the run with the proposed tolerance failed: {str(e).splitlines()[0]}"}  # fmt: skip
    got = {a.name: args[i] for i, a in enumerate(build.args) if a.is_output}
    ok, text = _compare(got, golden, float(rtol), float(atol))
    return {"kind": "test", "edit": None, "test_change": {"rtol": rtol, "atol": atol, "why": why}, "verified": ok,
            "comparison": text, "tried": [], "notes": []}  # fmt: skip
