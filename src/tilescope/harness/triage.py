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
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tilescope._logging import configure
from tilescope.build.manifest import as_build_dir
from tilescope.build.paths import DATA_DIR, TRIAGE_DIR
from tilescope.build.signature_check import SignatureMismatch
from tilescope.debug.localize.metrics import close
from tilescope.debug.localize.report import Culprit, LocalizeReport, write_report
from tilescope.errors import ArgumentError, DSLError, RuntimeFailure, TilescopeError
from tilescope.harness.audit import audit_run
from tilescope.harness.cli import Progress, tolerance_arg
from tilescope.harness.compare import check_tolerances
from tilescope.harness.data import DataError, load_meta, load_snapshot
from tilescope.harness.localize import internal_error, localize, nan_op
from tilescope.harness.poison import poison_run
from tilescope.harness.shuffle import shuffle_lines, shuffle_runs
from tilescope.launch.program import CompiledProgram
from tilescope.runtime.guarded import guarded_args
from tilescope.toolchain.compiler import CompileError

DEFAULT_BUDGET = 60.0
CATEGORIES = (
    "compile_error", "bad_input", "signature", "crash", "hang", "deadlock", "out_of_bounds", "nan", "race",
    "uninitialized", "codegen", "algorithm", "precision", "pass", "unknown",
)  # fmt: skip
_SHUFFLE_PASS = 6  # shuffled runs that check a passing build is deterministic
_SHUFFLE_WRONG = 4  # shuffled runs that look for nondeterminism behind a wrong answer
_BOUNDS = re.compile(r"kernel (?P<kernel>\w+): (?P<op>load|store) of (?P<t>\w+) \(arg \d+\) at (?P<dsl>\S+:\d+):")
_CPP_AT = re.compile(r"^(?P<file>[\w./-]+\.cpp)(?::(?P<line>\d+))?:")


class TriageError(TilescopeError):
    """triage cannot start: not a build, no saved data."""


