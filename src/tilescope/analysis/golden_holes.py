"""Where the golden itself is no reference: an output's golden holding NaN, or an Inf that
golden_fn's own arithmetic made, at elements where the run's output differs from it.

Invariants:
- A NaN in the golden where the output differs is always the golden's: no output value can
  match it, so no kernel is blamed for it. An Inf may be one golden_fn means (a mask:
  ``where(keep, s, -inf)``, ``masked_fill``), which a kernel must compute too: it is the
  golden's only when the golden's trace (``golden_trace``) shows an op that is not a selection
  making it from finite values (an overflowing ``exp``, a division by zero), and the output is
  finite there.
- What made it is named: the golden's step (its op and the line of golden_fn, from the trace),
  else an input that holds it, else golden_fn as a whole (no trace was saved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.golden_trace import GoldenTrace, GoldenValue
from tilescope.analysis.localize.metrics import close

# ops that place a value they are given (a mask's -inf) rather than compute one
SELECTIONS = frozenset({
    "where", "masked_fill", "masked_fill_", "index_put", "index_put_", "scatter", "scatter_", "fill", "fill_",
    "full", "index_fill", "index_fill_", "masked_scatter", "masked_scatter_", "_masked_softmax",
})  # fmt: skip


@dataclass(frozen=True)
class GoldenHole:
    """Elements of output ``output`` whose golden holds ``kind`` (``NaN`` or ``Inf``) where the
    run's output differs: ``count`` of them, the first at ``first``, made by ``made`` (a step of
    the golden's trace), or by the input ``input`` holding it (else golden_fn, untraced)."""

    output: str
    kind: str
    count: int
    first: list[int]
    made: GoldenValue | None = None
    input: str | None = None
    no_trace: str | None = None  # why the golden's steps are not known
    inf_first: GoldenValue | None = None  # a NaN made from an Inf: the step that made the Inf (an overflow)

    def summary(self) -> str:
        """The verdict's summary: the golden, where, what made it and what to do."""
        head = (f"the golden of {self.output} holds {self.kind} at {self.count} element{'s' if self.count > 1 else ''} "
                f"where the run's output differs (the first at {self.first})")  # fmt: skip
        if self.input is not None:
            return (f"{head}, made from the input {self.input}, which holds {self.kind}: the golden is no reference "
                    "there; fix the inputs (TensorSpec init_value) and save the data again")  # fmt: skip
        if self.made is not None and self.made.op == "input":
            return (f"{head}: the input {self.made.name} holds {self.kind} and golden_fn carried it there: the golden "
                    "is no reference there; fix the inputs (TensorSpec init_value) and save the data again")  # fmt: skip
        if self.made is not None:
            text = f" (`{self.made.text}`)" if self.made.text else ""
            return (f"{head}: golden_fn made it, {self.made.where()}{text}, from values that hold none: the golden is "
                    "no reference there; fix golden_fn and save the data again")  # fmt: skip
        return (f"{head}: golden_fn made it from inputs that hold none: the golden is no reference there; fix "
                "golden_fn and save the data again")  # fmt: skip

    def evidence(self) -> list[str]:
        """What the verdict stands on, beyond its summary."""
        if self.kind == "NaN":
            out = ["no output value matches a NaN in the golden: no kernel is blamed for those elements"]
        elif self.made is not None and self.made.op != "input":
            out = [f"the run's output is finite there; the golden's Inf is computed (op {self.made.op!r}), not placed "
                   "by a mask (a where or masked_fill of -inf, which a kernel must compute too)"]  # fmt: skip
        else:
            out = ["the run's output is finite there"]
        if self.inf_first is not None:
            out.append(f"the NaN is made from an Inf that golden_fn computed first, {self.inf_first.where()} "
                       f"(`{self.inf_first.text}`): an overflow, or a division by zero")  # fmt: skip
        if self.made is None and self.input is None and self.no_trace:
            out.append(self.no_trace)
        return out


def golden_hole(golden: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], inputs: dict[str, Any],
                rtol: float, atol: float, trace: GoldenTrace | None, no_trace: str | None = None) -> GoldenHole | None:  # fmt: skip
    """The first output whose golden is no reference where the run's ``outputs`` differ from it
    (see the module docstring); None when every difference is one a kernel can be blamed for."""
    wrong: dict[str, torch.Tensor] = {}
    for name, g in golden.items():
        out = outputs.get(name)
        if torch.is_tensor(out) and g.is_floating_point() and out.shape == g.shape:
            wrong[name] = ~close(out, g, rtol, atol)
    for name, m in wrong.items():
        hole = m & torch.isnan(golden[name])
        if bool(hole.any()):
            made = trace.made(nan=True) if trace is not None else []
            held = [n for n, v in inputs.items() if torch.is_tensor(v) and v.is_floating_point() and bool(v.isnan().any())]
            computed = [v for v in (trace.made(nan=False) if trace is not None else [])
                        if v.op not in SELECTIONS | {"input"} and made and v.index < made[0].index]  # fmt: skip
            return GoldenHole(name, "NaN", int(hole.sum()), _first(hole), made[0] if made else None,
                              held[0] if held and not made else None, no_trace, computed[0] if computed else None)  # fmt: skip
    computed = [v for v in (trace.made(nan=False) if trace is not None else []) if v.op not in SELECTIONS]
    if not computed:
        return None
    for name, m in wrong.items():
        hole = m & torch.isinf(golden[name]) & torch.isfinite(outputs[name].double())
        if bool(hole.any()):
            return GoldenHole(name, "Inf", int(hole.sum()), _first(hole), computed[0])
    return None


def _first(mask: torch.Tensor) -> list[int]:
    return [int(i) for i in mask.nonzero()[0]]


__all__ = ["SELECTIONS", "GoldenHole", "golden_hole"]
