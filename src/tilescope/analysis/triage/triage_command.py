"""From a failure to its culprit in one command: ``tilescope triage BUILD``, ``--triage`` on a model
script, and ``ts.triage(build_dir)``.

It reproduces the failure on the build's saved data (``data/``, or ``--golden-data``), classifies
it, and runs the tools that answer that category, in order, under a time budget (``--budget``,
default 60 s):

1. load the build: hand-edited C++ that no longer compiles (``compile_error``, its C++ and DSL
   lines) or no longer matches the signatures (``signature``, the file and line);
2. load the data: values that do not fit the arguments (``bad_input``, the argument);
3. run it isolated with the NaN check on: ``crash`` (signal, C++ and DSL lines), ``hang`` (the
   task stopped and its line), ``deadlock`` (the cycle or the missing producer),
   ``out_of_bounds`` (a checked build's load or store, or a guard zone), ``nan`` (the first task
   that makes NaN/Inf from finite inputs, and the op, from a probe build of its kernel);
4. outputs within tolerance of the golden: ``pass``, and whether they stay the same across
   shuffled schedules (else ``race``);
5. wrong values: the access audit (``race`` for accesses no path of the graph orders,
   ``out_of_bounds`` for accesses outside a task's declared regions), the poison runs
   (``uninitialized``), shuffled runs (``race``), and last ``tilescope localize`` (``codegen``,
   ``algorithm``, ``precision``).

The report reuses localize's format (``tool`` = ``triage``; ``steps`` says what ran, for how
long; ``deterministic`` for a passing build) and goes to ``dfx_outputs/triage/report.json``; every
artifact stays under the build directory. A budget spent before an answer is ``unknown``, with
the step it stopped at.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from tilescope import knobs
from tilescope.analysis.audit import dsl_line
from tilescope.analysis.compare import check_tolerances
from tilescope.analysis.data import DataError, load_meta, load_snapshot
from tilescope.analysis.fix.search import fix_data, propose
from tilescope.analysis.golden_holes import golden_hole
from tilescope.analysis.golden_trace import load_trace
from tilescope.analysis.localize.localize_command import report_cli
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.progress import Progress, seconds_arg, tolerance_arg
from tilescope.analysis.report import Culprit, Fix, Report, write_report
from tilescope.analysis.triage.steps import ANSWER, CRASH, NO_BUDGET, REQUEST, STOPPED, WALL_STRETCH, Steps
from tilescope.build.build_report import report_problem
from tilescope.build.manifest import Build, as_build_dir
from tilescope.build.path_args import PATH_ARG
from tilescope.build.paths import (
    DATA_DIR,
    DFX_DIR,
    FIX_DIFF,
    TRIAGE_DIR,
    atomic_write,
    dfx_dir,
    inside,
    saved_data,
    writable_dir,
)
from tilescope.build.signature_check import SignatureMismatch
from tilescope.debug.crash import read_crash_report
from tilescope.debug.failures import Failure
from tilescope.errors import ArgumentError, BuildFileError, DSLError, RuntimeFailure, TilescopeError, clipped
from tilescope.launch.child import run_contained
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args
from tilescope.toolchain.compiler import DSL_MARKER, CompileError

DEFAULT_BUDGET = knobs.ENV_KNOBS["triage_budget"].default
HANG_TIMEOUT_S = 60.0  # the most a task of the first run may take (charged time) before it is a hang
CATEGORIES = (
    "compile_error", "bad_input", "signature", "crash", "hang", "deadlock", "out_of_bounds", "nan", "race",
    "uninitialized", "codegen", "algorithm", "precision", "pass", "unknown",
)  # fmt: skip
# A failed run's category and summary, by the Failure's (kind, cause) (debug/failures.py); a kind
# missing here is a crash. ("crash", "fault") is looked up for a fault in the guard pages around a
# tensor (the crash report names it), and for any fault in the runs of the later steps, whose
# tensors all have guard pages (the first run's may lie side by side where they could not be mapped
# apart).
_FAILURES: dict[tuple[str, str], tuple[str, str]] = {
    ("kernel_error", "bounds"): ("out_of_bounds", "a checked {op} of {tensor} left its tensor"),
    ("guard", ""): ("out_of_bounds", "a kernel wrote outside its tensor (a guard zone changed)"),
    ("crash", "fault"): ("out_of_bounds", "a kernel read or wrote outside its tensors: it faulted in a later run, "
                         "whose tensors have guard pages"),
    ("crash", "fault_near"): ("out_of_bounds", "a kernel read or wrote outside {tensor}: it faulted in the guard "
                              "pages around it"),
    ("error", "region"): ("out_of_bounds", "the orchestration gave a task a region, or read an element, outside its "
                          "tensor"),
    ("timeout", ""): ("hang", "a task (or the orchestration) never finished: stopped past its budget"),
    ("deadlock", ""): ("deadlock", "tasks wait for each other, or for a task never submitted"),
    ("input_written", ""): ("out_of_bounds", "a kernel stores into an input (a ts.Tensor): the run changed it"),
}  # fmt: skip
_UNCHECKED_BOUNDS = "a ragged load or store was given valid counts outside its tile"



class TriageError(TilescopeError):
    """triage cannot start: not a build, no saved data."""


def triage(
    build_dir: str | os.PathLike,
    golden_data: str | os.PathLike | None = None,
    *,
    budget: float | None = None,
    task_timeout_s: float | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[str], None] | None = None,
    fix: bool = False,
) -> Report:
    """Triage the build ``build_dir`` on its saved data (see the module docstring); the report is
    also written to ``dfx_outputs/triage/report.json``. With ``fix``, propose an edit of the DSL
    source and verify it on the saved data (``harness.fix``; the report's ``fix``).

    ``budget`` (default TILESCOPE_TRIAGE_BUDGET, 60 s) is the CPU time triage spends (its own
    process and the processes it waits for) before it answers with what it knows: a busy machine
    makes it slower, not less sure. ``task_timeout_s`` is how long a task may run (its charged time:
    CPU plus blocked, not time spent waiting for a core) before triage calls it a hang; by default
    a quarter of the budget, from 1 s to ``HANG_TIMEOUT_S``.

    Raises:
        TriageError: not a build directory, no saved data to run on, or a budget or task timeout
            that is not a number of seconds > 0.
        ConfigError: an environment variable sets a knob to a value it refuses.
    """
    # NOTE: every knob the environment sets, checked before anything runs: a bad one is a ConfigError
    # naming its variable, never a run (or the contained steps) failing on it later
    knobs.compile_options(None)
    knobs.runtime_options(None)
    if budget is None:
        budget = knobs.ENV_KNOBS["triage_budget"].env_value() or DEFAULT_BUDGET  # a bad value: ConfigError
    for name, value in (("budget", budget), ("task_timeout_s", task_timeout_s)):
        if value is not None and not (isinstance(value, int | float) and not isinstance(value, bool)
                                      and 0 < value < float("inf")):  # fmt: skip
            raise TriageError(f"{name}={value!r}: expected a number of seconds > 0")
    work = as_build_dir(build_dir)
    t = _Triage(work, golden_data, float(budget), progress or Progress("triage"))
    t.task_timeout_s = None if task_timeout_s is None else float(task_timeout_s)
    t.want_fix = fix
    t.run(rtol, atol)
    if fix and t.rep.fix is None:
        t.fix_here(rtol, atol)
    return t.finish()


class _Triage(Steps):
    def __init__(self, work: Path, golden_data, budget: float, say: Callable[[str], None]):
        super().__init__(Report(work.name, str(work), "", "", "", tool="triage"), budget, say)
        self.work, self.golden_data = work, golden_data
        self.build: CompiledProgram | None = None
        self.inputs: dict[str, Any] = {}
        self.golden: dict[str, torch.Tensor] = {}
        self.want_fix = False
        self.task_timeout_s: float | None = None

    def finish(self) -> Report:
        self.undecided()
        assert self.rep.category in CATEGORIES, self.rep.category
        self.rep.elapsed_s = round(time.perf_counter() - self.started, 3)
        self.rep.next += _next_commands(self.rep, self.work)
        try:
            write_report(self.work, self.rep, TRIAGE_DIR)
            diff = inside(dfx_dir(self.work, TRIAGE_DIR), FIX_DIFF)
            if self.rep.fix is not None and self.rep.fix.diff:
                atomic_write(diff, self.rep.fix.diff)
            elif diff.is_file():
                diff.unlink()  # NOTE: an earlier triage's: it is not this report's fix
        except OSError as e:
            self.rep.limitations.append(f"the report could not be written into {self.work}: {e}")
        return self.rep

    def fix_here(self, rtol: float | None, atol: float | None) -> None:
        """``--fix`` for a verdict reached before the contained steps (a build that no longer
        compiles or loads, a run that crashed, hung or deadlocked): candidates are verified by
        isolated runs, so this process is safe from them."""
        if self.rep.category in ("bad_input", "unknown"):
            self.rep.fix = Fix.none(f"category {self.rep.category!r}: there is no culprit to fix")
            return
        try:
            build = self.build or Build(self.work)
            data = Path(self.rep.data or self.golden_data or inside(self.work, DATA_DIR))
            if not self.inputs:
                self.tolerances(data, rtol, atol)
                self.inputs, self.golden = load_snapshot(data, list(build.args))
        except (TilescopeError, OSError) as e:
            self.rep.fix = Fix.none(f"the build's data cannot be loaded to verify a fix: {str(e).splitlines()[0]}")
            return
        deadline = time.perf_counter() + max(self.left(), 10)
        verified_on = fix_data(data, build, self.inputs, self.golden)
        self.rep.fix = self.step("propose a fix and verify it on the saved data",
                                 lambda: propose(build, self.rep, verified_on, deadline))  # fmt: skip

    # -- the steps ------------------------------------------------------------------------------

    def run(self, rtol: float | None, atol: float | None) -> None:
        if not self.load():
            return
        golden = self.data(rtol, atol)
        if golden is None:
            return
        done = self.first_run()
        if done is None:
            return
        outputs, nan = done
        bad = {k: ~close(outputs[k], v, self.rep.rtol, self.rep.atol) for k, v in golden.items() if k in outputs}
        bad = {k: m for k, m in bad.items() if bool(m.any())}
        if bad:
            self.rep.evidence.append(
                "outputs outside rtol/atol of the golden: "
                + ", ".join(f"{k} ({int(m.sum())} of {m.numel()})" for k, m in bad.items())
            )
            if self.nan_in_data(golden, outputs, bad):
                return
        elif nan is not None:  # NOTE: an explicit -inf mask, say: the golden has them too
            self.rep.evidence.append(f"{nan['message']}; the golden has the same values there")
        self.contained("nan" if bad and nan is not None else "wrong" if bad else "pass", bad, nan)

    def nan_in_data(self, golden: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor],
                    bad: dict[str, torch.Tensor]) -> bool:  # fmt: skip
        """``bad_input`` when the data themselves hold the NaN: the golden at mismatching elements
        (a NaN, or an Inf golden_fn's arithmetic made where the output is finite: it is no
        reference there; ``golden_holes`` names the golden's line that made it), or an input, when
        the run's mismatching outputs are NaN (what is computed from it is NaN whatever the
        kernels do)."""
        if any(golden[n].is_floating_point() and bool((m & ~torch.isfinite(golden[n])).any()) for n, m in bad.items()):
            trace, no_trace = load_trace(Path(self.rep.data), self.inputs)
            hole = golden_hole(golden, outputs, self.inputs, self.rep.rtol, self.rep.atol, trace, no_trace)
            if hole is not None:
                self.verdict("bad_input", hole.summary(), None, *hole.evidence())
                return True
        if not any(bool((m & torch.isnan(outputs[n])).any()) for n, m in bad.items() if outputs[n].is_floating_point()):
            return False
        for a in self.build.args:
            v = self.inputs.get(a.name)
            if a.is_input and torch.is_tensor(v) and v.is_floating_point() and bool(torch.isnan(v).any()):
                first = [int(i) for i in torch.isnan(v).nonzero()[0]]
                self.verdict("bad_input", f"the input {a.name} holds NaN at {int(torch.isnan(v).sum())} elements (the "
                             f"first at {first}): what is computed from them is NaN whatever the kernels do; fix the "
                             "inputs (TensorSpec init_value), and save the data again", None)  # fmt: skip
                return True
        return False

    def contained(self, mode: str, bad: dict[str, torch.Tensor], nan: dict[str, Any] | None) -> None:
        """Run the steps that run the program again in a child process (``triage_steps``): a kernel
        that faults there is named from its crash report, and triage goes on."""
        folder = dfx_dir(self.work, TRIAGE_DIR)
        # NOTE: named for this process: two triages of one build at once never read each other's files
        request, answer, crash = (folder / f"{Path(n).stem}_{os.getpid()}{Path(n).suffix}" for n in (REQUEST, ANSWER, CRASH))
        for f in (answer, crash):
            f.unlink(missing_ok=True)
        torch.save({"work": str(self.work), "program": self.rep.program, "data": self.rep.data, "rtol": self.rep.rtol,
                    "atol": self.rep.atol, "budget": self.left(), "mode": mode, "bad": bad, "nan": nan,
                    "progress": getattr(self.say, "enabled", False), "crash_report": str(crash),
                    "answer": str(answer), "fix": self.want_fix}, request)  # fmt: skip
        code = "import sys; from tilescope.analysis.triage.steps import child_main; sys.exit(child_main(sys.argv[1]))"

        def progress(line: str) -> bool:
            if line.startswith("[triage] "):
                self.say(line.removeprefix("[triage] "))
                return True
            return False

        try:
            ended = run_contained(["-c", code, str(request)], stderr="lines", on_line=progress,
                                  timeout_s=max(self.left(), 0) * WALL_STRETCH + 60)  # fmt: skip
        finally:
            request.unlink(missing_ok=True)
        rc, said = ended.returncode, ended.last_lines(n=50)
        if ended.timed_out:
            self.rep.limitations.append(f"{NO_BUDGET}: the steps after the first run took past the budget and were stopped")
        if rc == 0 and answer.is_file():
            self.merge(json.loads(answer.read_text()))
            answer.unlink(missing_ok=True)
        elif rc < 0 and crash.is_file() and crash.stat().st_size > 0:
            self.crashed(read_crash_report(crash, self.build, save_inputs=False), said)
        elif stopped := [x.removeprefix(STOPPED) for x in said if x.startswith(STOPPED)]:
            self.rep.limitations.append(f"the steps after the first run stopped: {stopped[-1]}")
        else:
            tail = [x for x in said if x.strip()][-3:]
            self.rep.limitations.append(
                f"the steps after the first run stopped (exit status {rc}): " + (" | ".join(tail) or "no message"))

    def merge(self, answer: dict[str, Any]) -> None:
        """The child's findings (its report's ``FIELDS``), into this report."""
        rep = self.rep
        got = Report.from_json({"program": rep.program, "build": rep.build, "data": rep.data, "category": "",
                                "summary": "", **answer})  # fmt: skip
        rep.evidence += got.evidence
        rep.limitations += got.limitations
        rep.steps += got.steps
        rep.next += [n for n in got.next if n not in rep.next]
        if got.category:
            rep.category, rep.summary, rep.verdict, rep.culprit = got.category, got.summary, got.verdict, got.culprit
        rep.deterministic, rep.fix, rep.tolerance, rep.fingerprint = got.deterministic, got.fix, got.tolerance, got.fingerprint

    def crashed(self, f, said: list[str]) -> None:
        """A run of the later steps died (the first, isolated run did not): what its report names.
        A fault there is an access outside the kernel's tensors: those runs' tensors have guard
        pages, the isolated run's lie side by side."""
        self.rep.evidence.append(f"the first run passed isolated, but a run of the steps after it died: {f.message}")
        self.rep.evidence += [x for x in said if x.startswith("[tilescope]")][:3]
        for i, frame in enumerate(f.frames):  # NOTE: the audit build's copy of a kernel has the build's lines
            path, _, line = frame.cpp.rpartition(":")
            if f"/{DFX_DIR}/{TRIAGE_DIR}/" in path and line.isdigit():
                kernel = next((k for k in self.build.kernels if k["name"] == Path(path).stem), None)
                if kernel is not None:
                    cpp = f"{kernel['source']}:{line}"
                    f.frames[i] = replace(frame, cpp=cpp, dsl=dsl_line(self.build, self.build.kernels.index(kernel),
                                                                         int(line)) or "")  # fmt: skip
                    f.cpp_line = f.dsl_line = ""  # NOTE: located again, on the build's lines
        f.locate()
        self.failed(f, f.message, guarded=True)
    def load(self) -> bool:
        try:
            self.rep.program = Build(self.work).name  # NOTE: named even when the build then fails to load
        except (TilescopeError, OSError):
            pass
        else:  # NOTE: a build triage cannot write into is said before any run, as what it is
            writable_dir(inside(self.work, DFX_DIR, TRIAGE_DIR), "triage")
        try:
            self.build = self.step("load the build", lambda: CompiledProgram.from_dir(self.work))
        except SignatureMismatch as e:
            first = e.problems[0] if e.problems else None
            culprit = Culprit(kernel=getattr(first, "kernel", None), cpp_line=first.where if first else None,
                              dsl_line=_dsl_at(self.work, first.file, first.line) if first and first.line else None)  # fmt: skip
            self.verdict("signature", f"hand-edited C++ no longer matches the build's signatures: {first or e}",
                         culprit, *map(str, e.problems))  # fmt: skip
            return False
        except CompileError as e:
            cpp = _in_build(self.work, f"{e.cpp_file}:{e.cpp_line}") if e.cpp_file and e.cpp_line else None
            kernel = next((k["name"] for k in _kernels(self.work) if e.cpp_file and Path(str(e.cpp_file)).stem == k["name"]),
                          None)  # fmt: skip
            self.verdict("compile_error", "hand-edited C++ of the build does not compile",
                         Culprit(kernel=kernel, dsl_line=e.dsl_loc, cpp_line=cpp), *_compile_evidence(e))  # fmt: skip
            return False
        except DSLError as e:
            self.verdict("compile_error", f"the build's edited IR does not compile: {e.message}",
                         Culprit(dsl_line=str(e.loc) if e.loc else None), *_compile_evidence(e))  # fmt: skip
            return False
        self.rep.program = self.build.name
        try:
            self.build.program()  # NOTE: the final IR, which every step after the first run reads
        except BuildFileError as e:
            raise TriageError(f"cannot triage {self.work}: {e}") from None
        problem = report_problem(self.work)
        if problem is not None:
            self.rep.limitations.append(problem)
        return True

    def tolerances(self, data: Path, rtol: float | None, atol: float | None) -> None:
        """The report's rtol/atol: as given, else as the data were saved with (else 1e-5)."""
        meta = load_meta(data, given=[k for k, v in (("rtol", rtol), ("atol", atol)) if v is not None])
        self.rep.rtol = float(meta.get("rtol", 1e-5) if rtol is None else rtol)
        self.rep.atol = float(meta.get("atol", 1e-5) if atol is None else atol)

    def data(self, rtol, atol) -> dict[str, torch.Tensor] | None:
        if self.golden_data is not None:
            data = Path(self.golden_data)
        else:
            held = saved_data(self.work)  # data/, else what --triage or --localize saved for its tool
            if not held:
                raise TriageError(
                    f"{self.work} has no saved data ({self.work}/{DATA_DIR}/in and out): triage reproduces a failure on "
                    f"the exact data of a run. Save them: python model.py --runtime-dir {self.work} --save-data, or run "
                    "the model script with --triage; or pass --golden-data DIR"
                )
            data = held[0][1]
            if held[0][0] != "data":
                self.say(f"the data --{held[0][0]} saved: {data}")
        if not data.is_dir():
            raise TriageError(f"--golden-data {clipped(str(data))}: no such data directory (a data directory holds in/ "
                              "and out/)")  # fmt: skip
        self.rep.data = str(data)
        try:
            self.tolerances(data, rtol, atol)
            check_tolerances(self.rep.rtol, self.rep.atol)
            self.inputs, golden = self.step("load the data", lambda: load_snapshot(data, list(self.build.args)))
            self.golden = golden
        except (DataError, ArgumentError) as e:
            lines = [x.strip() for x in str(e).splitlines() if x.strip()]
            first = lines[1] if len(lines) > 1 else lines[0]
            self.verdict("bad_input", f"the data do not fit the program's arguments: {first}", None, *lines)
            return None
        return golden

    def first_run(self) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None] | None:
        """The run itself, isolated, with the NaN check on: its outputs and the NaN check's report
        (task, kernel, message; None when every output was finite); None when it failed."""
        assert self.build is not None
        args = guarded_args([self.inputs[a.name] for a in self.build.args])
        budget = self.task_timeout_s or max(1.0, min(HANG_TIMEOUT_S, self.left() / 4))
        try:
            # NOTE: with the graph written (dfx_outputs/deps.json): the report's `tilescope deps BUILD --task N` reads it
            info = self.step("run isolated, NaN check on", lambda: self.build.run(
                *args, isolate=True, nan_check=True, task_timeout_s=budget, log_level="null", enable_dep_gen=True),
                task_timeout_s=round(budget, 3))  # fmt: skip
        except ArgumentError as e:
            self.verdict("bad_input", str(e).splitlines()[0])
            return None
        except RuntimeFailure as e:
            f = getattr(e, "failure", None)
            if f is not None and f.kind == "input_written":  # the access audit names the task and its store
                self.rep.evidence.append(f.message)
                self.contained("wrong", {}, None)
                return None
            self.failed(f, str(e))
            return None
        outputs = {a.name: args[i] for i, a in enumerate(self.build.args) if a.is_output}
        nan = None if info.nan is None else {"task_id": info.nan.task_id, "kernel": info.nan.kernel,
                                            "message": info.nan.message}  # fmt: skip
        return outputs, nan

    def failed(self, f: Failure | None, text: str, guarded: bool = False) -> None:
        """The verdict of a failed run, from its Failure's fields (``_FAILURES``); ``guarded``: a
        run of the later steps (its tensors have guard pages)."""
        if f is None:
            self.verdict("crash", text.splitlines()[0])
            return
        if f.kind == "interrupted":
            raise KeyboardInterrupt
        culprit = Culprit(f.task_id if f.task_id >= 0 else None, f.kernel or None, f.op or None, f.dsl_line or None,
                          _in_build(self.work, f.cpp_line) if f.cpp_line else None)  # fmt: skip
        cause = f.cause if f.cause != "fault" or guarded else "fault_near" if f.tensor else ""
        category, summary = _FAILURES.get((f.kind, cause)) or _FAILURES.get((f.kind, "")) or ("crash", "")
        if (f.kind, cause) == ("kernel_error", "bounds") and not f.op:
            summary = _UNCHECKED_BOUNDS
        self.verdict(category, summary.format(op=f.op, tensor=f.tensor) or f"the run failed ({f.kind})", culprit,
                     f.message, *f.details)  # fmt: skip