def triage(
    build_dir: str | os.PathLike,
    golden_data: str | os.PathLike | None = None,
    *,
    budget: float = DEFAULT_BUDGET,
    rtol: float | None = None,
    atol: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> LocalizeReport:
    """Triage the build ``build_dir`` on its saved data (see the module docstring); the report is
    also written to ``dfx_outputs/triage/report.json``.

    Raises:
        TriageError: not a build directory, or no saved data to run on.
    """
    if not (isinstance(budget, int | float) and budget > 0):
        raise TriageError(f"budget={budget!r}: expected a number of seconds > 0")
    work = as_build_dir(build_dir)
    t = _Triage(work, golden_data, float(budget), progress or Progress("triage"))
    t.run(rtol, atol)
    return t.finish()


class _Triage:
    def __init__(self, work: Path, golden_data, budget: float, say: Callable[[str], None]):
        self.work, self.golden_data, self.budget, self.say = work, golden_data, budget, say
        self.started = time.perf_counter()
        self.rep = LocalizeReport(work.name, str(work), "", "", "", tool="triage")
        self.build: CompiledProgram | None = None
        self.inputs: dict[str, Any] = {}

    # -- bookkeeping ---------------------------------------------------------------------------

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.started)

    def step(self, name: str, fn: Callable[[], Any], **info: Any) -> Any:
        """Run one step, timed and announced (``info`` is kept with it); what it raises is the caller's."""
        self.say(f"{name} ({self.left():.0f}s of the budget left)")
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.rep.steps.append({"step": name, "seconds": round(time.perf_counter() - t0, 3), **info})

    def verdict(self, category: str, summary: str, culprit: Culprit | None = None, *evidence: str) -> None:
        self.rep.category, self.rep.summary = category, summary
        if culprit is not None:
            self.rep.culprit = culprit
        self.rep.evidence += [e for e in evidence if e]

    def finish(self) -> LocalizeReport:
        if not self.rep.category:
            self.verdict("unknown", "triage could not name the fault within its budget")
        self.rep.elapsed_s = round(time.perf_counter() - self.started, 3)
        self.rep.next += _next_commands(self.rep, self.work)
        try:
            write_report(self.work, self.rep, TRIAGE_DIR)
        except OSError as e:
            self.rep.limitations.append(f"the report could not be written into {self.work}: {e}")
        return self.rep

    # -- the steps ------------------------------------------------------------------------------

    def run(self, rtol: float | None, atol: float | None) -> None:
        if not self.load():
            return
        golden = self.data(rtol, atol)
        if golden is None:
            return
        outputs = self.first_run()
        if outputs is None:
            return
        bad = {k: v for k, v in golden.items() if k in outputs and not bool(close(outputs[k], v, self.rep.rtol,
                                                                                   self.rep.atol).all())}  # fmt: skip
        if not bad:
            self.passing()
            return
        self.rep.evidence.append(
            "outputs outside rtol/atol of the golden: "
            + ", ".join(f"{k} ({int((~close(outputs[k], v, self.rep.rtol, self.rep.atol)).sum())} of {v.numel()})"
                        for k, v in bad.items())  # fmt: skip
        )
        for check in (self.audited, self.poisoned, self.shuffled, self.localized):
            if check():
                return

    def load(self) -> bool:
        try:
            self.build = self.step("load the build", lambda: CompiledProgram.from_dir(self.work))
        except SignatureMismatch as e:
            first = e.problems[0] if e.problems else str(e)
            m = _CPP_AT.match(first)
            cpp = (m["file"] + (f":{m['line']}" if m["line"] else "")) if m else None
            self.verdict("signature", f"hand-edited C++ no longer matches the build's signatures: {first}",
                         Culprit(cpp_line=cpp), *e.problems)  # fmt: skip
            return False
        except CompileError as e:
            cpp = f"{e.cpp_file}:{e.cpp_line}" if e.cpp_file and e.cpp_line else None
            self.verdict("compile_error", "hand-edited C++ of the build does not compile",
                         Culprit(dsl_line=e.dsl_loc, cpp_line=cpp), str(e).splitlines()[0])  # fmt: skip
            return False
        except DSLError as e:
            self.verdict("compile_error", f"the build's edited IR does not compile: {e.message}",
                         Culprit(dsl_line=str(e.loc) if e.loc else None))  # fmt: skip
            return False
        self.rep.program = self.build.name
        return True

    def data(self, rtol, atol) -> dict[str, torch.Tensor] | None:
        data = Path(self.golden_data) if self.golden_data is not None else self.work / DATA_DIR
        if self.golden_data is None and not (data / "in").is_dir():
            raise TriageError(
                f"{self.work} has no saved data ({data}/in and out): triage reproduces a failure on the exact data of "
                f"a run. Save them: python model.py --runtime-dir {self.work} --save-data, or run the model script "
                "with --triage; or pass --golden-data DIR"
            )
        self.rep.data = str(data)
        try:
            meta = load_meta(data, given=[k for k, v in (("rtol", rtol), ("atol", atol)) if v is not None])
            self.rep.rtol = float(meta.get("rtol", 1e-5) if rtol is None else rtol)
            self.rep.atol = float(meta.get("atol", 1e-5) if atol is None else atol)
            check_tolerances(self.rep.rtol, self.rep.atol)
            self.inputs, golden = self.step("load the data", lambda: load_snapshot(data, list(self.build.args)))
        except (DataError, ArgumentError) as e:
            lines = [x.strip() for x in str(e).splitlines() if x.strip()]
            first = lines[1] if len(lines) > 1 else lines[0]
            self.verdict("bad_input", f"the data do not fit the program's arguments: {first}", None, *lines)
            return None
        return golden

    def first_run(self) -> dict[str, torch.Tensor] | None:
        """The run itself, isolated, with the NaN check on; its outputs, or None when it failed."""
        assert self.build is not None
        args = guarded_args([self.inputs[a.name] for a in self.build.args])
        budget = max(1.0, min(DEFAULT_BUDGET, self.left() / 4))
        try:
            info = self.step("run isolated, NaN check on", lambda: self.build.run(
                *args, isolate=True, nan_check=True, task_timeout_s=budget, log_level="null"),
                task_timeout_s=round(budget, 3))  # fmt: skip
        except ArgumentError as e:
            self.verdict("bad_input", str(e).splitlines()[0])
            return None
        except RuntimeFailure as e:
            self.failed(getattr(e, "failure", None), str(e))
            return None
        if info.nan is not None:
            self.nan(info.nan)
            return None
        return {a.name: args[i] for i, a in enumerate(self.build.args) if a.is_output}

    def failed(self, f, text: str) -> None:
        if f is None:
            self.verdict("crash", text.splitlines()[0])
            return
        frame = f.where()
        culprit = Culprit(f.task_id if f.task_id >= 0 else None, f.kernel or None, None,
                          frame.dsl if frame and frame.dsl else None,
                          _in_build(self.work, frame.cpp) if frame and frame.cpp else None)  # fmt: skip
        details = [*f.details[:6]]
        if f.kind == "kernel_error" and (m := _BOUNDS.search(f.message)):
            culprit.op, culprit.dsl_line = m["op"], m["dsl"]
            self.verdict("out_of_bounds", f"a checked {m['op']} of {m['t']} left its tensor", culprit, f.message, *details)
        elif f.kind == "guard":
            self.verdict("out_of_bounds", "a kernel wrote outside its tensor (a guard zone changed)", culprit, f.message,
                         *details)  # fmt: skip
        elif f.kind == "timeout":
            self.verdict("hang", "a task (or the orchestration) never finished: stopped past its budget", culprit,
                         f.message, *details)  # fmt: skip
        elif f.kind == "deadlock":
            self.verdict("deadlock", "tasks wait for each other, or for a task never submitted", culprit, f.message,
                         *details)  # fmt: skip
        elif f.kind == "interrupted":
            raise KeyboardInterrupt
        else:
            self.verdict("crash", f"the run failed ({f.kind})", culprit, f.message, *details)

    def nan(self, f) -> None:
        # NOTE: finite inputs can still be memory nothing wrote (zeros): a divide by a never-stored sum
        # makes Inf in the task that reads it, not in the one that forgot to store it
        self.rep.evidence.append(f.message)
        if self.poisoned():
            return
        culprit = Culprit(f.task_id if f.task_id >= 0 else None, f.kernel or None)
        self.verdict("nan", f"task {f.task_id} (kernel {f.kernel}) makes NaN/Inf from finite inputs", culprit)
        if self.left() < 5:
            self.rep.limitations.append("no budget left for the op by op replay of that task")
            return
        try:
            site = self.step("find the op that makes NaN/Inf", lambda: nan_op(self.build, self.inputs, f.task_id))
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"op by op: {e}")
            return
        if site is not None:
            culprit.op, culprit.dsl_line, culprit.cpp_line = site[0], site[1], site[2]
            self.rep.evidence.append(site[3])

    def passing(self) -> None:
        if self.left() < 5:
            self.verdict("pass", "the outputs are within tolerance of the golden")
            self.rep.limitations.append("no budget left to check that the outputs stay the same across schedules")
            return
        rep = self.shuffle(_SHUFFLE_PASS)
        runs = len(rep.runs)
        if rep.deterministic:
            self.rep.deterministic = True
            self.verdict("pass", f"the outputs are within tolerance of the golden, and the same bit for bit across "
                                 f"{runs} shuffled schedules", None, *shuffle_lines(rep))  # fmt: skip
            return
        self.rep.deterministic = False
        self.race_from_shuffle(rep, "the outputs pass, but differ between schedules")

    def shuffle(self, wanted: int):
        """Up to ``wanted`` shuffled runs (at least two), none started past half the budget left."""
        deadline = time.perf_counter() + self.left() / 2
        return self.step("shuffled runs", lambda: shuffle_runs(self.build, self.inputs, wanted, say=self.say,
                                                               deadline=deadline))  # fmt: skip

    def race_from_shuffle(self, rep, summary: str) -> None:
        first = rep.first
        culprit = Culprit(first.task, first.kernel) if first is not None else None
        self.verdict("race", summary, culprit, *shuffle_lines(rep))

    def audited(self) -> bool:
        if self.left() < 10:
            self.rep.limitations.append("no budget left for the access audit")
            return False
        try:
            a = self.step("access audit (what each task loaded and stored)", lambda: audit_run(self.build, self.inputs))
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"access audit: {e}")
            return False
        if not a.strays and not a.hazards:
            self.rep.evidence.append(
                f"access audit: every one of {len(a.audited)} loads and stores stayed inside its task's declared regions, "
                "and every overlapping pair of tasks is ordered"
            )
            return False
        racing = {t for h in a.hazards for t in (h.first.task, h.second.task)}
        stray = next((st for st in a.strays if st.access.task in racing), a.strays[0] if a.strays else None)
        lines = [a.stray_text(st) for st in a.strays[:5]] + [a.hazard_text(h) for h in a.hazards[:5]]
        if stray is None:  # unordered declared regions: the graph itself is wrong
            h = a.hazards[0]
            self.verdict("race", "two tasks touch the same region, one writing, and nothing orders them",
                         Culprit(h.second.task, a.kernels.get(h.second.task)), *lines)  # fmt: skip
            return True
        s = stray.access
        culprit = Culprit(s.task, a.kernels.get(s.task), s.op, a.dsl.get((s.task, s.line or 0)),
                          f"{a.sources.get(s.task)}:{s.line}" if s.line else None)  # fmt: skip
        if s.task in racing:
            self.verdict("race", f"task {s.task} (kernel {culprit.kernel}) {'writes' if s.write else 'reads'} outside its "
                                 "declared regions, where another task writes with no dependency between them",
                         culprit, *lines)  # fmt: skip
        else:
            self.verdict("out_of_bounds", f"task {s.task} (kernel {culprit.kernel}) {'writes' if s.write else 'reads'} "
                                          "outside its declared regions", culprit, *lines)  # fmt: skip
        return True

    def poisoned(self) -> bool:
        if self.left() < 5:
            self.rep.limitations.append("no budget left for the poison runs")
            return False
        try:
            p = self.step("poison runs (never-written memory)", lambda: poison_run(self.build, self.inputs))
        except (RuntimeFailure, TilescopeError, OSError) as e:
            self.rep.limitations.append(f"poison runs: {str(e).splitlines()[0]}")
            return False
        rep = p.report
        if not rep.outputs:
            self.rep.evidence.append("poison runs: no output depends on memory nothing wrote")
            return False
        blamed = next((u for u in rep.unstored if u.read_later), None)
        if blamed is not None:
            found = p.static_for(blamed.kernel, blamed.param)
            culprit = Culprit(blamed.task, blamed.kernel, "store", found["at"] if found else None)
            summary = f"kernel {blamed.kernel} does not store all of its output {blamed.param}: {blamed.where} is never written"
        else:
            r = rep.reads[0] if rep.reads else None
            culprit = Culprit(r.task, r.kernel) if r else None
            summary = (f"task {r.task} (kernel {r.kernel}) reads memory that nothing wrote: {r.where}" if r else
                       "outputs depend on memory that nothing wrote")  # fmt: skip
        self.verdict("uninitialized", summary, culprit, *p.lines())
        return True

    def shuffled(self) -> bool:
        if self.left() < 10:
            self.rep.limitations.append("no budget left for shuffled runs")
            return False
        rep = self.shuffle(_SHUFFLE_WRONG)
        if rep.deterministic:
            self.rep.evidence.append(f"{len(rep.runs)} shuffled runs gave the same outputs, bit for bit")
            return False
        self.race_from_shuffle(rep, "the outputs depend on the schedule")
        return True

    def localized(self) -> bool:
        if self.left() < 5:
            self.rep.limitations.append("no budget left for localize")
            return False
        try:
            loc = self.step("localize (codegen, algorithm or precision)", lambda: localize(
                self.work, self.golden_data, rtol=self.rep.rtol, atol=self.rep.atol))  # fmt: skip
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"localize: {str(e).splitlines()[0]}")
            return False
        self.rep.verdict, self.rep.fingerprint, self.rep.tolerance = loc.verdict, loc.fingerprint, loc.tolerance
        self.rep.limitations += loc.limitations
        self.verdict(loc.category, loc.summary, loc.culprit, *loc.evidence)
        self.rep.next += [n for n in loc.next if n not in self.rep.next]
        return True


