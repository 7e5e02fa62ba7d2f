"""From one sim run on saved data to a verdict: the divergence fingerprint, the category, the
culprit and the evidence (``Report``).

The order of the questions:

1. Does sim match the golden at the saved rtol/atol? Then ``pass``. Is the golden itself no
   reference where they differ (a NaN, or an Inf golden_fn's arithmetic made: ``golden_holes``)?
   Then ``bad_input``, naming the golden's line.
2. Does the compiled code do what the program says? Every task is submitted with the regions
   the program gives it (else ``codegen``: the orchestration), and every task, re-executed alone
   from the inputs sim gave it, stays within the error bound of its kernel (else ``codegen``:
   the first such task in task order, whatever happened upstream).
3. Does the program, in exact arithmetic, compute the golden? A float64 run with the error
   bound of the program's dtypes (``bound.py``): the golden within that bound (plus rtol/atol)
   of it means yes, and what remains is ``precision``: ``innocent`` when sim stays within the
   bound (a tolerance is proposed), ``guilty`` when it leaves it (an overflow, a rounding mode,
   an accumulation too narrow). Otherwise ``algorithm``, with the error's signatures.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tilescope.analysis.golden_holes import golden_hole
from tilescope.analysis.golden_trace import GoldenTrace
from tilescope.analysis.localize import metrics
from tilescope.analysis.localize.align import Aligner, align_culprit
from tilescope.analysis.localize.bound import Bounded
from tilescope.analysis.localize.codegen_check import CodegenQuestions
from tilescope.analysis.localize.html import heatmap
from tilescope.analysis.localize.hypotheses import (
    SwappedArguments,
    WrongArgument,
    comparison,
    loop_bound,
    swapped_arguments,
    wrong_argument,
    wrong_offset,
)
from tilescope.analysis.localize.op_naming import expr_op, op_name
from tilescope.analysis.localize.precision import PrecisionQuestions
from tilescope.analysis.localize.program_hypotheses import swapped_offsets
from tilescope.analysis.localize.references import check_references
from tilescope.analysis.localize.signatures import (
    Signature,
    casts_to,
    output_signatures,
    writers,
)
from tilescope.analysis.localize.source_map import (
    argument_line,
    kernel_sites,
    orchestration_sites,
    site_lines,
    statement_site,
    statements,
)
from tilescope.analysis.localize.tasks import (
    CapturedTask,
    captured_tasks,
    outside,
    run_program_recorded,
    sim_submissions,
)
from tilescope.analysis.report import Culprit, FingerprintRow, Report, localize_dump
from tilescope.build.manifest import Build
from tilescope.ir.nodes import Kernel, Program, Store
from tilescope.ir.types import Direction
from tilescope.runtime.interp import run_program
from tilescope.runtime.records import RunReport

_DIRECTED = ("trunc", "floor", "ceil")


@dataclass
class Inputs:
    """What localize works from: the build, its saved data and sim's run on them."""

    build: Build
    data_dir: str
    inputs: dict[str, Any]  # every argument's value before the run
    golden: dict[str, torch.Tensor]
    sim: dict[str, torch.Tensor]  # sim's outputs
    report: RunReport  # sim's records: edges, task arguments, a level-2 dump
    rtol: float
    atol: float
    started: float = field(default_factory=time.perf_counter)
    limitations: list[str] = field(default_factory=list)
    references: dict[str, torch.Tensor] = field(default_factory=dict)  # golden intermediates and probes
    # replays one task on a probe build: (task, shared object) -> (its outputs by arg index, its probes)
    probe_runner: Callable[[CapturedTask, Path], tuple[dict[int, torch.Tensor], list[tuple[int, torch.Tensor]]]] | None = None
    trace: GoldenTrace | None = None  # the golden's own steps (golden_trace)
    no_trace: str | None = None  # why there is no trace


