"""The steps of ``tilescope triage`` that run the program again (shuffled runs, the access audit,
poison runs, localize, the op that makes NaN/Inf), and the contained child process that runs them.

Invariants:
- These steps run in a child process of their own (``child_main``, started by ``harness.triage``):
  a kernel that reads outside its tensors can fault on the guard pages of these runs (the first,
  isolated run has none), and must not take triage with it. The request (build, data, budget,
  the mismatching elements, the NaN report) and the answer (the report's fields) are files under
  ``dfx_outputs/triage/``; a crash in the child leaves its crash report there for the parent.
- A step that cannot run (no budget left, a build that does not compile with the audit on, a run
  that fails) is a limitation, never the verdict; the verdict comes from the first step that
  explains the elements that are wrong.
"""

from __future__ import annotations

import json
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.audit import audit_run
from tilescope.analysis.data import load_snapshot
from tilescope.analysis.fix.search import FixData, fix_data, propose, repair_culprit
from tilescope.analysis.hazards import Span, dead_writes
from tilescope.analysis.localize.localize_command import internal_error, localize, nan_op
from tilescope.analysis.localize.program_hypotheses import program_loop_bound
from tilescope.analysis.localize.source_map import (
    kernel_sites,
    orchestration_loops,
    orchestration_sites,
    site_lines,
    statement_site,
    statements,
    submits,
)
from tilescope.analysis.poison import PoisonedRead, poison_run
from tilescope.analysis.progress import Progress
from tilescope.analysis.recorded import crash_report_to
from tilescope.analysis.report import Culprit, Report, Step
from tilescope.analysis.shuffle import shuffle_lines, shuffle_runs
from tilescope.build.paths import atomic_write
from tilescope.codegen.cpp_common import display_path
from tilescope.errors import RuntimeFailure, TilescopeError
from tilescope.ir.nodes import Store
from tilescope.launch.inputs_kept import inputs_unchecked
from tilescope.launch.program import CompiledProgram

# dfx_outputs/triage/ of the build, each name with the triaging process's pid before its suffix:
REQUEST = "request.pt"  # what the child is asked
ANSWER = "answer.json"  # what it found
CRASH = "crash_report.txt"  # where a crash in the child is reported
SHUFFLE_PASS = 6  # shuffled runs that check a passing build is deterministic
SHUFFLE_WRONG = 4  # shuffled runs that look for nondeterminism behind a wrong answer
# the report's fields a step may set or add to (the rest belong to the parent)
FIELDS = ("category", "summary", "verdict", "culprit", "evidence", "limitations", "next", "steps", "deterministic",
          "fingerprint", "tolerance", "fix")  # fmt: skip


NO_BUDGET = "no budget left"  # how a limitation that a step did not run for want of budget starts
REPAIRS_NAME = ("algorithm", "nan", "precision")  # verdicts whose line the smallest repair may name
WALL_STRETCH = 10  # how many times its budget a step may take in wall time on a busy machine before it is stopped


def cpu_seconds() -> float:
    """CPU time of this process (every thread: the sim's workers too) and of the child processes
    it has waited for (the compiler, an isolated run, the contained steps)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class Steps:
    """A triage in progress: its report, its budget, and how it says what it is doing.

    The budget counts the tool's own CPU time, not the wall clock: a machine busy with other work
    slows an answer down but does not use the budget up (a step stopped for taking too long is
    one that ran ``WALL_STRETCH`` times its budget in wall time)."""

    def __init__(self, rep: Report, budget: float, say: Callable[[str], None]):
        self.rep, self.budget, self.say = rep, budget, say
        self.started = time.perf_counter()
        self.cpu_started = cpu_seconds()

    def left(self) -> float:
        """CPU seconds of the budget left."""
        return self.budget - (cpu_seconds() - self.cpu_started)

    def step(self, name: str, fn: Callable[[], Any], task_timeout_s: float | None = None) -> Any:
        """Run one step, timed and announced (with the hang budget it ran under, if any); what it
        raises is the caller's."""
        self.say(f"{name} ({self.left():.0f}s of the budget left)")
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.rep.steps.append(Step(name, round(time.perf_counter() - t0, 3), task_timeout_s))

    def verdict(self, category: str, summary: str, culprit: Culprit | None = None, *evidence: str) -> None:
        """Set the category, the summary and the culprit; add the evidence."""
        self.rep.category, self.rep.summary = category, summary
        if culprit is not None:
            self.rep.culprit = culprit
        self.rep.evidence += [e for e in evidence if e]

    def undecided(self) -> None:
        """No step named the fault: ``unknown``, said for what it is. The budget is blamed only
        when it ran out (a step skipped for it, or none left); otherwise the steps ran and none
        explains the failure, and the first thing that could not run is named."""
        if not self.rep.category:
            lims = self.rep.limitations
            if self.left() <= 0 or any(x.startswith(NO_BUDGET) for x in lims):
                self.verdict("unknown", "triage could not name the fault within its budget")
            else:
                self.verdict("unknown", "triage could not name the fault: the steps that ran explain none of it"
                             + (f"; what could not run: {lims[0]}" if lims else ""))  # fmt: skip


