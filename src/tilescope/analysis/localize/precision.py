"""The precision question: sim agrees with the program and the program computes the golden in
float64; is sim's error what the dtypes allow (innocent, with a tolerance) or more (guilty, with
the op: an overflow, a cast's rounding, an unbounded result)? Methods of the analysis, ``analyze.py``."""

from __future__ import annotations

import math
from typing import Any

import torch

from tilescope.analysis.localize import metrics
from tilescope.analysis.localize.bound import Bounded, Overflow, run_kernel_bound
from tilescope.analysis.localize.op_naming import op_name
from tilescope.analysis.localize.program_hypotheses import cast_mode, narrow_dtype
from tilescope.analysis.localize.signatures import (
    casts_to,
    first_nonfinite,
    ulp_signature,
)
from tilescope.analysis.localize.source_map import (
    kernel_sites,
    site_lines,
    statement_site,
    statements,
)
from tilescope.analysis.localize.tasks import (
    captured_tasks,
    outside,
    scan_tasks,
)
from tilescope.analysis.localize.tolerance import reduction_order_errors, tightest_tolerance
from tilescope.analysis.report import Culprit, Tolerance
from tilescope.ir import dtypes as dt
from tilescope.ir.nodes import Kernel

_DIRECTED = ("trunc", "floor", "ceil")