def compile_error_report(program: str, e: BaseException) -> LocalizeReport | None:
    """The triage of a compile that failed (``--triage`` on a model script that does not compile):
    ``compile_error`` at the DSL line (and the pass after which the IR stopped verifying) or the
    failing C++ line; None for an error that is not a compile error."""
    if isinstance(e, CompileError):
        cpp = f"{e.cpp_file}:{e.cpp_line}" if e.cpp_file and e.cpp_line else None
        culprit, summary = Culprit(dsl_line=e.dsl_loc, cpp_line=cpp), "the generated C++ does not compile"
    elif isinstance(e, DSLError):
        after = re.search(r"IR verification failed after pass (\w+)", str(e))
        culprit = Culprit(op=f"pass {after[1]}" if after else None, dsl_line=str(e.loc) if e.loc else None)
        summary = e.message.splitlines()[0]
    else:
        return None
    rep = LocalizeReport(program, "", "", "compile_error", summary, culprit=culprit, tool="triage")
    rep.evidence += str(e).splitlines()[:6]
    rep.next.append("fix the named line and run again")
    return rep


def _in_build(work: Path, cpp: str) -> str:
    """``/abs/build/kernels/vec/k.cpp:19`` as ``kernels/vec/k.cpp:19`` (a path inside the build)."""
    path, _, line = cpp.rpartition(":")
    try:
        return f"{Path(path).resolve().relative_to(work.resolve())}:{line}"
    except ValueError:
        return cpp