class Analysis(Steps):
    """The steps that run the build again, on its data (in the child process)."""

    def __init__(self, rep: Report, budget: float, say: Callable[[str], None], build: CompiledProgram,
                 data: Path, bad: dict[str, torch.Tensor]):  # fmt: skip
        super().__init__(rep, budget, say)
        self.build, self.data, self.bad = build, data, bad
        self.inputs, self.golden = load_snapshot(data, list(build.args))
        self.dead: list[tuple[Span, Span, str]] = []  # the audit's overwritten writes to wrong outputs
        self.kernels: dict[int, str] = {}  # task id -> kernel, from the audit

    def wrong(self) -> None:
        """Wrong values: the access audit, the poison runs, shuffled runs, then localize."""
        for check in (self.audited, self.poisoned, self.overwritten, self.shuffled, self.localized):
            if check():
                return

    def nan(self, f: dict[str, Any]) -> None:
        """A run that made NaN/Inf (``f``: the first task, its kernel, the NaN check's message)."""
        # NOTE: finite inputs can still be memory nothing wrote (zeros): a divide by a never-stored sum
        # makes Inf in the task that reads it, not in the one that forgot to store it
        self.rep.evidence.append(f["message"])
        checked = self.left() >= 5
        if self.poisoned():
            return
        task, kernel = f["task_id"], f["kernel"]
        culprit = Culprit(task if task >= 0 else None, kernel or None)
        unchecked = "" if checked else f" (not checked for memory nothing wrote: {NO_BUDGET} for the poison runs)"
        self.verdict("nan", f"task {task} (kernel {kernel}) makes NaN/Inf from finite inputs{unchecked}", culprit)
        if self.left() < 5:
            self.rep.limitations.append(f"{NO_BUDGET} for the op by op replay of that task")
            return
        try:
            site = self.step("find the op that makes NaN/Inf", lambda: nan_op(self.build, self.inputs, task))
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"op by op: {e}")
            return
        if site is not None:
            culprit.op, culprit.dsl_line, culprit.cpp_line = site[0], site[1], site[2]
            self.rep.evidence.append(site[3])
            return
        # NOTE: an Inf the program asks for (a fill=, a ts.full) that reaches an output was let through by a wrong value
        self.rep.evidence.append(
            f"no op of task {task} makes NaN/Inf from finite values: the Inf in its outputs is one the program asks "
            "for (a fill=, a ts.full), carried to them; the value that let it through is wrong"
        )
        self.localized(nan=True)

    def passing(self) -> None:
        """Outputs within tolerance: are they the same on every schedule?"""
        if self.left() < 5:
            self.verdict("pass", "the outputs are within tolerance of the golden")
            self.rep.limitations.append(f"{NO_BUDGET} to check that the outputs stay the same across schedules")
            return
        rep = self.shuffle(SHUFFLE_PASS)
        runs = len(rep.runs)
        if self.failed_alike(rep):
            self.verdict("pass", "the outputs are within tolerance of the golden")
            return
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

    def failed_alike(self, rep) -> bool:
        """Whether every shuffled run failed the same way (a limitation: no schedule was compared)."""
        if rep.same_failure is None:
            return False
        self.rep.limitations.append(f"the shuffled runs compared no schedules: {shuffle_lines(rep)[0]}")
        return True

    def race_from_shuffle(self, rep, summary: str) -> None:
        """Shuffled runs that differ: the race they show."""
        first = rep.first
        # NOTE: a task whose inputs already differed is where the race showed, not who made it
        culprit = Culprit(first.task, first.kernel) if first is not None and first.inputs_agree else None
        self.verdict("race", summary, culprit, *shuffle_lines(rep))

    def audited(self) -> bool:
        """The access audit: accesses outside a task's regions, unordered overlaps."""
        if self.left() < 10:
            self.rep.limitations.append(f"{NO_BUDGET} for the access audit")
            return False
        try:
            a = self.step("access audit (what each task loaded and stored)", lambda: audit_run(self.build, self.inputs))
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"access audit: {e}")
            return False
        if a.failure is not None:
            self.rep.limitations.append(f"the access audit run failed part way: {a.failure.splitlines()[0]}")
        if not a.strays and not a.hazards:
            if a.failure is not None:
                return False
            # NOTE: one kernel's tasks overwriting each other; an init kernel's write lost to the compute is not a bug
            self.dead = [(w, by, a.names[w.buffer][0]) for w, by in dead_writes(a.declared)
                         if w.buffer in a.names and a.names[w.buffer][0] in self.bad
                         and a.kernels.get(w.task) == a.kernels.get(by.task)]  # fmt: skip
            self.kernels = a.kernels
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
        """Poison runs: the wrong elements depend on memory nothing wrote?"""
        if self.left() < 5:
            self.rep.limitations.append(f"{NO_BUDGET} for the poison runs")
            return False
        try:
            p = self.step("poison runs (never-written memory)", lambda: poison_run(self.build, self.inputs))
        except (RuntimeFailure, TilescopeError, OSError) as e:
            self.rep.limitations.append(f"poison runs: {str(e).splitlines()[0]}")
            return False
        rep = p.report
        wrong = {n: m for n, m in rep.masks.items() if n in self.bad and bool((m & self.bad[n]).any())}
        if not wrong:
            said = "no output depends on memory nothing wrote" if not rep.outputs else (
                "the outputs that depend on memory nothing wrote are not the wrong ones: "
                + ", ".join(f"{n} at {w}" for n, (_, _, w) in rep.outputs.items()))  # fmt: skip
            self.rep.evidence.append(f"poison runs: {said}")
            return False
        blamed = next((u for u in rep.unstored if u.read_later), None)
        r = rep.reads[0] if rep.reads else None
        if blamed is None and r is None and rep.outputs and rep.unstored:
            blamed = rep.unstored[0]  # NOTE: no read explains the outputs' poison: the part a task never stored does
        if blamed is not None:
            found = p.static_for(blamed.kernel, blamed.param)
            at = found["at"] if found else None
            path, _, line = (at or "").rpartition(":")
            culprit = Culprit(blamed.task, blamed.kernel, "store", f"{display_path(path)}:{line}" if path else at)
            if not path:  # NOTE: the compile saw no gap (run-time counts): the kernel's one store into the param
                culprit.dsl_line, culprit.cpp_line = self.only_store(blamed.kernel, blamed.param)
            summary = f"kernel {blamed.kernel} does not store all of its output {blamed.param}: {blamed.where} is never written"
        else:
            culprit = Culprit(r.task, r.kernel) if r else None
            summary = (f"task {r.task} (kernel {r.kernel}) reads memory that nothing wrote: {r.where}" if r else
                       "outputs depend on memory that nothing wrote")  # fmt: skip
        self.verdict("uninitialized", summary, culprit, *p.lines())
        if self.overwritten(keep_category=True):
            return True
        if blamed is None and r is not None and r.mask is not None:
            self.read_as_nan(r)
        self.loop_off()
        return True

    def only_store(self, kernel: str, param: str) -> tuple[str | None, str | None]:
        """The DSL and C++ lines of ``kernel``'s store into ``param`` when it has exactly one."""
        try:
            k = self.build.program().kernel(kernel)
        except (KeyError, OSError, TilescopeError):
            return None, None
        stores = [s for s in statements(k.body) if isinstance(s, Store) and s.tensor.name == param]
        if len(stores) != 1:
            return None, None
        return site_lines(statement_site(self.build, k, stores[0], self.rep.limitations))

    def read_as_nan(self, r: PoisonedRead) -> None:
        """Name the op of task ``r.task`` that reads the memory nothing wrote: its replay on a probe
        build with those elements NaN, and the first statement whose tile holds NaN."""
        if self.left() < 5:
            return
        try:
            site = self.step("replay the reader with never-written memory as NaN", lambda: nan_op(
                self.build, self.inputs, r.task, {r.arg: r.mask}))  # fmt: skip
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"op by op, never-written memory as NaN: {str(e).splitlines()[0]}")
            return
        if site is None:
            return
        c = self.rep.culprit
        c.op, c.dsl_line, c.cpp_line = site[0], site[1], site[2]
        self.rep.evidence.append(
            f"with the {r.elements} element(s) of {r.param} nothing wrote read as NaN, task {r.task}'s first statement "
            f"to hold NaN is {site[1] or site[2]} (op {site[0]}): it reads them"
        )

    def overwritten(self, keep_category: bool = False) -> bool:
        """Name the call when a wrong output's region is written by several tasks, each write lost
        to the next before anything reads it (the last writer wins: a region that should have
        moved with the loop)."""
        if not self.dead:
            return False
        first, _, name = self.dead[0]
        kernel = self.kernels.get(first.task)
        chain = [(w, by) for w, by, n in self.dead if n == name and w.shown == first.shown]
        writers = sorted({t for w, by in chain for t in (w.task, by.task)})
        region = f"{name}[" + ", ".join(f"{lo}:{hi}" for lo, hi in first.shown) + "]" if first.shown else name
        site = self.call_site(kernel)
        shown = ", ".join(map(str, writers[:8])) + (" …" if len(writers) > 8 else "")
        said = (f"tasks {shown} (kernel {kernel}) all write {region}, each write lost to the next before anything "
                f"reads it: only task {writers[-1]}'s survives")  # fmt: skip
        lost = [w.task for w, _ in chain]
        culprit = Culprit(first.task, kernel, "call", *(site or (None, None)))
        summary = f"several tasks write the same region {region} of output {name}; only the last write survives"
        if keep_category:
            self.rep.culprit = culprit
            self.rep.summary += f"; {summary}"
            self.rep.evidence.append(said)
        else:
            self.verdict("algorithm", summary, culprit, said)
        if site is None:
            self.rep.limitations.append(f"kernel {kernel} is called from several lines: the call is named by its "
                                        f"tasks ({', '.join(map(str, lost[:8]))})")  # fmt: skip
        return True

    def call_site(self, kernel: str | None) -> tuple[str | None, str] | None:
        """The DSL and C++ lines of the orchestration's one call of ``kernel`` (None: it has several, or none)."""
        program = self.build.program()
        calls = [e for e in submits(program.body) if e.kernel == kernel]
        if len(calls) != 1:
            return None
        sites, why = orchestration_sites(self.build, program)
        site = sites.get(id(calls[0]))
        if site is None:
            if why:
                self.rep.limitations.append(why)
            return None
        return site.dsl_line, site.cpp

    def loop_off(self) -> None:
        """Name the loop when one of the program's loops, one step longer or shorter, makes every
        output the golden's (a loop that stops a block short leaves the elements unwritten)."""
        if self.left() < 5:
            return
        args = [self.inputs[a.name] for a in self.build.args]
        outs = [(k, a.name) for k, a in enumerate(self.build.args) if a.is_output]
        program = self.build.program()
        try:
            found = self.step("a loop one step off?", lambda: program_loop_bound(
                program, args, self.golden, outs, self.rep.rtol, self.rep.atol))  # fmt: skip
        except Exception as e:  # noqa: BLE001 - a refinement's defect must not take the verdict with it
            self.rep.limitations.append(f"the loop-bound hypothesis could not be tested: {internal_error(e, 'triage')}")
            return
        if found is None:
            return
        if found.kernel is None:
            sites, _ = orchestration_loops(self.build, program)
            dsl, cpp = sites.get(id(found.loop), (None, None))
        else:
            ksites, _ = kernel_sites(self.build, program.kernel(found.kernel))
            site = ksites.get(id(found.loop))
            dsl, cpp = (site.dsl_line, site.cpp) if site is not None else (None, None)
        c = self.rep.culprit
        if c.kernel != found.kernel:
            c.task = None  # the loop's own tasks: the orchestration has none, another kernel's are not the one blamed
        c.kernel, c.op, c.dsl_line, c.cpp_line = found.kernel, "range", dsl, cpp
        self.rep.evidence.append(found.text(dsl))

    def shuffled(self) -> bool:
        """Shuffled runs: the wrong answer depends on the schedule?"""
        if self.left() < 10:
            self.rep.limitations.append(f"{NO_BUDGET} for shuffled runs")
            return False
        rep = self.shuffle(SHUFFLE_WRONG)
        if self.failed_alike(rep):
            return False
        if rep.deterministic:
            self.rep.evidence.append(f"{len(rep.runs)} shuffled runs gave the same outputs, bit for bit")
            return False
        self.race_from_shuffle(rep, "the outputs depend on the schedule")
        return True

    def repaired(self, data: FixData, keep: bool) -> None:
        """No reference names the culprit's line: the smallest catalogue repair that makes every
        output match (on the saved data and the second input set) names it. With ``keep``
        (``--fix``), that repair is the report's fix."""
        fix = self.step("name the line by the smallest repair that makes the outputs match",
                        lambda: propose(self.build, self.rep, data, time.perf_counter() + max(self.left(), 10),
                                        parallel=True))  # fmt: skip
        named = repair_culprit(self.build, fix, self.rep.culprit)
        if keep:
            self.rep.fix = fix
        if named is None:
            if fix.search is not None:
                self.rep.limitations.append(f"no catalogue repair made the outputs match ({fix.search.screened} "
                                            "candidates screened): the line is not named")  # fmt: skip
            return
        e = fix.edit
        self.rep.culprit = named
        made = "" if fix.kind == "dsl" else f" (made in the build's IR dump {e.file}:{e.line}, the program as built)"
        self.rep.evidence.append(f"no reference names the line: the smallest catalogue repair that makes every output "
                                 f"match, verified on {fix.verified_on}, edits {named.dsl_line}{made}: "
                                 f"`{e.before.strip()}` -> `{e.after.strip()}`")  # fmt: skip
        if not keep:
            self.rep.next.append(f"tilescope triage {self.build.work_dir} --fix   # the repair as a diff")

    def localized(self, nan: bool = False) -> bool:
        """localize: codegen, algorithm or precision. With ``nan`` (an Inf the program asks for
        reached an output), the category stays ``nan`` and localize names the wrong value that let
        it through."""
        if self.left() < 5:
            self.rep.limitations.append(f"{NO_BUDGET} for localize")
            return False
        try:
            loc = self.step("localize (codegen, algorithm or precision)", lambda: localize(
                self.build.work_dir, self.data, rtol=self.rep.rtol, atol=self.rep.atol))  # fmt: skip
        except (TilescopeError, OSError) as e:
            self.rep.limitations.append(f"localize: {str(e).splitlines()[0]}")
            return False
        self.rep.verdict, self.rep.fingerprint, self.rep.tolerance = loc.verdict, loc.fingerprint, loc.tolerance
        self.rep.limitations += loc.limitations
        if nan and loc.culprit.op is not None:
            summary = f"an Inf the program asks for (a fill=, a ts.full) reaches the outputs, let through by a wrong value: {loc.summary}"
            self.verdict("nan", summary, loc.culprit, *loc.evidence)
        elif not nan:
            self.verdict(loc.category, loc.summary, loc.culprit, *loc.evidence)
        else:
            self.rep.evidence += loc.evidence
        self.rep.next += [n for n in loc.next if n not in self.rep.next]
        return True


