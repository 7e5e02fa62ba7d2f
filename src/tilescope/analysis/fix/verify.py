"""Verifying a candidate fix (``fix.search`` chooses which): an edit made on a copy, compiled and
run isolated on the build's saved data, and on the second input set, before it is shown.

Invariants:
- Nothing the user made is written. Each proposal works in a folder of its own,
  ``dfx_outputs/triage/fix/run_<pid>_*/`` (for a program that did not compile,
  ``<build base>/_fix_<program>/run_<pid>_*/``), one sub-folder per candidate: a copy of the
  DSL file with the edit made (``fix.copies``) and its build, or a copy of the build with one of
  its files edited (hand-edited C++ put back as the generator writes it, or the IR dump when the
  DSL source is gone, changed since the build or unreadable). Folders of proposals whose process
  has ended are removed.
- A candidate is ``verified`` when its runs, isolated and under the budget's watchdog, put every
  output within the data's tolerances of the golden, on the saved data and on the second input
  set when there is one; whatever a candidate does (its import, its compile, its run) fails it
  alone, and a candidate that fails leaves nothing behind.
- A precision verdict of ``innocent`` gets no kernel patch: the test-side change (the tolerance
  the data justify), checked on the saved data the same way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope.analysis.data import Second
from tilescope.analysis.fix import rules
from tilescope.analysis.fix.candidates import Candidate, Found, read_source
from tilescope.analysis.fix.copies import load_program
from tilescope.analysis.fix.edit import Edit, Source
from tilescope.analysis.localize.localize_command import internal_error
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.report import Fix, ProposedEdit, Report, ToleranceChange, TriedEdit
from tilescope.build.manifest import Build
from tilescope.build.paths import DATA_DIR, DFX_DIR, IR_DIR, atomic_write
from tilescope.build.state import hand_edited
from tilescope.errors import DSLError, TilescopeError
from tilescope.ir.printer import program_str
from tilescope.launch.jit import JitFunction
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args

MIN_RUN_S = 5.0  # the watchdog of a candidate's run never goes below this
MAX_RUN_S = 60.0  # nor above this: a candidate that hangs is stopped however much budget is left


def verify_candidate(build: Build, c: Candidate, inputs: dict[str, Any], golden: dict[str, torch.Tensor],
                     second: Second | None, rtol: float, atol: float, folder: Path,
                     deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Apply the candidate to a copy in ``folder``, build it, run it isolated on ``inputs`` and
    compare, then on the ``second`` input set; a candidate that does not verify leaves nothing
    behind."""
    try:
        if c.target == "dsl":
            compiled = _compiled_copy(c.edits, build, folder, _compile_options(build))
            same = _same_program(compiled, build)
            if same:
                shutil.rmtree(folder, ignore_errors=True)
                return False, same
        else:
            made = folder / "build"
            shutil.copytree(build.work_dir, made, ignore=shutil.ignore_patterns(DFX_DIR, DATA_DIR, ".lock"))
            target = made / c.edit.file
            text = read_source(target)
            for e in c.edits:  # NOTE: every edit of a two-line repair is of the one file
                text = e.apply(text)
            target.write_text(text)
            compiled = CompiledProgram.from_dir(made)
        ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
        if ok and second is not None:
            ok, more = _check_run(compiled, second.inputs, second.golden, rtol, atol, deadline)
            text = f"{text}; on the second input set (seed {second.seed}): {more}"
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever a candidate does (its import, compile or run) fails it alone
        ok, text = False, _failed(e)
    if not ok:
        shutil.rmtree(folder, ignore_errors=True)
        return False, text
    return True, f"{text}; the fixed build is {compiled.work_dir}"


def _same_program(compiled: CompiledProgram, build: Build) -> str:
    """Why a DSL candidate changes nothing: its source compiles to the very program the build
    holds (names exchanged that hold one value, say); '' when it changes the program. Run, it
    could only differ from the build where the build's C++ was edited by hand, which a compile
    from the source drops: a "fix" that is no edit of the program."""
    try:
        if program_str(compiled.program()) != program_str(build.program()):
            return ""
    except (OSError, TilescopeError):
        return ""
    edited = hand_edited(build.work_dir, build.config)
    return (f"not tried: the edited source compiles to the program the build already holds ({IR_DIR}/{build.name}.py), "
            "so the edit changes nothing" + (f"; only the build's hand-edited C++ ({', '.join(edited)}) would differ, "
                                             "and a compile from the source drops it" if edited else ""))  # fmt: skip


