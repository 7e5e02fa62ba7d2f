"""The codegen question: does the compiled code do what the program says? The orchestration's
task regions against the program's, every task re-executed alone within its error bound, and
the culprit task replayed op by op on a probe build (methods of the analysis, ``analyze.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from tilescope.analysis.localize.bound import Bounded, run_kernel_bound
from tilescope.analysis.localize.op_naming import edited_op, op_name
from tilescope.analysis.localize.probe_build import (
    ProbeBuildError,
    compare_ops,
    compile_probe_build,
    instrument,
    interp_values,
)
from tilescope.analysis.localize.source_map import (
    edited_lines,
    kernel_sites,
    kernel_text,
    orchestration_sites,
)
from tilescope.analysis.localize.tasks import (
    CapturedTask,
    captured_tasks,
    compare_submissions,
    outside,
    scan_tasks,
)
from tilescope.analysis.report import Culprit
from tilescope.debug.failures import SavedArg, save_task_inputs
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import Kernel
from tilescope.runtime.interp import _KernelInterp

_DIRECTED = ("trunc", "floor", "ceil")


class CodegenQuestions:
    """The codegen half of ``analyze._Analysis`` (it reads the analysis's run records and report)."""

    def orchestration_codegen(self) -> bool:
        """The culprit when the compiled orchestration submits a task otherwise than the program; False if none does."""
        found = compare_submissions(self.sim_calls, self.submitted)
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
        """The culprit when a task, re-executed alone from sim's inputs, leaves its kernel's bound; False if none does."""
        self.tasks = captured_tasks(self.build, self.src.report)
        scan = scan_tasks(self.build, self.program, self.tasks)
        self.scan = scan
        if scan.lost:
            self.rep.limitations.append(
                f"{len(scan.lost)} task(s) could not be re-executed (the capture lost their arguments): "
                f"{', '.join(map(str, scan.lost[:8]))}"
            )
        unjudged = sorted(set(scan.unjudged))
        if unjudged:
            self.rep.limitations.append(
                f"{len(unjudged)} task(s) have outputs whose error bound is infinite (an overflow, a division by a value "
                f"the dtypes cannot tell from 0), not judged there: {', '.join(map(str, unjudged[:8]))}"
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
        plain, bounded = task.arguments(params), task.arguments(params, Bounded.exact)
        with torch.no_grad():
            _KernelInterp(kernel, False).run(plain)
        run_kernel_bound(kernel, bounded)
        return not any(
            bool(outside(plain[i], bounded[i].v, bounded[i].e).any()) for i in task.outputs if params[i].shape is not None
        )

    def blame_kernel(self, d, task: CapturedTask, scan) -> None:
        """Name divergent task ``d``: its kernel, and op by op (or from a hand edit) the statement."""
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
            elif site is not None and rep.culprit.cpp_line == e.cpp:  # the op the edit changed, not the statement's
                rep.culprit.op = edited_op(site.stmt, e.generated, e.now)
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
        values = run_kernel_bound(kernel, task.arguments(params, Bounded.exact), nearest=nearest, keep_values=True).values
        d, why, compared = compare_ops(sites, captures, values)
        rep.evidence.append(
            f"the probe build of kernel {kernel.name} compiled in {built:.2f}s; replaying task {task.task_id} on it "
            f"compared {compared} statement values{' with outputs bit-identical to the build' if same else ''}"
        )
        if why:
            rep.limitations.append(f"op by op: {why}")
        if d is None:
            return False
        ivals = interp_values(kernel, task.arguments(params))
        if d.pair < len(ivals) and ivals[d.pair][0] is d.site.stmt and ivals[d.pair][1].numel() == d.numel:
            # NOTE: interp's tile (a 1-D tile, a store's region of a 3-D tensor) holds the same elements in
            # the same row-major order as the capture, whose shape the index is in
            d.interp = float(ivals[d.pair][1].reshape(-1)[d.flat])
        s = d.site
        edit = next((e for e in edits if e.cpp_line == s.cpp_line), None)
        rep.culprit.op = edited_op(s.stmt, edit.generated, edit.now) if edit else op_name(s.stmt)
        rep.culprit.dsl_line, rep.culprit.cpp_line = s.dsl_line, s.cpp
        rep.evidence.append(d.text(task.task_id))
        return True

    def save_task(self, task: CapturedTask, why: str) -> Path | None:
        """Save ``task``'s captured arguments for ``tilescope replay --task``; its directory, or None."""
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