def error_report(program: str, e: BaseException) -> Report | None:
    """The triage of a harness run that stopped before there was anything to run: a compile that
    failed (``compile_error`` at the DSL line, and the pass after which the IR stopped verifying,
    or at the failing C++ line) or arguments the program refused (``bad_input``); None for
    another error."""
    if isinstance(e, ArgumentError | DataError):
        rep = Report(program, "", "", "bad_input", str(e).splitlines()[0], tool="triage")
        rep.evidence += str(e).splitlines()[1:4]
        return rep
    if isinstance(e, CompileError):
        cpp = f"{e.cpp_file}:{e.cpp_line}" if e.cpp_file and e.cpp_line else None
        culprit, summary = Culprit(dsl_line=e.dsl_loc, cpp_line=cpp), "the generated C++ does not compile"
    elif isinstance(e, DSLError):
        after = getattr(e, "pass_name", "")  # a VerifyError's
        culprit = Culprit(op=f"pass {after}" if after else None, dsl_line=str(e.loc) if e.loc else None)
        summary = e.message.splitlines()[0]
    else:
        return None
    rep = Report(program, "", "", "compile_error", summary, culprit=culprit, tool="triage")
    rep.evidence += _compile_evidence(e)
    rep.next.append("fix the named line and run again")
    return rep