def _failed(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return (f"SystemExit({e.code}): the module exits when it is imported (its top-level code parses arguments "
                "or exits); put a model script's run under `if __name__ == \"__main__\":`")  # fmt: skip
    first = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {first}"


def _compile_options(build: Build) -> dict[str, Any]:
    """The compile options of ``build`` that shape its code (a candidate is compiled the same way)."""
    opts = {"check_bounds": bool(build.runtime_config.get("check_bounds"))}
    if build.runtime_config.get("bf16_matmul") in knobs.BF16_MATMULS:
        opts["bf16_matmul"] = build.runtime_config["bf16_matmul"]
    memory = build.runtime_config.get("local_memory_bytes")
    if isinstance(memory, int) and not isinstance(memory, bool):
        opts["local_memory_bytes"] = memory
    return opts


def _compiled_copy(edits: tuple[Edit, ...], build: Build | None, folder: Path, opts: dict[str, Any],
                   name: str = "") -> CompiledProgram:  # fmt: skip
    """The program (``build``'s, or ``name``) compiled into ``folder`` from a copy there of its
    DSL file with ``edits`` made; checked to take the arguments ``build`` takes."""
    source = Path(edits[0].file)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / source.name
    text = read_source(source)
    for edit in edits:
        text = edit.apply(text)
    atomic_write(copy, text)
    jit = load_program(copy, source.parent, build.name if build is not None else name, f"{folder.parent.name}_{folder.name}")
    compiled = jit.compile(build_dir=str(folder), **opts)
    if build is not None:
        want = [(a.name, a.direction, a.shape, a.dtype) for a in build.args]
        got = [(a.name, a.direction, a.shape, a.dtype) for a in compiled.args]
        if got != want:
            raise ValueError(f"the program {build.name} of {source.name} is not the build's: its arguments differ")
    return compiled


def work_folder(base: Path) -> Path:
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
                              budget: float = 60.0) -> Fix:  # fmt: skip
    """``--fix`` for a program that does not compile (the harness's ``--triage --fix``): an Out
    param that a kernel reads, declared InOut. Each candidate is a copy of the DSL file in
    ``<build base>/_fix_<program>/`` (the last proposal's is kept until the next), compiled there
    with the run's compile options and run isolated on ``data(compiled)``: the inputs and golden
    this run would have had."""
    try:
        return _propose_for_compile_error(fn, e, data, rtol, atol, compile_cfg or {}, budget)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the compile error stands whatever a fix rule does
        return Fix.none(internal_error(err, "--fix"))


def _propose_for_compile_error(fn: JitFunction, e: DSLError, data: Callable[[CompiledProgram], tuple[dict, dict]],
                               rtol: float, atol: float, compile_cfg: dict[str, Any],
                               budget: float) -> Fix:  # fmt: skip
    deadline = time.perf_counter() + budget
    out_read = getattr(e, "out_read", None)  # a VerifyError's: (kernel, param)
    if out_read is None or e.loc is None:
        return Fix.none("no candidate edit for this compile error: fix the line it names")
    try:
        src = Source(e.loc.file, read_source(Path(e.loc.file)))
    except (OSError, SyntaxError, ValueError) as err:
        return Fix.none(f"the DSL source {e.loc.file} cannot be read: {err}")
    opts = {k: v for k, v in {**fn.compile_cfg, **compile_cfg}.items() if k != "build_dir"}
    root = Path(compile_cfg.get("build_dir") or fn.compile_cfg.get("build_dir") or knobs.COMPILE_KNOBS["build_dir"].value())
    kernel, param = out_read
    found = Found()
    found.add(rules.inout_edits(src, kernel, param, e.loc.line), "dsl", "InOut")
    edits = [c.edit for c in found.candidates]
    folder = work_folder(root / f"_fix_{fn.name}") if edits else None
    tried: list[TriedEdit] = []
    for k, edit in enumerate(edits):
        here = folder / f"c{k}"
        try:
            compiled = _compiled_copy((edit,), None, here, opts, name=fn.name)
            inputs, golden = data(compiled)
            ok, text = _check_run(compiled, inputs, golden, rtol, atol, deadline)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - whatever a candidate does fails it alone
            ok, text = False, _failed(err)
        tried.append(TriedEdit(**asdict(edit), target="dsl", verified=ok, result=text))
        if ok:
            return Fix("dsl", ProposedEdit(**asdict(edit)), True, tried, verified_on="this run's inputs",
                       comparison=f"{text}; the fixed build is {compiled.work_dir}")
        shutil.rmtree(here, ignore_errors=True)
    return Fix.none("no candidate edit made the program compile and match the golden" if tried
                  else f"kernel {kernel} declares no ts.Out param {param} to make InOut", tried)  # fmt: skip


def _check_run(compiled: CompiledProgram, inputs: dict[str, Any], golden: dict[str, torch.Tensor], rtol: float,
               atol: float, deadline: float) -> tuple[bool, str]:  # fmt: skip
    """Run ``compiled`` isolated on copies of ``inputs``, its tasks stopped past the budget (never
    before ``MIN_RUN_S``, always by ``MAX_RUN_S`` of charged time), and compare its outputs with
    ``golden``."""
    args = guarded_args([inputs[a.name] for a in compiled.args])
    limit = max(MIN_RUN_S, min(MAX_RUN_S, deadline - time.perf_counter()))
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


def tolerance_fix(build: CompiledProgram, rep: Report, inputs: dict[str, Any],
               golden: dict[str, torch.Tensor]) -> Fix:  # fmt: skip
    """An innocent precision verdict: the test's tolerance, checked by a run on the saved data."""
    if rep.tolerance is None:
        return Fix.none("precision is innocent (no kernel patch), but no tolerance that passes was found")
    try:
        rtol, atol = rep.tolerance.rtol, rep.tolerance.atol
        ok, text = _check_run(build, inputs, golden, rtol, atol, time.perf_counter())
    except TilescopeError as e:
        return Fix.none(f"precision is innocent (no kernel patch), but the run at the proposed tolerance failed: {_failed(e)}")
    if not ok:
        return Fix.none(f"precision is innocent (no kernel patch), but rtol={rtol:g}, atol={atol:g} does not pass: {text}")
    why = ("the error is rounding the program's dtypes allow, not a defect: no kernel patch; change the test "
           "(this tolerance, or smaller input magnitudes). It is the tightest that passes on these data: other "
           "inputs round differently, so allow what the error bound in the evidence allows")  # fmt: skip
    return Fix("test", None, True, test_change=ToleranceChange(rtol, atol, why), comparison=text)
