"""From one sim run on saved data to a verdict: the divergence fingerprint, the category, the
culprit and the evidence (``LocalizeReport``).

The order of the questions:

1. Does sim match the golden at the saved rtol/atol? Then ``pass``.
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

from tilescope.build.manifest import Build
from tilescope.debug.failures import SavedArg, save_task_inputs
from tilescope.debug.localize import metrics
from tilescope.debug.localize.bound import Bounded, Overflow, run_kernel_bound
from tilescope.debug.localize.html import heatmap
from tilescope.debug.localize.ops import edited_op, op_name
from tilescope.debug.localize.probe_build import (
    ProbeBuildError,
    compare_ops,
    compile_probe_build,
    instrument,
    interp_values,
)
from tilescope.debug.localize.references import check_references
from tilescope.debug.localize.report import Culprit, FingerprintRow, LocalizeReport
from tilescope.debug.localize.signatures import (
    Signature,
    casts_to,
    first_nonfinite,
    output_signatures,
    ulp_signature,
    writers,
)
from tilescope.debug.localize.source_map import (
    edited_lines,
    kernel_sites,
    kernel_text,
    orchestration_sites,
    statements,
)
from tilescope.debug.localize.tasks import (
    CapturedTask,
    captured_tasks,
    compare_submissions,
    outside,
    run_program_recorded,
    scan_tasks,
    sim_submissions,
)
from tilescope.debug.localize.tolerance import reduction_order_errors, tightest_tolerance
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Kernel, Program, Store
from tilescope.ir.types import Direction
from tilescope.runtime.interp import _KernelInterp, run_program
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


class _Analysis:
    def __init__(self, src: Inputs):
        self.src = src
        self.build = src.build
        self.program: Program = src.build.program()
        self.kernels: dict[str, Kernel] = {k.name: k for k in self.program.kernels}
        self.outputs = [a for a in self.build.args if a.is_output]
        self.rep = LocalizeReport(
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

    def run(self) -> LocalizeReport:
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

    def orchestration_codegen(self) -> bool:
        found = compare_submissions(sim_submissions(self.build, self.src.report), self.submitted)
        if not found:
            return False
        m = found[0]
        rep = self.rep
        rep.category = "codegen"
        sites, why = orchestration_sites(self.build, self.program)
        site = sites.get(id(m.call)) if m.call is not None else None
        params = [p.name for p in self.kernels[m.kernel].params] if m.kernel in self.kernels else []
        bad = m.differing()
        k = bad[0] if bad else 0
        param = params[k] if k < len(params) else f"argument {k}"
        rep.culprit = Culprit(m.task_id, m.kernel, "call", site.dsl_line if site else None,
                              f"{site.cpp_file}:{site.arg_lines[k]}" if site and k < len(site.arg_lines) else None)  # fmt: skip
        got = m.sim[k] if k < len(m.sim) else "-"
        want = m.program[k] if k < len(m.program) else "-"
        rep.summary = (
            f"the compiled orchestration gives task {m.task_id} (kernel {m.kernel}) {param} = {got}, where the "
            f"program gives {want}"
        )
        rep.evidence.append(f"{len(found)} task(s) are submitted otherwise than the program says; the first is task {m.task_id}")
        if why:
            rep.limitations.append(why)
        rep.next.append(f"tilescope deps {self.build.work_dir} --task {m.task_id}")
        rep.next.append(f"fix {rep.culprit.cpp_line or self.build.config['ORCHESTRATION'].get('source')} (or compile again), then: tilescope localize {self.build.work_dir}")
        return True

    def kernel_codegen(self) -> bool:
        self.tasks = captured_tasks(self.build, self.src.report)
        scan = scan_tasks(self.build, self.program, self.tasks)
        self.scan = scan
        if scan.lost:
            self.rep.limitations.append(
                f"{len(scan.lost)} task(s) could not be re-executed (the dump lost their payloads): "
                f"{', '.join(map(str, scan.lost[:8]))}"
            )
        for d in scan.divergent:
            task = next(t for t in self.tasks if t.task_id == d.task_id)
            if not self.interp_agrees(task):
                self.rep.limitations.append(
                    f"task {d.task_id}: interp leaves the error bound of kernel {d.kernel} too, so the bound does "
                    "not hold for it: not judged"
                )
                continue
            self.blame_kernel(d, task, scan)
            return True
        return False

    def interp_agrees(self, task: CapturedTask) -> bool:
        """Whether interp, on the task's inputs, stays within the bound (the bound holds there)."""
        kernel = self.kernels[task.kernel]
        params = self.build.kernel_params(task.func_id)
        plain, bounded = [], []
        for i, p in enumerate(params):
            if p.shape is None:
                plain.append(task.inputs.get(i))
                bounded.append(task.inputs.get(i))
                continue
            value = task.inputs[i] if i in task.inputs else task.outputs[i]
            plain.append(value.clone())
            bounded.append(Bounded.exact(value))
        with torch.no_grad():
            _KernelInterp(kernel, False).run(plain)
        run_kernel_bound(kernel, bounded)
        return not any(
            bool(outside(plain[i], bounded[i].v, bounded[i].e).any()) for i in task.outputs if params[i].shape is not None
        )

    def blame_kernel(self, d, task: CapturedTask, scan) -> None:
        rep = self.rep
        rep.category = "codegen"
        kernel = self.kernels[d.kernel]
        rep.culprit = Culprit(d.task_id, d.kernel)
        same = [x.task_id for x in scan.divergent if x.kernel == d.kernel]
        of_kernel = sum(1 for t in self.tasks if t.kernel == d.kernel)
        rep.summary = (
            f"task {d.task_id} (kernel {d.kernel}) computes something its kernel's program does not: re-executed "
            "alone from the inputs sim gave it, its output leaves the error bound"
        )
        rep.evidence.append(d.text())
        rep.evidence.append(
            f"{len(same)} of {of_kernel} tasks of kernel {d.kernel} leave their bound; {scan.checked} tasks were "
            f"re-executed, {len(scan.divergent)} in all leave it"
        )
        sites, why = kernel_sites(self.build, kernel)
        edits = [e for e in edited_lines(self.build, kernel) if e.cpp_line]
        op_found = self.op_level(task, kernel, sites, edits) if sites else False
        if edits:
            e = edits[0]
            site = next((s for s in sites.values() if s.cpp_line == e.cpp_line), None)
            if not op_found:
                rep.culprit.cpp_line = e.cpp
                if site is not None:
                    rep.culprit.op = edited_op(site.stmt, e.generated, e.now)
                    rep.culprit.dsl_line = site.dsl_line
            rep.evidence.append(f"{e.cpp} was edited by hand: `{e.now}`; the compiler writes `{e.generated}`")
            if len(edits) > 1:
                rep.evidence.append(f"{len(edits)} lines of {e.cpp_file} differ from what the compiler writes")
        elif why:
            rep.limitations.append(why)
        saved = self.save_task(task, "localize: its outputs leave the error bound of its kernel")
        if saved is not None:
            rep.next.append(f"tilescope replay {self.build.work_dir} --task {task.task_id}" + (
                "" if saved.name == f"task_{task.task_id}" else f" --from {saved}"))  # fmt: skip
        rep.next.append(f"tilescope deps {self.build.work_dir} --task {d.task_id}")

    def op_level(self, task: CapturedTask, kernel: Kernel, sites: dict, edits: list, nearest: bool = False) -> bool:
        """Replay ``task`` on a probe build of its kernel and name the first statement whose tile
        leaves its bound (with ``nearest``, the bound of round-to-nearest casts): the culprit op,
        DSL and C++ lines; False when it cannot say."""
        rep = self.rep
        if self.src.probe_runner is None:
            return False
        t0 = time.perf_counter()
        try:
            text, _ = kernel_text(self.build, kernel.name)
            so = compile_probe_build(self.build, kernel.name, instrument(text, sites))
            built = time.perf_counter() - t0
            outputs, captures = self.src.probe_runner(task, so)
        except (ProbeBuildError, TilescopeError, OSError) as e:
            rep.limitations.append(f"op by op: {e}")
            return False
        same = all(torch.equal(outputs[i], task.outputs[i]) for i in task.outputs if i in outputs)
        if not same:
            rep.limitations.append(
                f"the probe build's outputs of task {task.task_id} are not bit-identical to the build's: its op-by-op "
                "values may not be the build's"
            )
        params = self.build.kernel_params(task.func_id)
        args = [task.inputs.get(i) if p.shape is None else Bounded.exact(task.inputs[i] if i in task.inputs else task.outputs[i])
                for i, p in enumerate(params)]  # fmt: skip
        values = run_kernel_bound(kernel, args, nearest=nearest, keep_values=True).values
        d, why, compared = compare_ops(sites, captures, values)
        rep.evidence.append(
            f"the probe build of kernel {kernel.name} compiled in {built:.2f}s; replaying task {task.task_id} on it "
            f"compared {compared} statement values{' with outputs bit-identical to the build' if same else ''}"
        )
        if why:
            rep.limitations.append(f"op by op: {why}")
        if d is None:
            return False
        plain = [task.inputs.get(i) if p.shape is None else (task.inputs[i] if i in task.inputs else task.outputs[i])
                 for i, p in enumerate(params)]  # fmt: skip
        ivals = interp_values(kernel, plain)
        if d.pair < len(ivals) and ivals[d.pair][0] is d.site.stmt:
            d.interp = float(ivals[d.pair][1].reshape(-1)[coords_flat(d.index, ivals[d.pair][1].shape)])
        s = d.site
        edit = next((e for e in edits if e.cpp_line == s.cpp_line), None)
        rep.culprit.op = edited_op(s.stmt, edit.generated, edit.now) if edit else op_name(s.stmt)
        rep.culprit.dsl_line, rep.culprit.cpp_line = s.dsl_line, s.cpp
        rep.evidence.append(d.text(task.task_id))
        return True

    def save_task(self, task: CapturedTask, why: str) -> Path | None:
        params = self.build.kernel_params(task.func_id)
        args = []
        for i, p in enumerate(params):
            role = {"input": "input", "output": "output", "inout": "inout", "scalar": "scalar"}[task.roles.get(i, "input")]
            value = task.inputs.get(i) if role != "output" else task.outputs.get(i)
            args.append(SavedArg(i, p.name, role, value, False, task.regions.get(i)))
        try:
            return save_task_inputs(self.build.work_dir, task.task_id, task.kernel, task.kernel, task.func_id, args, why)
        except OSError as e:
            self.rep.limitations.append(f"the inputs of task {task.task_id} could not be saved: {e}")
            return None

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
            x, g = self.nearest[a.name], self.src.golden[a.name]
            slack = (atol + rtol * g.double().abs()) + x.e
            far = ((x.v - g.double()).abs() > slack) & torch.isfinite(x.e)
            far = far | (torch.isnan(g.double()) != torch.isnan(x.v)) if x.v.is_floating_point() else far
            if bool(far.any()):
                exact_is_golden = False
        if exact_is_golden:
            self.precision()
        else:
            self.algorithm()

    def blame_overflow(self, o: Overflow) -> None:
        rep = self.rep
        rep.category, rep.verdict = "precision", "guilty"
        kernel = next((k for k in self.program.kernels if o.stmt is not None and _holds(k, o.stmt)), None)
        rep.culprit = Culprit(o.task, kernel.name if kernel else None, o.op)
        if kernel is not None:
            sites, why = kernel_sites(self.build, kernel)
            site = sites.get(id(o.stmt))
            if site is not None:
                rep.culprit.dsl_line, rep.culprit.cpp_line = site.dsl_line, site.cpp
            elif why:
                rep.limitations.append(why)
        rep.summary = (
            f"{rep.culprit.op} overflows {o.dtype} in task {o.task}: its exact result reaches {o.value:.4g}, beyond "
            f"{o.dtype}'s largest value; the Inf/NaN it makes reach the output"
        )
        first = first_nonfinite(captured_tasks(self.build, self.src.report))
        if first is not None:
            rep.evidence.append(f"NaN/Inf first appear in the outputs of task {first.task_id} (kernel {first.kernel}), from finite inputs")
        rep.evidence.append(
            "float64 computes every output finite; keep the values in range (subtract the row max before exp, "
            "scale first) or use a wider dtype"
        )

    def precision(self) -> None:
        rep = self.rep
        rep.category = "precision"
        guilty = []
        worst = 0.0
        for a in self.outputs:
            x, s = self.nearest[a.name], self.src.sim[a.name]
            bad = outside(s, x.v, x.e)
            if bool(bad.any()):
                guilty.append((a.name, int(bad.sum()), s.numel()))
            ratio = metrics.diffs(s, x.v)[0] / x.e.clamp_min(1e-300)
            finite = torch.isfinite(x.e)
            if bool(finite.any()):
                worst = max(worst, float(ratio[finite].max()))
        self.reduction_orders()
        if guilty:
            rep.verdict = "guilty"
            self.blame_rounding(guilty)
            return
        rep.verdict = "innocent"
        rep.summary = (
            "sim agrees with the program, and its error against float64 stays within what the program's dtypes "
            f"allow (at most {worst:.2g} of the bound): the mismatch is rounding, not a defect"
        )
        self.propose_tolerance(worst)

    def reduction_orders(self) -> None:
        args = self._args(lambda t: t.clone())
        self.rep.evidence += reduction_order_errors(self.program, self.build.args, args, self.exact)

    def propose_tolerance(self, worst: float) -> None:
        rep = self.rep
        for a in self.outputs:
            x = self.exact[a.name]
            finite = x.e[torch.isfinite(x.e)]
            top = metrics.number(float(finite.max())) if finite.numel() else "inf"
            rep.evidence.append(self.pair_text(a.name, "sim~float64") + f"; the bound there is up to {top}")
            rep.evidence.append(self.pair_text(a.name, "golden~float64"))
        rtol, atol = tightest_tolerance({a.name: self.src.sim[a.name] for a in self.outputs}, self.src.golden, self.src.atol)
        text = (
            f"rtol={rtol:.2g}, atol={atol:g}: the tightest tolerance at which every output passes; sim's error "
            "is rounding the dtypes allow, and the golden itself is off float64 by as much (see the evidence)"
        )
        rep.tolerance = {"rtol": rtol, "atol": atol, "text": text}
        rep.next.append(f"rerun with --rtol {rtol:.2g} --atol {atol:g} (or compute the golden in float64 to see sim's own error)")

    def blame_rounding(self, guilty: list[tuple[str, int, int]]) -> None:
        rep = self.rep
        name, n, numel = guilty[0]
        rep.summary = f"{n} of {numel} elements of {name} are farther from float64 than the program's dtypes allow with round-to-nearest"
        for a in self.outputs:
            s, g = self.src.sim[a.name], self.src.golden[a.name]
            mism = ~metrics.close(s, g, self.src.rtol, self.src.atol)
            sig = ulp_signature(a.name, s, g, mism, self.program)
            if sig is None:
                continue
            dtype, k = sig
            casts = casts_to(self.program, dtype)
            directed = [c for c in casts if c.cast.mode != "rint"] or casts
            c = directed[0]
            sites, why = kernel_sites(self.build, c.kernel)
            site = sites.get(id(c.stmt))
            rep.culprit = Culprit(None, c.kernel.name, "cast", site.dsl_line if site else None, site.cpp if site else None)
            listing = "; ".join(f"{x.kernel.name}: cast to {dtype} mode={x.cast.mode!r}" for x in casts)
            rep.evidence.append(
                f"{a.name}: every mismatching element is off by {'exactly 1' if k == 1 else 'at most 2'} ulp of {dtype}: "
                f"a rounding difference at a cast to {dtype} ({listing})"
            )
            rep.summary += f"; the cast to {dtype} with mode={c.cast.mode!r} rounds differently from the golden"
            if why:
                rep.limitations.append(why)
            return
        self.blame_rounding_op()

    def blame_rounding_op(self) -> None:
        """The first task whose outputs leave the round-to-nearest bound, and on its probe build the
        first statement that does: the culprit of a guilty precision verdict with no ulp signature."""
        rep = self.rep
        self.tasks = self.tasks or captured_tasks(self.build, self.src.report)
        scan = scan_tasks(self.build, self.program, self.tasks, nearest=True)
        if not scan.divergent:
            rep.limitations.append("no task, re-executed alone, leaves the round-to-nearest bound: no single op is named")
            return
        d = scan.divergent[0]
        task = next(t for t in self.tasks if t.task_id == d.task_id)
        rep.culprit = Culprit(d.task_id, d.kernel)
        rep.evidence.append(d.text() + " (casts bounded as round-to-nearest)")
        kernel = self.kernels[d.kernel]
        sites, why = kernel_sites(self.build, kernel)
        if why:
            rep.limitations.append(why)
        elif not self.op_level(task, kernel, sites, [], nearest=True):
            rep.limitations.append(f"the probe build of task {d.task_id} named no statement out of its bound")

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
        rep.culprit = Culprit(best.task, best.kernel)
        if best.kind == "unstored" and best.kernel in self.kernels:
            self.name_store(self.kernels[best.kernel])
        elif best.task is not None:
            self.name_call(best.task)
        if best.task is not None:
            rep.next.append(f"tilescope deps {self.build.work_dir} --task {best.task}")

    def name_store(self, kernel: Kernel) -> None:
        """The culprit's op and lines: the kernel's store, when it has one."""
        stores = [s for s in statements(kernel.body) if isinstance(s, Store)]
        self.rep.culprit.op = "store"
        if len(stores) != 1:
            self.rep.evidence.append(f"kernel {kernel.name} has {len(stores)} stores: check which one skips the elements")
            return
        sites, why = kernel_sites(self.build, kernel)
        site = sites.get(id(stores[0]))
        if site is not None:
            self.rep.culprit.dsl_line, self.rep.culprit.cpp_line = site.dsl_line, site.cpp
        elif why:
            self.rep.limitations.append(why)

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
        rep.next.append(f"tilescope dump {self.build.work_dir} --task {d.task_id}" if d.kind == "probe"
                        else f"tilescope deps {self.build.work_dir} --task {d.task_id}")  # fmt: skip
        return True

    def task_arguments(self) -> dict[int, str]:
        """How each task's arguments read, by task id: ``x = x[0:16, 0:16], y = y[0:16, 16:32]``."""
        out = {}
        for tid, (kernel, args) in enumerate(sim_submissions(self.build, self.src.report)):
            params = [p.name for p in self.kernels[kernel].params] if kernel in self.kernels else []
            out[tid] = ", ".join(f"{p} = {a}" for p, a in zip(params, args))
        return out

    def name_call(self, task_id: int) -> None:
        """Set the culprit's DSL and C++ lines to the kernel call that submitted ``task_id``."""
        if task_id >= len(self.submitted):
            return
        call = self.submitted[task_id].call
        sites, why = orchestration_sites(self.build, self.program)
        site = sites.get(id(call))
        if site is None:
            if why:
                self.rep.limitations.append(why)
            return
        self.rep.culprit.op = "call"
        self.rep.culprit.dsl_line, self.rep.culprit.cpp_line = site.dsl_line, site.cpp


def coords_flat(index: tuple[int, ...], shape: torch.Size) -> int:
    """The flat position of ``index`` in ``shape`` (row-major)."""
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    return flat


def _holds(k: Kernel, stmt: Any) -> bool:
    return any(s is stmt for s in statements(k.body))


def analyze(src: Inputs) -> LocalizeReport:
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