def _compile_evidence(e: BaseException) -> list[str]:
    """What a compile error says, for the evidence: the compiler's first errors (g++), or the
    message and its hint (the DSL), without the source line the culprit already names."""
    if isinstance(e, CompileError):
        errors = [x.strip() for x in e.stderr.splitlines() if " error: " in x or x.startswith("error:")]
        return [str(e).splitlines()[0], *errors[:3]]
    if isinstance(e, DSLError):
        return [e.message, *([f"hint: {e.hint}"] if e.hint else [])]
    return str(e).splitlines()[:3]


def _kernels(work: Path) -> list[dict[str, Any]]:
    """The build's kernel table, read without loading it (empty when it cannot be read)."""
    try:
        return list(Build(work).kernels)
    except (TilescopeError, OSError):
        return []


def _in_build(work: Path, cpp: str) -> str:
    """``/abs/build/kernels/vec/k.cpp:19`` as ``kernels/vec/k.cpp:19`` (a path inside the build)."""
    path, _, line = cpp.rpartition(":")
    try:
        return f"{Path(path).resolve().relative_to(work.resolve())}:{line}"
    except ValueError:
        return cpp


def _dsl_at(work: Path, rel: str, line: int) -> str | None:
    """The DSL line of line ``line`` of the build's C++ file ``rel``: the ``// @ file:line`` marker
    on it, or on the nearest line above that has one (a task block's, a statement's)."""
    try:
        lines = (work / rel).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for text in reversed(lines[:line]):
        m = DSL_MARKER.search(text)
        if m:
            return f"{m[1]}:{m[2]}"
    return None