STOPPED = "[triage-stopped] "  # the line, on stderr, that says why the child stopped without an answer
STOPPED_STATUS = 3  # the child's exit status when it stopped on an error it could word


def child_main(request: str) -> int:
    """The child's entry: run the steps the request asks for, write the answer next to it. An error
    stops it with ``STOPPED_STATUS`` and one ``STOPPED`` line saying why (never a traceback)."""
    import sys

    try:
        return _child_steps(request)
    except TilescopeError as e:
        said = str(e).strip().splitlines()
        print(STOPPED + (said[0] if said else type(e).__name__), file=sys.stderr, flush=True)
    except Exception as e:  # noqa: BLE001 - a defect, worded in one line for the parent's report
        print(STOPPED + internal_error(e, "triage"), file=sys.stderr, flush=True)
    return STOPPED_STATUS


def _child_steps(request: str) -> int:
    req = torch.load(request, weights_only=False)
    work = Path(req["work"])
    crash_report_to.set(Path(req["crash_report"]))
    rep = Report(req["program"], str(work), req["data"], "", "", tool="triage", rtol=req["rtol"],
                         atol=req["atol"])  # fmt: skip
    say = Progress("triage", enabled=req["progress"])
    a = Analysis(rep, req["budget"], say, CompiledProgram.from_dir(work), Path(req["data"]), req["bad"])
    with inputs_unchecked():  # NOTE: the access audit names a store into an input; the steps watch, never stop
        if req["mode"] == "pass":
            a.passing()
        elif req["mode"] == "nan":
            a.nan(req["nan"])
        else:
            a.wrong()
    a.undecided()  # NOTE: a fix is proposed for a verdict, never for an empty one
    data = fix_data(a.data, a.build, a.inputs, a.golden)
    if rep.category in REPAIRS_NAME and not rep.culprit.dsl_line and a.left() >= 5:
        a.repaired(data, bool(req.get("fix")))
    if req.get("fix") and rep.fix is None:
        rep.fix = a.step("propose a fix and verify it on the saved data",
                         lambda: propose(a.build, rep, data, time.perf_counter() + max(a.left(), 10), parallel=True))  # fmt: skip
    answer = {k: v for k, v in rep.to_json().items() if k in FIELDS}
    atomic_write(Path(req["answer"]), json.dumps(answer, default=str) + "\n")
    return 0
