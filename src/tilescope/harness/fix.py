"""Verified fix proposals (``tilescope triage BUILD --fix``): an edit, tried on a copy, recompiled
and re-run on the build's saved data before it is shown.

Invariants:
- Nothing the user made is written. Each proposal works in a folder of its own,
  ``dfx_outputs/triage/fix/run_<pid>_*/`` (for a program that did not compile,
  ``<build base>/_fix_<program>/run_<pid>_*/``), one sub-folder per candidate: a copy of the
  DSL file with the edit made (imported under a name of its own, the original's directory
  importable) and its build, or a copy of the build with one of its files edited (hand-edited
  C++ put back as the generator writes it, or the IR dump when the DSL source is gone, changed
  since the build or unreadable). Folders of proposals whose process has ended are removed.
- A candidate is ``verified`` when its run, isolated and under the budget's watchdog, puts every
  output within the data's tolerances of the golden; whatever a candidate does (its import, its
  compile, its run) fails it alone, and a candidate that fails leaves nothing behind.
- Candidates come from the evidence (``debug.triage.fix_rules``) in the order of the evidence,
  each rule's smallest first; the first that verifies is proposed, every one tried is listed. No
  candidate is an honest answer, and so is a defect of this module: it never costs the verdict.
- A precision verdict of ``innocent`` gets no kernel patch: the test-side change (the tolerance
  the data justify), checked on the saved data the same way.
"""

from __future__ import annotations

import ast
import contextvars
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope.build.manifest import Build
from tilescope.build.paths import DATA_DIR, DFX_DIR, IR_DIR, TRIAGE_DIR, atomic_write, dfx_dir
from tilescope.build.report import load_report
from tilescope.build.state import hand_edited, sha256_file
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
from tilescope.harness.localize import internal_error
from tilescope.ir.nodes import Const, For, Store
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
    """The ``fix`` of a triage report (see ``debug.localize.report``). A defect of the proposal
    itself is its ``why_none``: it never takes the triage's verdict with it."""
    try:
        return _propose(build, rep, inputs, golden, deadline)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the verdict stands whatever a fix rule does
        return no_fix(internal_error(e, "triage --fix"))


def no_fix(why: str, tried: list[dict[str, Any]] | None = None, notes: list[str] | None = None) -> dict[str, Any]:
    """A ``fix`` without an edit, and why."""
    return {"kind": None, "edit": None, "verified": False, "tried": tried or [], "notes": notes or [], "why_none": why}