def _next_commands(rep: Report, work: Path) -> list[str]:
    task = rep.culprit.task
    out: list[str] = []
    if rep.fix is not None and rep.fix.diff:
        out.append(f"git apply {work}/{DFX_DIR}/{TRIAGE_DIR}/{FIX_DIFF}   # the verified fix, from the repository root")
    if task is not None and rep.category in ("crash", "hang", "out_of_bounds", "nan", "race", "uninitialized"):
        out.append(f"tilescope deps {work} --task {task}")
    if rep.category in ("crash", "hang", "nan", "out_of_bounds") and task is not None:
        out.append(f"tilescope replay {work} --task {task}")
    if rep.category in ("compile_error", "signature"):
        out.append("fix the named line, or regenerate the build from the DSL source (run without --runtime-dir)")
    c = rep.culprit
    if rep.category == "uninitialized" and (c.op == "store" or (c.op == "range" and c.kernel)):  # a kernel's own gap
        out.append("compile with --strict to make a kernel that cannot write part of an Out param a compile error")
    return [c for c in out if c not in rep.next]


def add_triage_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``tilescope triage``'s arguments."""
    p.add_argument("build_dir", metavar="BUILD", type=PATH_ARG, help="a build directory with saved data (--save-data)")
    p.add_argument("--golden-data", type=PATH_ARG, default=None, metavar="DIR", help="use this data directory instead of BUILD/data")
    p.add_argument("--budget", type=seconds_arg, default=None, metavar="SECONDS",
                   help=f"stop looking after this long (default $TILESCOPE_TRIAGE_BUDGET, else {DEFAULT_BUDGET:g})")
    p.add_argument("--task-timeout", type=seconds_arg, default=None, metavar="SECONDS", dest="task_timeout_s",
                   help="a task of the program that runs this long (CPU plus blocked time) is a hang "
                        f"(default: a quarter of the budget, 1 to {HANG_TIMEOUT_S:g})")  # fmt: skip
    p.add_argument("--rtol", type=tolerance_arg, default=None, help="relative tolerance (default: the data's)")
    p.add_argument("--atol", type=tolerance_arg, default=None, help="absolute tolerance (default: the data's)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (localize's format) instead")
    p.add_argument("--fix", action="store_true",
                   help="propose an edit of the DSL source, verified on a copy against the saved data")  # fmt: skip
    return p


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope triage``: 0 when the build passes (deterministically), 1 otherwise."""
    return report_cli("triage", lambda: triage(args.build_dir, args.golden_data, budget=args.budget,
                                               task_timeout_s=args.task_timeout_s, rtol=args.rtol,
                                               atol=args.atol, fix=args.fix), args.json,
                      lambda rep: rep.category == "pass" and rep.deterministic is not False)  # fmt: skip


__all__ = ["DEFAULT_BUDGET", "TriageError", "add_triage_args", "error_report", "run_cli", "triage"]
