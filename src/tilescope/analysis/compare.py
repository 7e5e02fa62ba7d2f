"""Comparing outputs with their golden: per output pass/fail, mismatch count, max abs and rel
diff with their N-d coordinates, the first mismatches, NaN/Inf counts.

Equal values differ by 0, infinities of the same sign and NaN against NaN included; a NaN or
an infinity against anything else differs by inf (abs and rel).

A mismatch prints both values with as many significant digits as it takes to tell them apart
(up to what the output's dtype holds: 9 for f32, 17 for f64), then their abs and rel diff.

Tolerances are non-negative numbers (``check_tolerances``, before anything runs). A
``compare_fn`` that raises is a UserCodeError naming the user's line; one that answers anything
but a bool (or a one-element bool tensor), or ``(bool, str)``, is a HarnessError saying what it
returned."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.analysis.localize.metrics import close, coords, diffs
from tilescope.analysis.user_code import call_user, function_name
from tilescope.errors import HarnessError

FIRST_MISMATCHES = 8
# significant digits that round-trip every value of a float dtype
_MAX_DIGITS = {torch.float64: 17, torch.float32: 9, torch.float16: 5, torch.bfloat16: 4}


def tolerance_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the tolerance ``name`` (``rtol``/``atol``); None when it can."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return f"{name} {value!r}: expected a finite number >= 0"
    return None


def distinct_values(a: float, e: float, dtype: torch.dtype | None) -> tuple[str, str]:
    """``a`` and ``e`` printed with the fewest significant digits (6 or more, up to what
    ``dtype`` holds) that tell them apart; integers and bools exactly."""
    if dtype is not None and dtype == torch.bool:
        return str(bool(a)), str(bool(e))
    if dtype is not None and not dtype.is_floating_point and not dtype.is_complex:
        exact = [str(int(v)) if math.isfinite(v) else str(v) for v in (a, e)]
        return exact[0], exact[1]
    most = _MAX_DIGITS.get(dtype, 17)
    digits = min(6, most)
    while digits < most and f"{a:.{digits}g}" == f"{e:.{digits}g}":
        digits += 1
    return f"{a:.{digits}g}", f"{e:.{digits}g}"


def value_diffs(a: float, e: float) -> tuple[float, float]:
    """The abs and rel diff of one element, as compare_tensor counts them."""
    if a == e or (math.isnan(a) and math.isnan(e)):
        return 0.0, 0.0
    diff = abs(a - e)
    if math.isnan(diff):
        diff = math.inf
    return diff, (diff / abs(e) if e != 0 and math.isfinite(e) else math.inf)


@dataclass
class CompareReport:
    """How one output compares with its golden: pass/fail, mismatches, max diffs and where, NaN/Inf counts."""

    name: str
    passed: bool
    numel: int
    mismatches: int = 0
    max_abs_diff: float = 0.0
    max_abs_at: tuple[int, ...] = ()
    max_rel_diff: float = 0.0
    max_rel_at: tuple[int, ...] = ()
    nan_actual: int = 0
    nan_expected: int = 0
    inf_actual: int = 0
    inf_expected: int = 0
    golden_nan: int = 0  # mismatching elements where the golden holds NaN: no output value matches it
    first: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)
    message: str = ""
    dtype: torch.dtype | None = None  # the output's dtype: how many digits its values print with

    def lines(self, rtol: float, atol: float) -> list[str]:
        """The report as printed: a ``[COMPARE]`` line, the diffs, NaN/Inf counts, the first mismatches."""
        status = "PASS" if self.passed else "FAIL"
        if self.message:
            return [f"[COMPARE] {self.name}: {status}  {self.message}"]
        head = f"[COMPARE] {self.name}: {status}  "
        if self.mismatches:
            pct = 100.0 * self.mismatches / max(1, self.numel)
            head += f"{self.mismatches} of {self.numel} elements mismatch ({pct:.3g}%)"
        else:
            head += f"{self.numel} elements match"
        head += f" (rtol={rtol:g}, atol={atol:g})"
        out = [
            head,
            f"    max abs diff {self.max_abs_diff:.4g} at {list(self.max_abs_at)}; "
            f"max rel diff {self.max_rel_diff:.4g} at {list(self.max_rel_at)}",
        ]
        if self.nan_actual or self.nan_expected or self.inf_actual or self.inf_expected:
            out.append(
                f"    NaN: {self.nan_actual} got / {self.nan_expected} expected; "
                f"Inf: {self.inf_actual} got / {self.inf_expected} expected"
            )
        if self.golden_nan:
            out.append(f"    the golden holds NaN at {self.golden_nan} of the mismatching elements, which no output value "
                       "matches: check golden_fn there (tilescope triage names the line of it that made them)")  # fmt: skip
        if self.first:
            out.append("    first mismatches:")
            out += [f"      {list(i)}: {self.mismatch_text(a, e)}" for i, a, e in self.first]
        return out

    def to_json(self) -> dict[str, Any]:
        """The comparison as plain JSON data: the fields, coordinates as lists, the first
        mismatches as ``{"at", "got", "expected"}``."""
        return {
            "name": self.name, "passed": self.passed, "numel": self.numel, "mismatches": self.mismatches,
            "max_abs_diff": self.max_abs_diff, "max_abs_at": list(self.max_abs_at),
            "max_rel_diff": self.max_rel_diff, "max_rel_at": list(self.max_rel_at),
            "nan_actual": self.nan_actual, "nan_expected": self.nan_expected, "inf_actual": self.inf_actual,
            "inf_expected": self.inf_expected, "golden_nan": self.golden_nan, "message": self.message or None,
            "first_mismatches": [{"at": list(i), "got": a, "expected": e} for i, a, e in self.first],
        }  # fmt: skip

    def mismatch_text(self, a: float, e: float) -> str:
        """``got 25559.78, expected 25559.79 (abs diff 0.0078, rel diff 3.1e-07)``."""
        got, expected = distinct_values(a, e, self.dtype)
        diff, rel = value_diffs(a, e)
        return f"got {got}, expected {expected} (abs diff {diff:.4g}, rel diff {rel:.3g})"


def compare_tensor(
    name: str, actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float
) -> CompareReport:
    """Compare ``actual`` with ``expected`` under ``torch.isclose(rtol, atol)``, NaN equal to NaN.

    A shape mismatch fails with a message and no diffs; diffs are computed in float64.
    """
    if actual.shape != expected.shape:
        return CompareReport(
            name,
            False,
            actual.numel(),
            message=f"shape {list(actual.shape)} vs golden {list(expected.shape)}",
        )
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    ok = close(a, e, rtol, atol)
    diff, rel = diffs(a, e)
    rep = CompareReport(name, bool(ok.all()), a.numel(), dtype=actual.dtype)
    rep.mismatches = int((~ok).sum())
    if a.numel():
        i = int(diff.reshape(-1).argmax())
        rep.max_abs_diff, rep.max_abs_at = float(diff.reshape(-1)[i]), coords(i, a.shape)
        j = int(rel.reshape(-1).argmax())
        rep.max_rel_diff, rep.max_rel_at = float(rel.reshape(-1)[j]), coords(j, a.shape)
    rep.nan_actual, rep.nan_expected = int(torch.isnan(a).sum()), int(torch.isnan(e).sum())
    rep.inf_actual, rep.inf_expected = int(torch.isinf(a).sum()), int(torch.isinf(e).sum())
    rep.golden_nan = int(((~ok) & torch.isnan(e)).sum())
    bad = (~ok).reshape(-1).nonzero().reshape(-1)[:FIRST_MISMATCHES]
    flat_a, flat_e = a.reshape(-1), e.reshape(-1)
    rep.first = [(coords(int(k), a.shape), float(flat_a[k]), float(flat_e[k])) for k in bad]
    return rep


def compare_outputs(
    actual: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    names: list[str],
    rtol: float,
    atol: float,
    compare_fn: Callable[..., Any] | None = None,
) -> list[CompareReport]:
    """Compare every named output. ``compare_fn(actual, expected)`` (optional) returns a bool or
    ``(bool, message)`` and replaces the rtol/atol check."""
    reports = []
    for n in names:
        if compare_fn is None:
            reports.append(compare_tensor(n, actual[n], expected[n], rtol, atol))
            continue
        out = call_user("compare_fn", compare_fn, actual[n], expected[n], context=f" comparing output {n!r}")
        ok, msg = out if isinstance(out, tuple) and len(out) == 2 else (out, "")
        verdict = _truth(ok)
        if verdict is None or not isinstance(msg, str):
            raise HarnessError(
                f"compare_fn {function_name(compare_fn)} returned {_shown(out)} for output {n!r}; it must "
                "return a bool (True: the output matches), or a (bool, message) tuple"
            )
        reports.append(CompareReport(n, verdict, actual[n].numel(), message=msg or "custom compare_fn"))
    return reports


def _truth(v: Any) -> bool | None:
    """``v`` as a verdict: a bool, a numpy bool or a one-element bool tensor; None for anything
    else (a string "False" is truthy, so it must not pass as one)."""
    if isinstance(v, bool):
        return v
    if torch.is_tensor(v) and v.dtype == torch.bool and v.numel() == 1:
        return bool(v.item())
    if type(v).__module__ == "numpy" and type(v).__name__ == "bool_":
        return bool(v)
    return None


def _shown(v: Any) -> str:
    """A returned value in a message: a short repr and its type."""
    if torch.is_tensor(v):
        return f"a tensor of shape {list(v.shape)} and dtype {v.dtype}"
    text = repr(v)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(v).__name__})"


def check_tolerances(rtol: Any, atol: Any) -> None:
    """HarnessError unless ``rtol`` and ``atol`` are finite numbers >= 0 (checked before anything runs)."""
    problems = [p for p in (tolerance_problem("rtol", rtol), tolerance_problem("atol", atol)) if p]
    if problems:
        raise HarnessError(
            "; ".join(problems) + " (an output matches where |actual - expected| <= atol + rtol * |expected|)"
        )
