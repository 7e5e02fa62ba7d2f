"""The tolerance a precision mismatch justifies, and how much correct results differ among
themselves (other orders of a sum's adds), for the innocent verdict's evidence."""

from __future__ import annotations

import math
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded
from tilescope.analysis.localize.metrics import diffs, number
from tilescope.build.manifest import ArgSpec
from tilescope.ir.nodes import Program, Reduce
from tilescope.ir.traverse import walk_exprs
from tilescope.runtime.interp import run_program

_ORDERS = (("sequential", "one element at a time, first to last"), ("reversed", "last to first"))


def round_up(x: float) -> float:
    """``x`` rounded up to 2 significant digits (0 stays 0)."""
    if x <= 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - 1
    # NOTE: divided by a whole power of ten, the 2-digit result is the float nearest it (3.3e-06)
    return math.ceil(x * 10**-e) / 10**-e if e < 0 else math.ceil(x / 10**e) * 10**e


def tightest_tolerance(sim: dict[str, torch.Tensor], golden: dict[str, torch.Tensor], atol: float) -> tuple[float, float]:
    """The smallest rtol (2 significant digits, rounded up) at which every output passes with
    ``atol``, and the atol the golden's zeros need (``atol`` or more)."""
    need_rtol, need_atol = 0.0, atol
    for name, s in sim.items():
        g = golden[name].double()
        diff = diffs(s, g)[0]
        nz = g.abs() > 0
        if bool(nz.any()):
            need_rtol = max(need_rtol, float(((diff - atol).clamp_min(0)[nz] / g.abs()[nz]).max()))
        if bool((~nz).any()):
            need_atol = max(need_atol, float(diff[~nz].max()))
    return round_up(need_rtol), need_atol


def reduction_order_errors(
    program: Program, args: list[ArgSpec], values: list[Any], exact: dict[str, Bounded]
) -> list[str]:
    """How far interp is from float64 when its sums add in other orders (an evidence line per
    order and output); nothing for a program without sums. ``values`` are the arguments, copied."""
    if not any(isinstance(e, Reduce) and e.op.endswith("sum") for k in program.kernels for e in walk_exprs(k.body)):
        return []
    out = []
    for order, how in _ORDERS:
        run = [v.clone() if torch.is_tensor(v) else v for v in values]
        run_program(program, run, sum_order=order)
        for i, a in enumerate(args):
            if a.is_output:
                err = float(diffs(run[i], exact[a.name].v)[0].max())
                out.append(f"{a.name}: interp adding its sums {how} is off float64 by up to {number(err)}")
    return out


__all__ = ["reduction_order_errors", "round_up", "tightest_tolerance"]