def _next_commands(rep: LocalizeReport, work: Path) -> list[str]:
    task = rep.culprit.task
    out: list[str] = []
    if task is not None and rep.category in ("crash", "hang", "out_of_bounds", "nan", "race", "uninitialized"):
        out.append(f"tilescope deps {work} --task {task}")
    if rep.category in ("crash", "hang", "nan", "out_of_bounds") and task is not None:
        out.append(f"tilescope replay {work} --task {task}")
    if rep.category in ("compile_error", "signature"):
        out.append("fix the named line, or regenerate the build from the DSL source (run without --runtime-dir)")
    if rep.category == "uninitialized":
        out.append("compile with --strict to make a kernel that cannot write part of an Out param a compile error")
    return [c for c in out if c not in rep.next]


def add_triage_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``tilescope triage``'s arguments."""
    p.add_argument("build_dir", metavar="BUILD", help="a build directory with saved data (--save-data)")
    p.add_argument("--golden-data", default=None, metavar="DIR", help="use this data directory instead of BUILD/data")
    p.add_argument("--budget", type=_seconds, default=DEFAULT_BUDGET, metavar="SECONDS",
                   help=f"stop looking after this long (default {DEFAULT_BUDGET:g})")  # fmt: skip
    p.add_argument("--rtol", type=tolerance_arg, default=None, help="relative tolerance (default: the data's)")
    p.add_argument("--atol", type=tolerance_arg, default=None, help="absolute tolerance (default: the data's)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (localize's format) instead")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds > 0")
    return value


def run_cli(args: argparse.Namespace) -> int:
    """``tilescope triage``: 0 when the build passes (deterministically), 1 otherwise."""
    configure("warn")
    try:
        rep = triage(args.build_dir, args.golden_data, budget=args.budget, rtol=args.rtol, atol=args.atol)
    except (TilescopeError, DataError) as e:
        print(f"[ERROR] {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # noqa: BLE001 - a defect of triage itself: said in one line, with where
        print(f"[ERROR] {internal_error(e).replace('localize', 'triage', 1)}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(rep.to_json(), indent=1) if args.json else rep.render())
    return 0 if rep.category == "pass" and rep.deterministic is not False else 1


__all__ = ["DEFAULT_BUDGET", "TriageError", "add_triage_args", "compile_error_report", "run_cli", "triage"]