def _propose(build: Build, rep: LocalizeReport, inputs: dict[str, Any], golden: dict[str, torch.Tensor],
             deadline: float) -> dict[str, Any]:  # fmt: skip
    if rep.category == "precision" and rep.verdict == "innocent" and isinstance(build, CompiledProgram):
        return _tolerance(build, rep, inputs, golden)
    if rep.category == "pass":
        return no_fix("the build passes: there is nothing to fix")
    found = _Found()
    _candidates(build, rep, found)
    tried: list[dict[str, Any]] = []
    why = found.why
    folder = _work_folder(dfx_dir(build.work_dir) / TRIAGE_DIR / FIX_DIR) if found.candidates else None
    for c in found.candidates:
        if time.perf_counter() > deadline:
            why = "the budget was spent before every candidate was tried"
            break
        ok, comparison = _verify(build, c, inputs, golden, rep.rtol, rep.atol, folder / f"c{len(tried)}", deadline)
        tried.append({**c.edit.as_dict(), "target": c.target, "verified": ok, "result": comparison})
        if ok:
            return {"kind": c.target, "edit": c.edit.as_dict(), "verified": True, "comparison": comparison,
                    "tried": tried, "notes": found.notes}  # fmt: skip
    if tried and not why:
        why = "no candidate edit made the outputs match the golden"
    return no_fix(why or f"the evidence for category {rep.category!r} points to no edit", tried, found.notes)


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
                seen.add((e.file, e.line, e.after))
                self.candidates.append(Candidate(e, target))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def _candidates(build: Build, rep: LocalizeReport, found: _Found) -> None:
    """Every edit the evidence points to: the culprit's hand-edited C++ first, then the rules for
    its category (each rule's edits smallest first)."""
    c = rep.culprit
    found.add(_restored_cpp(build, c.cpp_line), "build")
    cat, op = rep.category, c.op or ""
    if cat == "uninitialized":
        _store_loop(build, c.kernel, found)
    else:
        src, line, target = _dsl_at(build, c.kernel, c.dsl_line, found)
        if src is not None and line is not None:
            lines = src.statement_lines(line)
            if op == "cast":
                found.add(rules.cast_mode_edits(src, lines), target)
            if cat in ("nan", "precision"):
                feeding = src.feeding(line)
                found.add(rules.stable_exp_edits(src, feeding), target)
                found.add(rules.stable_variance_edits(src, feeding), target)
                found.add(rules.sibling_call_edits(src, feeding), target)
            if cat == "algorithm":
                if op in ("call", "load", "store"):
                    found.add(rules.loop_variable_edits(src, lines), target)
                found.add(rules.sibling_op_edits(src, lines, op), target)
                found.add(rules.sibling_call_edits(src, lines), target)
    if not found.candidates and not found.why and not c.dsl_line and any("no budget left" in x for x in rep.limitations):
        found.why = "the budget ran out before the culprit's line was known: run again with a larger --budget"
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
    the build's IR dump (the file is gone, changed since the build, or unreadable: ``found``'s
    notes say so)."""
    path, _, line = (dsl_line or "").rpartition(":")
    if not line.isdigit():
        return None, None, "dsl"
    ir = f"{IR_DIR}/{build.name}.py"
    file, sha = _built_from(build, path)
    if file is None:
        found.note(f"the DSL source {path} is gone: proposing against the build's IR dump {ir} instead")
        return _ir_at(build, kernel, dsl_line, found)
    try:
        text = read_source(file)
        if sha is not None and sha256_file(file) != sha:
            found.note(f"{file} has changed since the build: proposing against the build's IR dump {ir} instead")
            return _ir_at(build, kernel, dsl_line, found)
        return Source(str(file), text), int(line), "dsl"
    except (OSError, SyntaxError, ValueError) as e:
        found.note(f"{file} cannot be read as Python ({e}): proposing against the build's IR dump {ir} instead")
        return _ir_at(build, kernel, dsl_line, found)


def _built_from(build: Build, path: str) -> tuple[Path | None, str | None]:
    """The DSL file a marker's ``path`` names, and its sha256 when the build was compiled (None
    for a build that did not record it). A relative path was relative to the directory of the
    compile: it is matched against the absolute paths the build recorded, never looked up from
    wherever this process runs."""
    recorded = _report(build).get("dsl_sources")
    if isinstance(recorded, dict) and recorded:
        want = Path(path).parts
        match = next((Path(f) for f in recorded if Path(f).parts[-len(want):] == want), None)
        if match is None:
            return None, None
        return (match if match.is_file() else None), recorded[str(match)]
    return dsl_file(path, str(build.work_dir / build.kernels[0]["source"])) if build.kernels else None, None


def read_source(path: Path) -> str:
    """A Python file's text in its declared encoding (``tokenize``: a coding cookie, or UTF-8).

    Raises:
        OSError, SyntaxError (a bad cookie), ValueError (bytes the encoding cannot decode).
    """
    with tokenize.open(path) as f:
        return f.read()


def _ir_at(build: Build, kernel: str | None, dsl_line: str,
           found: _Found) -> tuple[Source | None, int | None, str]:  # fmt: skip
    """The build's IR dump and the line in it of the statement the culprit's DSL line names."""
    rel = f"{IR_DIR}/{build.name}.py"
    b = Build(build.work_dir)
    try:
        program = b.program()
        src = Source(rel, read_source(b.work_dir / rel))
    except (OSError, SyntaxError, ValueError, TilescopeError) as e:
        found.note(f"the build's IR dump {rel} cannot be read: {str(e).splitlines()[0]}")
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
        found.note(f"no statement of the build's IR dump comes from {dsl_line}")
    return src, line, "build"


def _same_place(loc: str) -> tuple[str, str]:
    path, _, line = loc.rpartition(":")
    return os.path.basename(path), line


def _store_loop(build: Build, kernel: str | None, found: _Found) -> None:
    """``uninitialized``: the bound of the loop around the store that leaves part of the Out
    param unwritten (the compile's coverage finding)."""
    u = _finding(build, kernel) if kernel else None
    if u is None or not u.get("at"):
        _orchestration_loops(build, found)
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
    found.add(loop_bound_edits(src, loop_line, u["shape"][dim], size, _loop_consts(build, u["kernel"], loop_line)), target)


def _loop_consts(build: Build, kernel: str, loop_line: int) -> tuple[int, int] | None:
    """``(start, step)`` of kernel ``kernel``'s loop on DSL line ``loop_line``, as the IR has them
    folded (a step written as a name), from the C++ line that marks it; None when not constant."""
    b = Build(build.work_dir)
    try:
        sites, _ = kernel_sites(b, b.program().kernel(kernel))
    except (KeyError, OSError, TilescopeError):
        return None
    for site in sites.values():
        stmt = site.stmt
        if isinstance(stmt, For) and site.dsl_line and site.dsl_line.rpartition(":")[2] == str(loop_line):
            if isinstance(stmt.start, Const) and isinstance(stmt.step, Const):
                return int(stmt.start.value), int(stmt.step.value)
    return None


def _orchestration_loops(build: Build, found: _Found) -> None:
    """``uninitialized`` with every kernel storing its whole Out region: the orchestration's loops
    may stop before the end of an output, so no task is given its last region."""
    at = build.config.get("SOURCE")
    src, line, target = _dsl_at(build, None, at if isinstance(at, str) else None, found)
    fn = src.function_at(line) if src is not None and line is not None else None
    if fn is None:
        found.why = "every kernel stores its whole Out region, and the orchestration's source cannot be read"
        return
    found.add(rules.orchestration_loop_edits(src, fn), target)
    if not found.candidates:
        found.why = "every kernel stores its whole Out region, and no loop of the orchestration has a bound to extend"


def _finding(build: Build, kernel: str) -> dict[str, Any] | None:
    found = _report(build).get("unwritten")
    return next((u for u in found if isinstance(u, dict) and u.get("kernel") == kernel), None) if isinstance(
        found, list) else None  # fmt: skip


def _report(build: Build) -> dict[str, Any]:
    return load_report(build.work_dir)


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
    call = next(iter(src.calls([store_line], "store")), None)
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
            atol: float, folder: Path, deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Apply the candidate to a copy in ``folder``, build it, run it isolated on ``inputs`` and
    compare; a candidate that does not verify leaves nothing behind."""
    try:
        if c.target == "dsl":
            compiled = _compiled_copy(c.edit, build, folder, _compile_options(build))
        else:
            made = folder / "build"
            shutil.copytree(build.work_dir, made, ignore=shutil.ignore_patterns(DFX_DIR, DATA_DIR, ".lock"))
            target = made / c.edit.file
            target.write_text(c.edit.apply(read_source(target)))
            compiled = CompiledProgram.from_dir(made)
        ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever a candidate does (its import, compile or run) fails it alone
        ok, text = False, _failed(e)
    if not ok:
        shutil.rmtree(folder, ignore_errors=True)
        return False, text
    return True, f"{text}; the fixed build is {compiled.work_dir}"


def _failed(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return (f"SystemExit({e.code}): the module exits when it is imported (its top-level code parses arguments "
                "or exits); put a model script's run under `if __name__ == \"__main__\":`")  # fmt: skip
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}"


def _compile_options(build: Build) -> dict[str, Any]:
    """The compile options of ``build`` that shape its code (a candidate is compiled the same way)."""
    opts = {"check_bounds": bool(build.runtime_config.get("check_bounds"))}
    memory = build.runtime_config.get("local_memory_bytes")
    if isinstance(memory, int) and not isinstance(memory, bool):
        opts["local_memory_bytes"] = memory
    return opts


def _compiled_copy(edit: Edit, build: Build | None, folder: Path, opts: dict[str, Any], name: str = "",
                   build_dir: Path | None = None) -> CompiledProgram:  # fmt: skip
    """The program (``build``'s, or ``name``) compiled from a copy, in ``folder``, of its DSL file
    with ``edit`` made, into ``build_dir`` (default: ``folder``); checked to take the arguments
    ``build`` takes."""
    source = Path(edit.file)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / source.name
    atomic_write(copy, edit.apply(read_source(source)))
    jit = _load_program(copy, source.parent, build.name if build is not None else name, f"{folder.parent.name}_{folder.name}")
    compiled = jit.compile(build_dir=str(build_dir or folder), **opts)
    if build is not None:
        want = [(a.name, a.direction, a.shape, a.dtype) for a in build.args]
        got = [(a.name, a.direction, a.shape, a.dtype) for a in compiled.args]
        if got != want:
            raise ValueError(f"the program {build.name} of {source.name} is not the build's: its arguments differ")
    return compiled


def _work_folder(base: Path) -> Path:
    """A folder of its own for this proposal's candidates under ``base``; those of proposals
    whose process has ended are removed first (the last verified fix is kept until then)."""
    base.mkdir(parents=True, exist_ok=True)
    for old in base.glob("run_*"):
        pid = old.name.split("_")[1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"run_{os.getpid()}_", dir=base))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def propose_for_compile_error(fn: JitFunction, e: DSLError, data: Callable[[CompiledProgram], tuple[dict, dict]],
                              rtol: float, atol: float, compile_cfg: dict[str, Any] | None = None,
                              budget: float = 60.0) -> dict[str, Any]:  # fmt: skip
    """``--fix`` for a program that does not compile (the harness's ``--triage --fix``): an Out
    param that a kernel reads, declared InOut. Each candidate is a copy of the DSL file in
    ``<build base>/_fix_<program>/`` (the last proposal's is kept until the next), compiled there
    with the run's compile options and run isolated on ``data(compiled)``: the inputs and golden
    this run would have had."""
    try:
        return _propose_for_compile_error(fn, e, data, rtol, atol, compile_cfg or {}, budget)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the compile error stands whatever a fix rule does
        return no_fix(internal_error(err, "--fix"))


def _propose_for_compile_error(fn: JitFunction, e: DSLError, data: Callable[[CompiledProgram], tuple[dict, dict]],
                               rtol: float, atol: float, compile_cfg: dict[str, Any],
                               budget: float) -> dict[str, Any]:  # fmt: skip
    deadline = time.perf_counter() + budget
    m = _OUT_READ.search(str(e))
    if m is None or e.loc is None:
        return no_fix("no candidate edit for this compile error: fix the line it names")
    try:
        src = Source(e.loc.file, read_source(Path(e.loc.file)))
    except (OSError, SyntaxError, ValueError) as err:
        return no_fix(f"the DSL source {e.loc.file} cannot be read: {err}")
    opts = {k: v for k, v in {**fn.compile_cfg, **compile_cfg}.items() if k != "build_dir"}
    root = Path(compile_cfg.get("build_dir") or fn.compile_cfg.get("build_dir") or knobs.COMPILE_KNOBS["build_dir"].value())
    edits = rules.inout_edits(src, m["kernel"], m["param"])
    folder = _work_folder(root / f"_fix_{fn.name}") if edits else None
    tried = []
    for k, edit in enumerate(edits):
        here = folder / f"c{k}"
        try:
            compiled = _compiled_copy(edit, None, here, opts, name=fn.name)
            inputs, golden = data(compiled)
            ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - whatever a candidate does fails it alone
            ok, text = False, _failed(err)
        tried.append({**edit.as_dict(), "target": "dsl", "verified": ok, "result": text})
        if ok:
            return {"kind": "dsl", "edit": edit.as_dict(), "verified": True, "verified_on": "this run's inputs",
                    "comparison": f"{text}; the fixed build is {compiled.work_dir}", "tried": tried, "notes": []}  # fmt: skip
        shutil.rmtree(here, ignore_errors=True)
    return no_fix("no candidate edit made the program compile and match the golden" if tried
                  else f"kernel {m['kernel']} declares no ts.Out param {m['param']} to make InOut", tried)  # fmt: skip


def _check_run(compiled: CompiledProgram, inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
               atol: float, deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Run ``compiled`` isolated on copies of ``inputs``, its tasks stopped past the budget (never
    before ``MIN_RUN_S``), and compare its outputs with ``golden``."""
    args = guarded_args([inputs[a.name] for a in compiled.args])
    limit = max(MIN_RUN_S, deadline - time.perf_counter())
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


_importing: contextvars.ContextVar[Path | None] = contextvars.ContextVar("tilescope_fix_importing", default=None)


def candidate_import() -> Path | None:
    """The copy of a module being imported to try a fix, while it is (``run_jit`` at a module's
    top level runs nothing then)."""
    return _importing.get()


def _load_program(path: Path, home: Path, name: str, tag: str) -> JitFunction:
    """The ``@ts.jit`` program ``name`` of the module at ``path`` (imported under its own name,
    with ``home``, the original's directory, importable)."""
    spec = importlib.util.spec_from_file_location(f"_tilescope_fix_{path.stem}_{tag}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(home))
    token = _importing.set(path)
    try:
        spec.loader.exec_module(module)
    finally:
        _importing.reset(token)
        sys.path.remove(str(home))
    found = [v for v in vars(module).values() if isinstance(v, JitFunction) and v.name == name]
    if not found:
        raise ImportError(f"{path} has no @ts.jit program named {name!r} at its top level")
    return found[0]


def _tolerance(build: CompiledProgram, rep: LocalizeReport, inputs: dict[str, Any],
               golden: dict[str, torch.Tensor]) -> dict[str, Any]:  # fmt: skip
    """An innocent precision verdict: the test's tolerance, checked by a run on the saved data."""
    tol = rep.tolerance or {}
    rtol, atol = tol.get("rtol"), tol.get("atol")
    if rtol is None or atol is None:
        return no_fix("precision is innocent (no kernel patch), but no tolerance that passes was found")
    try:
        ok, text = _check_run(build, inputs, golden, float(rtol), float(atol), time.perf_counter())
    except TilescopeError as e:
        return no_fix(f"precision is innocent (no kernel patch), but the run at the proposed tolerance failed: {_failed(e)}")
    if not ok:
        return no_fix(f"precision is innocent (no kernel patch), but rtol={rtol:g}, atol={atol:g} does not pass: {text}")
    why = ("the error is rounding the program's dtypes allow, not a defect: no kernel patch; change the test "
           "(this tolerance, or smaller input magnitudes). It is the tightest that passes on these data: other "
           "inputs round differently, so allow what the error bound in the evidence allows")  # fmt: skip
    return {"kind": "test", "edit": None, "test_change": {"rtol": rtol, "atol": atol, "why": why}, "verified": True,
            "comparison": text, "tried": [], "notes": []}  # fmt: skip