class PrecisionQuestions:
    """The precision half of ``analyze._Analysis`` (it reads the analysis's run records and report)."""

    def blame_overflow(self, o: Overflow) -> None:
        """Guilty: overflow ``o`` (its op, task and lines)."""
        rep = self.rep
        rep.category, rep.verdict = "precision", "guilty"
        kernel = next((k for k in self.program.kernels if o.stmt is not None and _holds(k, o.stmt)), None)
        site = statement_site(self.build, kernel, o.stmt, rep.limitations) if kernel is not None else None
        rep.culprit = Culprit(o.task, kernel.name if kernel else None, o.op, *site_lines(site))
        reach = (
            f"its exact result reaches {o.value:.4g}, beyond {o.dtype}'s largest value"
            if math.isfinite(o.value)
            else "its result is infinite from finite operands even in float64 (a division by zero, an exp of a large value)"
        )
        rep.summary = (
            f"{rep.culprit.op} overflows {o.dtype} in task {o.task}: {reach}; the Inf/NaN it makes reach the output "
            "where the golden is finite"
        )
        self.tasks = self.tasks or captured_tasks(self.build, self.src.report)
        first = first_nonfinite(self.tasks)
        if first is not None:
            rep.evidence.append(f"NaN/Inf first appear in the outputs of task {first.task_id} (kernel {first.kernel}), from finite inputs")
        rep.evidence.append(
            "keep the values in range (subtract the row max before exp, scale first) or use a wider dtype"
        )

    def precision(self) -> None:
        """The precision verdict: innocent with a tolerance, or guilty with its op."""
        rep = self.rep
        rep.category = "precision"
        guilty = []
        worst = 0.0
        unbounded = 0  # elements outside rtol/atol of the golden whose bound is infinite: not shown to be rounding
        for a in self.outputs:
            x, s = self.nearest[a.name], self.src.sim[a.name]
            bad = outside(s, x.v, x.e)
            if bool(bad.any()):
                guilty.append((a.name, int(bad.sum()), s.numel()))
            wrong = ~metrics.close(s, self.src.golden[a.name], self.src.rtol, self.src.atol)
            unbounded += int((wrong & ~torch.isfinite(x.e)).sum())
            ratio = metrics.diffs(s, x.v)[0] / x.e.clamp_min(1e-300)
            finite = torch.isfinite(x.e)
            if bool(finite.any()):
                worst = max(worst, float(ratio[finite].max()))
        self.reduction_orders()
        if guilty:
            rep.verdict = "guilty"
            self.blame_rounding(guilty)
            if rep.culprit.op is None and not self.mode_guilty():
                self.narrow_math()
            return
        if self.mode_guilty() or self.narrow_math():
            return
        rep.verdict = "innocent"
        rep.summary = (
            "sim agrees with the program, and its error against float64 stays within what the program's dtypes "
            f"allow (at most {worst:.2g} of the bound): the mismatch is rounding, not a defect"
        )
        self.propose_tolerance(worst, unbounded)

    def mode_guilty(self) -> bool:
        """Guilty when one cast, with another rounding mode, makes every output the golden's
        (``hypotheses.cast_mode``): that cast, its line and the mode that matches."""
        args = [self.src.inputs[a.name] for a in self.build.args]
        outs = [(k, a.name) for k, a in enumerate(self.build.args) if a.is_output]
        found = cast_mode(self.program, args, self.src.golden, outs, self.src.rtol, self.src.atol)
        if found is None:
            return False
        rep = self.rep
        rep.verdict = "guilty"
        site = statement_site(self.build, self.kernels[found.kernel], found.stmt, rep.limitations)
        rep.culprit = Culprit(None, found.kernel, "cast", *site_lines(site))
        rep.summary = (f"the cast to {found.cast.type.dtype.name} in kernel {found.kernel} rounds with "
                       f"mode={found.cast.mode!r}; the golden's values are what mode={found.mode!r} gives")  # fmt: skip
        rep.evidence.append(found.text(site.dsl_line if site else None))
        return True

    def narrow_math(self) -> bool:
        """Where the precision goes (``program_hypotheses.narrow_dtype``): the statement whose
        f16/bf16 math, done in f32 (or whose cast to f16/bf16, left out), makes every output the
        golden's. Guilty when that dtype is narrower than the outputs it feeds (precision the
        outputs could hold was given up: an f16 accumulation for an f32 result); otherwise the
        verdict stays what it is and the op is named as where the drift comes from."""
        args = [self.src.inputs[a.name] for a in self.build.args]
        outs = [(k, a.name) for k, a in enumerate(self.build.args) if a.is_output]
        found = narrow_dtype(self.program, args, self.src.golden, outs, self.src.rtol, self.src.atol)
        if found is None:
            return False
        rep = self.rep
        site = statement_site(self.build, self.kernels[found.kernel], found.stmt, rep.limitations)
        rep.culprit = Culprit(None, found.kernel, found.op, *site_lines(site))
        rep.evidence.append(found.text(site.dsl_line if site else None))
        narrow = dt.BY_NAME[found.dtype].itemsize
        if all(a.dtype.itemsize <= narrow for a in self.outputs if a.dtype.is_float):
            return False  # the outputs are that narrow themselves: the drift is the program's own dtypes
        rep.verdict = "guilty"
        rep.summary = (f"the {found.op} of kernel {found.kernel} computes in {found.dtype}, narrower than the outputs it "
                       f"feeds: the precision it gives up is what separates sim from the golden")  # fmt: skip
        return True

    def reduction_orders(self) -> None:
        """Evidence: how far other orders of the sums' adds are from float64."""
        args = self._args(lambda t: t.clone())
        self.rep.evidence += reduction_order_errors(self.program, self.build.args, args, self.exact)

    def propose_tolerance(self, worst: float, unbounded: int = 0) -> None:
        """The tightest tolerance the data justify, with the reason (or guilty, when none passes, or
        when ``unbounded`` elements outside rtol/atol have an infinite bound)."""
        rep = self.rep
        for a in self.outputs:
            x = self.exact[a.name]
            finite = x.e[torch.isfinite(x.e)]
            top = metrics.number(float(finite.max())) if finite.numel() else "inf"
            rep.evidence.append(self.pair_text(a.name, "sim~float64") + f"; the bound there is up to {top}")
            rep.evidence.append(self.pair_text(a.name, "golden~float64"))
        rtol, atol = tightest_tolerance({a.name: self.src.sim[a.name] for a in self.outputs}, self.src.golden, self.src.atol)
        narrow = self.narrowing_casts()
        if not (math.isfinite(rtol) and math.isfinite(atol)):
            rep.verdict = "guilty"
            rep.summary = (
                "sim agrees with the program, but some outputs are Inf or NaN where the golden is finite, and the error "
                "bound there is infinite: the program's dtypes cannot compute them (a division by a value they cannot "
                "tell from 0, or a cancellation); no tolerance passes"
            )
            self.blame_unbounded()
            return
        if unbounded:
            rep.verdict = "guilty"
            rep.summary = (
                f"sim agrees with the program, but {unbounded} element(s) outside rtol/atol of the golden have an "
                "infinite error bound: the program's dtypes cannot tell them from their rounding (a cancellation, or "
                "a division by a value they cannot tell from 0), so the mismatch is not shown to be rounding"
            )
            self.blame_unbounded()
            return
        golden_off = any(self.row(a.name, "golden~float64").mismatches for a in self.outputs)
        why = (
            "the golden itself is off float64 beyond rtol/atol too (see the evidence)"
            if golden_off
            else "the golden is closer to float64 than sim is, so a golden computed in float64 keeps the check meaningful"
        )
        text = (
            f"rtol={rtol:.2g}, atol={atol:g}: the tightest tolerance at which every output passes; sim's error is "
            f"rounding the program's dtypes allow, and {why}"
        )
        if narrow:
            rep.summary = rep.summary.replace(
                "the mismatch is rounding, not a defect",
                f"the mismatch is the rounding of the program's own dtypes (it rounds through {narrow[0]}), a defect only "
                "if those dtypes are not what was meant",
            )
        if rtol > 1e-2 and narrow:
            text += f"; a tolerance this loose comes from rounding through {narrow[0]}: if that is not meant, that cast is the defect"
        rep.tolerance = Tolerance(rtol, atol, text)
        rep.next.append(f"tilescope replay {self.build.work_dir} --rtol {rtol:.2g} --atol {atol:g}")

    def narrowing_casts(self) -> list[str]:
        """The casts to bf16/f16 where the outputs are wider, with their lines (evidence of where
        precision is given up), as ``bf16 at file:line (kernel k, mode 'rint')``."""
        widest = max((a.dtype.itemsize for a in self.outputs if a.dtype.is_float), default=0)
        out = []
        for dtype in ("bf16", "f16"):
            if widest <= 2:
                break
            for c in casts_to(self.program, dtype):
                sites, _ = kernel_sites(self.build, c.kernel)
                site = sites.get(id(c.stmt))
                where = site.dsl_line if site is not None else c.kernel.name
                out.append(f"{dtype} at {where} (kernel {c.kernel.name}, mode {c.cast.mode!r})")
        if out:
            self.rep.evidence.append("the program rounds through a narrower dtype than its outputs: " + "; ".join(out))
        return out

    def blame_unbounded(self) -> None:
        """The culprit of an infinite bound: the first task with one, and in it the first statement
        whose value has an infinite bound while float64 is finite."""
        rep = self.rep
        if rep.culprit.op is not None:
            return  # where the precision goes is named already (narrow_math): the infinite bound comes from there
        self.tasks = self.tasks or captured_tasks(self.build, self.src.report)
        for t in self.tasks:
            if t.lost:
                continue
            kernel = self.kernels[t.kernel]
            params = self.build.kernel_params(t.func_id)
            for stmt, value in run_kernel_bound(kernel, t.arguments(params, Bounded.exact), keep_values=True).values:
                v = value.v.double() if torch.is_tensor(value.v) else value.v
                if bool((torch.isinf(value.e) & torch.isfinite(v)).any()):
                    # NOTE: the op inside the statement that overflowed its dtype, when one did (a row_sum in f16)
                    op = next((o.op for o in self.overflows if o.stmt is stmt), op_name(stmt))
                    site = statement_site(self.build, kernel, stmt, rep.limitations)
                    rep.culprit = Culprit(t.task_id, t.kernel, op, *site_lines(site))
                    rep.evidence.append(
                        f"task {t.task_id}: {op} is the first op whose result the program's dtypes cannot bound"
                    )
                    return

    def blame_rounding(self, guilty: list[tuple[str, int, int]]) -> None:
        """Guilty of rounding: the cast an ulp pattern names, else the first statement out of the nearest bound."""
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


def _holds(k: Kernel, stmt: Any) -> bool:
    return any(s is stmt for s in statements(k.body))