class _Analysis(CodegenQuestions, PrecisionQuestions):
    def __init__(self, src: Inputs):
        self.src = src
        self.build = src.build
        self.program: Program = src.build.program()
        self.kernels: dict[str, Kernel] = {k.name: k for k in self.program.kernels}
        self.outputs = [a for a in self.build.args if a.is_output]
        self.rep = Report(
            self.build.name, str(self.build.work_dir), src.data_dir, "pass", "", rtol=src.rtol, atol=src.atol
        )
        self.rep.limitations += src.limitations
        self.tasks: list[CapturedTask] = []

    # -- runs --------------------------------------------------------------------------------

    def _args(self, wrap) -> list[Any]:
        return [wrap(self.src.inputs[a.name]) if torch.is_tensor(self.src.inputs[a.name]) else self.src.inputs[a.name]
                for a in self.build.args]  # fmt: skip

    def run_reference(self) -> None:
        """interp in the program's dtypes, and the float64 run with its error bounds (as the
        program's casts round, and as round-to-nearest)."""
        iargs = self._args(lambda t: t.clone())
        run_program(self.program, iargs)
        self.interp = {a.name: iargs[i] for i, a in enumerate(self.build.args) if a.is_output}
        bargs = self.bounded_args()
        self.overflows, self.submitted = run_program_recorded(self.program, bargs)
        self.sim_calls = sim_submissions(self.build, self.src.report)  # what the compiled orchestration submitted
        self.exact = {a.name: bargs[i] for i, a in enumerate(self.build.args) if a.is_output}
        if any(c.cast.mode in _DIRECTED for d in ("bf16", "f16", "f32") for c in casts_to(self.program, d)):
            nargs = self.bounded_args()
            run_program_recorded(self.program, nargs, nearest=True)
            self.nearest = {a.name: nargs[i] for i, a in enumerate(self.build.args) if a.is_output}
        else:
            self.nearest = self.exact

    def bounded_args(self) -> list[Any]:
        """The arguments of a bounded run: exact, and an Out's elements marked as never stored
        (a NaN bound) until a store writes them."""
        out = self._args(Bounded.exact)
        for i, a in enumerate(self.build.args):
            if a.direction is Direction.OUT:
                out[i].e.fill_(math.nan)
        return out

    def unstored(self, name: str) -> torch.Tensor:
        """The elements of output ``name`` that mismatch and that no task stored."""
        s, g = self.src.sim[name], self.src.golden[name]
        return torch.isnan(self.exact[name].e) & ~metrics.close(s, g, self.src.rtol, self.src.atol)

    def fingerprint(self) -> None:
        rtol, atol = self.src.rtol, self.src.atol
        for a in self.outputs:
            s, g, i, x = self.src.sim[a.name], self.src.golden[a.name], self.interp[a.name], self.exact[a.name]
            f64 = x.v.to(s.dtype) if s.is_floating_point() else x.v
            for pair, p, q, bound in (
                ("sim~golden", s, g, None),
                ("interp~golden", i, g, None),
                ("float64~golden", f64, g, None),
                ("sim~interp", s, i, None),
                ("sim~float64", s, x.v, x),
                ("interp~float64", i, x.v, x),
                ("golden~float64", g, x.v, x),
            ):
                n, mabs, mrel = metrics.summary(p, q, rtol, atol)
                outside_n = int(outside(p, bound.v, bound.e).sum()) if bound is not None else None
                self.rep.fingerprint.append(FingerprintRow(a.name, pair, n, p.numel(), mabs, mrel, outside_n))

    def row(self, output: str, pair: str) -> FingerprintRow:
        return next(r for r in self.rep.fingerprint if r.output == output and r.pair == pair)

    # -- the questions -----------------------------------------------------------------------

    def run(self) -> Report:
        self.run_reference()
        self.fingerprint()
        rep = self.rep
        mism = {a.name: self.row(a.name, "sim~golden").mismatches for a in self.outputs}
        if not any(mism.values()):
            rep.category = "pass"
            rep.summary = f"every output matches its golden (rtol={self.src.rtol:g}, atol={self.src.atol:g})"
            rep.evidence += [self.pair_text(a.name, "sim~golden") for a in self.outputs]
            return rep
        rep.evidence += [self.pair_text(n, "sim~golden") for n, k in mism.items() if k]
        src = self.src
        hole = golden_hole(src.golden, src.sim, src.inputs, src.rtol, src.atol, src.trace, src.no_trace)
        if hole is not None:  # NOTE: the golden is no reference there: no kernel is blamed for it
            rep.category, rep.summary = "bad_input", hole.summary()
            rep.evidence += hole.evidence()
            return rep
        if self.orchestration_codegen() or self.kernel_codegen():
            return rep
        self.precision_or_algorithm()
        return rep

    def pair_text(self, output: str, pair: str) -> str:
        r = self.row(output, pair)
        a, b = pair.split("~")
        head = f"{output}: {a} vs {b}: "
        if r.mismatches:
            head += f"{r.mismatches} of {r.numel} elements outside rtol/atol"
        else:
            head += "every element within rtol/atol"
        return head + f", max abs diff {metrics.number(r.max_abs)}, max rel diff {metrics.number(r.max_rel)}"

    def precision_or_algorithm(self) -> None:
        rtol, atol = self.src.rtol, self.src.atol
        if any(bool(self.unstored(a.name).any()) for a in self.outputs):
            self.algorithm()
            return
        sim_nonfinite = {  # Inf/NaN where the golden is finite: what an overflow in sim made
            a.name: bool((~torch.isfinite(self.src.sim[a.name].double()) & torch.isfinite(self.src.golden[a.name].double())).any())
            for a in self.outputs if self.src.sim[a.name].is_floating_point()
        }  # fmt: skip
        if self.overflows and any(sim_nonfinite.values()):
            self.blame_overflow(self.overflows[0])
            return
        exact_is_golden = True
        for a in self.outputs:
            x, g = self.nearest[a.name], self.src.golden[a.name].double()
            v = x.v.double()  # bool and int outputs too
            slack = (atol + rtol * g.abs()) + x.e
            far = ((v - g).abs() > slack) & torch.isfinite(x.e)
            far = far | (torch.isnan(g) != torch.isnan(v))
            if bool(far.any()):
                exact_is_golden = False
        if exact_is_golden:
            self.precision()
        else:
            self.algorithm()

    def algorithm(self) -> None:
        rep = self.rep
        rep.category = "algorithm"
        rep.summary = "sim agrees with the program, but the program does not compute the golden, even in float64"
        if self.first_reference():
            return
        ws = writers(self.build, self.src.report)
        given = self.task_arguments()
        sigs: list[Signature] = []
        for i, a in enumerate(self.build.args):
            if not a.is_output:
                continue
            s, g = self.src.sim[a.name], self.src.golden[a.name]
            mism = ~metrics.close(s, g, self.src.rtol, self.src.atol)
            if bool(mism.any()):
                sigs += output_signatures(
                    a.name, s, g, mism, ws.get(i, []), self.src.rtol, self.src.atol, given, self.unstored(a.name)
                )
        rep.evidence += [x.text for x in sigs]
        if not sigs:
            return
        best = sigs[0]
        # NOTE: a confident signature names its task; elements no task wrote, alone, may be a region moved
        confident = best.kind in ("unstored", "misplaced", "unwritten") and best.task is not None
        if not confident and any(
                self.tried(q, sigs) for q in (self.wrong_argument, self.compare_off, self.loop_off, self.load_off,
                                              self.aligned)):  # fmt: skip
            return
        rep.culprit = Culprit(best.task, best.kernel)
        if best.kind == "unstored" and best.kernel in self.kernels:
            self.name_store(self.kernels[best.kernel])
        elif best.kind in ("misplaced", "unwritten") and best.task is not None:
            self.name_call(best.task)  # a region given wrong: the call that gave it
        if best.task is not None:
            rep.next.append(f"tilescope deps {self.build.work_dir} --task {best.task}")

    def tried(self, question: Callable[[list[Signature]], bool], sigs: list[Signature]) -> bool:
        """``question(sigs)``; one that fails inside is a limitation, never a failed localize."""
        try:
            return question(sigs)
        except Exception as e:  # noqa: BLE001 - a defect of one question must not take the verdict with it
            self.rep.limitations.append(
                f"{question.__name__.replace('_', ' ')} could not be answered ({type(e).__name__}: {e}); this is a "
                "tilescope defect"
            )
            return False

    def first_wrong(self, sigs: list[Signature]) -> int | None:
        """The first task (in task order) that wrote a mismatching element of an output."""
        wrong = [t for s in sigs if s.kind == "writers" for t in s.detail.get("tasks", [])]
        return min(wrong) if wrong else None

    def wrong_argument(self, sigs: list[Signature]) -> bool:
        """Name the call when the first wrong task's outputs match the golden with two of its
        input arguments exchanged, or one given another region of its tensor (``hypotheses``)."""
        task = self.first_task(sigs)
        if task is None:
            return False
        tasks = self.tasks or captured_tasks(self.build, self.src.report)
        kernel, src = self.kernels[task.kernel], self.src
        found = swapped_arguments(self.build, kernel, task, src.golden, src.rtol, src.atol) or wrong_argument(
            self.build, kernel, task, tasks, src.inputs, src.golden, src.rtol, src.atol)  # fmt: skip
        if found is None:
            return False
        rep = self.rep
        rep.culprit = Culprit(found.task, found.kernel)
        rep.evidence.append(found.text())
        rep.summary += (f"; task {found.task} was given {found.a} and {found.b} in the wrong order"
                        if isinstance(found, SwappedArguments) else
                        f"; task {found.task} was given the wrong region of {found.tensor}")  # fmt: skip
        params = [p.name for p in self.kernels[found.kernel].params]
        arg = found.arg if isinstance(found, WrongArgument) else (params.index(found.a) if found.a in params else None)
        self.name_call(found.task, arg)
        rep.next.append(f"tilescope deps {self.build.work_dir} --task {found.task}")
        return True

    def loop_off(self, sigs: list[Signature]) -> bool:
        """Name a kernel's loop when the first wrong task's outputs match the golden with that
        loop one step longer or shorter (``hypotheses.loop_bound``)."""
        task = self.first_task(sigs)
        kernel = self.kernels[task.kernel] if task is not None else None
        found = kernel and loop_bound(self.build, kernel, task, self.src.golden, self.src.rtol, self.src.atol)
        return bool(found) and self.confirmed(found, kernel, "range", found.loop, "a loop of kernel {k} is one step off")

    def load_off(self, sigs: list[Signature]) -> bool:
        """Name a kernel's load when the first wrong task's outputs match the golden with that
        load reading elsewhere (``hypotheses.wrong_offset``)."""
        task = self.first_task(sigs)
        kernel = self.kernels[task.kernel] if task is not None else None
        found = kernel and wrong_offset(self.build, kernel, task, self.src.golden, self.src.rtol, self.src.atol)
        return bool(found) and self.confirmed(found, kernel, expr_op(found.load), found.stmt,
                                              "a load of kernel {k} reads the wrong place")  # fmt: skip

    def compare_off(self, sigs: list[Signature]) -> bool:
        """Name a comparison when the first wrong task's outputs match the golden with it strict
        where it is not or the reverse, facing the other way, or negated; or a scan, exclusive where
        it is inclusive (or the reverse) or running the other way (``hypotheses.comparison``)."""
        task = self.first_task(sigs)
        kernel = self.kernels[task.kernel] if task is not None else None
        found = kernel and comparison(self.build, kernel, task, self.src.golden, self.src.rtol, self.src.atol)
        return bool(found) and self.confirmed(found, kernel, found.op, found.stmt, found.summary)

    def confirmed(self, found: Any, kernel: Kernel, op: str, stmt: Any, summary: str) -> bool:
        """The culprit a re-run confirmed (``found``: a hypothesis of ``hypotheses`` about task
        ``found.task``): ``op`` of ``stmt`` in ``kernel``, with its lines and the evidence."""
        rep = self.rep
        site = statement_site(self.build, kernel, stmt, rep.limitations)
        rep.culprit = Culprit(found.task, found.kernel, op, *site_lines(site))
        rep.evidence.append(found.text(site.dsl_line if site is not None else None))
        rep.summary += "; " + summary.format(k=kernel.name)
        rep.next.append(f"tilescope deps {self.build.work_dir} --task {found.task}")
        return True

    def first_task(self, sigs: list[Signature]) -> CapturedTask | None:
        """The first wrong task, as captured."""
        tid = self.first_wrong(sigs)
        tasks = self.tasks or captured_tasks(self.build, self.src.report)
        return next((t for t in tasks if t.task_id == tid), None)

    def aligned(self, sigs: list[Signature]) -> bool:
        """Name the culprit by aligning the implicated tasks' values with the golden's own steps
        (``align``); False when there is no trace or alignment names nothing."""
        rep = self.rep
        if self.src.trace is None:
            if self.src.no_trace:
                rep.limitations.append(self.src.no_trace)
            return False
        first = self.first_wrong(sigs)
        if first is None:
            return False
        tasks = self.tasks or captured_tasks(self.build, self.src.report)
        outputs = {a.name for a in self.outputs}
        inputs = {a.name for a in self.build.args if a.is_input}
        aligner = Aligner(self.build, self.src.trace, self.src.golden, self.src.rtol, self.src.atol, outputs, inputs)
        found, said = align_culprit(aligner, self.kernels, tasks, first)
        if found is None:
            rep.evidence += said
            return False
        rep.culprit = Culprit(found.task, found.kernel)
        i = found.instance
        rep.culprit.op = i.op
        rep.evidence += found.evidence
        kernel = self.kernels[found.kernel]
        if i.op == "store" and found.view is not None:  # data movement: which access holds the values' place wrong
            loads = aligner.moved(found.view, i)
            args = [self.src.inputs[a.name] for a in self.build.args]
            outs = [(k, a.name) for k, a in enumerate(self.build.args) if a.is_output]
            swap = swapped_offsets(self.program, kernel, [x.expr for x in loads] + [i.expr], args,
                                   self.src.golden, outs, self.src.rtol, self.src.atol)  # fmt: skip
            if swap is not None:
                access = next((x for x in loads if x.expr is swap.access), i)
                found.stmt, rep.culprit.op = access.stmt, access.op
                site = statement_site(self.build, kernel, access.stmt, rep.limitations)
                rep.evidence.append(swap.text(site.dsl_line if site is not None else None))
        rep.summary += (f"; aligned with the golden's steps, the first value it never computes is made by the "
                        f"{rep.culprit.op} of task {found.task}")  # fmt: skip
        rep.culprit.dsl_line, rep.culprit.cpp_line = site_lines(statement_site(self.build, kernel, found.stmt, rep.limitations))
        rep.next.append(f"tilescope deps {self.build.work_dir} --task {found.task}")
        return True

    def name_store(self, kernel: Kernel) -> None:
        """The culprit's op and lines: the kernel's store, when it has one."""
        stores = [s for s in statements(kernel.body) if isinstance(s, Store)]
        self.rep.culprit.op = "store"
        if len(stores) != 1:
            self.rep.evidence.append(f"kernel {kernel.name} has {len(stores)} stores: check which one skips the elements")
            return
        self.rep.culprit.dsl_line, self.rep.culprit.cpp_line = site_lines(
            statement_site(self.build, kernel, stores[0], self.rep.limitations))

    def first_reference(self) -> bool:
        """Name the culprit from the first intermediate or probe that leaves its reference; False
        when none does (the evidence still says which have none)."""
        rep = self.rep
        tasks = self.tasks or captured_tasks(self.build, self.src.report)
        check = check_references(self.build, self.program, self.src.report, tasks, self.src.references,
                                 self.src.rtol, self.src.atol)  # fmt: skip
        rep.evidence += check.evidence
        rep.limitations += check.unusable
        if check.without:
            rep.evidence.append(
                "no reference for " + ", ".join(check.without)
                + ": golden_fn can give one by name (t['name'] = ...) to compare it too"
            )
        d = check.first
        if d is None:
            return False
        rep.culprit = Culprit(d.task_id, d.kernel)
        rep.summary += f"; the first value that leaves its reference is {d.kind} {d.name}, in task {d.task_id}"
        given = self.task_arguments().get(d.task_id)
        if given:
            rep.evidence.append(
                f"task {d.task_id} computes what its kernel says from the inputs it was given (no task leaves its error "
                f"bound): if the op named is right, those inputs are not; it was given {given}"
            )
        if d.stmt is not None:
            kernel = self.kernels[d.kernel]
            sites, why = kernel_sites(self.build, kernel)
            site = sites.get(id(d.stmt))
            rep.culprit.op = op_name(d.stmt)
            if site is not None:
                rep.culprit.dsl_line, rep.culprit.cpp_line = site.dsl_line, site.cpp
            elif why:
                rep.limitations.append(why)
        else:
            self.name_call(d.task_id)
        rep.next.append(f"tilescope dump {localize_dump(self.build.work_dir)} --task {d.task_id} --stage probe --values"
                        if d.kind == "probe"
                        else f"tilescope deps {self.build.work_dir} --task {d.task_id}")  # fmt: skip
        return True

    def task_arguments(self) -> dict[int, str]:
        """How each task's arguments read, by task id: ``x = x[0:16, 0:16], y = y[0:16, 16:32]``."""
        out = {}
        for tid, (kernel, args) in enumerate(self.sim_calls):
            params = [p.name for p in self.kernels[kernel].params] if kernel in self.kernels else []
            out[tid] = ", ".join(f"{p} = {a}" for p, a in zip(params, args))
        return out

    def name_call(self, task_id: int, arg: int | None = None) -> None:
        """Set the culprit's DSL and C++ lines to the kernel call that submitted ``task_id``: to
        the line of its argument ``arg`` when one is named (a call written over several lines)."""
        if task_id >= len(self.submitted):
            return
        call = self.submitted[task_id].call
        sites, why = orchestration_sites(self.build, self.program)
        site = sites.get(id(call))
        if site is None:
            if why:
                self.rep.limitations.append(why)
            return
        c = self.rep.culprit
        c.op = "call"
        c.dsl_line, c.cpp_line = site.dsl_line, site.cpp
        line = argument_line(site.dsl_line, arg, str(self.build.work_dir / site.cpp_file)) if arg is not None else None
        if line is not None and arg < len(site.arg_lines):
            c.dsl_line = f"{site.dsl_line.rpartition(':')[0]}:{line}"
            c.cpp_line = f"{site.cpp_file}:{site.arg_lines[arg]}"


def analyze(src: Inputs) -> Report:
    """The localize report of ``src`` (see the module docstring), with the heatmaps of its
    mismatching outputs in ``maps`` (for ``report.html``)."""
    rep = _Analysis(src).run()
    ws = writers(src.build, src.report)
    for i, a in enumerate(src.build.args):
        if a.is_output:
            s, g = src.sim[a.name], src.golden[a.name]
            mism = ~metrics.close(s, g, src.rtol, src.atol)
            if bool(mism.any()):
                rep.maps.append(heatmap(a.name, s, g, mism, ws.get(i, [])))
    rep.elapsed_s = time.perf_counter() - src.started
    return rep


__all__ = ["Inputs", "analyze"]
