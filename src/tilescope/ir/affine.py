"""Affine views of index expressions, used to derive static region shapes and bounds.

An affine form is ``const + sum(coef * var)`` over index variables. ``affine()`` returns None
for anything it cannot express (products of variables, division, scalars of unknown value).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from tilescope.ir.nodes import BinOp, Const, Expr, UnOp, Var
from tilescope.ir.types import IndexType, ScalarType

# The index arithmetic a constant expression folds with (and the coverage analysis evaluates):
# Python's floor division and modulo, as the generated C++ computes them (ts::floordiv, ts::floormod).
INDEX_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "maximum": max,
    "minimum": min,
}


@dataclass(frozen=True, slots=True)
class Affine:
    """``const + sum(coef * var)`` over index variables."""

    const: int
    terms: tuple[tuple[str, int], ...]  # sorted (var, coef), coef != 0

    @property
    def is_const(self) -> bool:
        """Whether the form has no variable terms."""
        return not self.terms

    def __sub__(self, other: Affine) -> Affine:
        return _combine(self, other, -1)

    def __add__(self, other: Affine) -> Affine:
        return _combine(self, other, 1)


def _combine(a: Affine, b: Affine, sign: int) -> Affine:
    terms = dict(a.terms)
    for v, c in b.terms:
        terms[v] = terms.get(v, 0) + sign * c
    return Affine(a.const + sign * b.const, tuple(sorted((v, c) for v, c in terms.items() if c)))


def affine(e: Expr) -> Affine | None:
    """The affine form of an index expression, or None when it has none (see the module docstring)."""
    match e:
        case Const(value=v) if isinstance(v, int) and not isinstance(v, bool):
            return Affine(v, ())
        case Var(name=n, type=t) if isinstance(t, IndexType) or (
            isinstance(t, ScalarType) and t.dtype.is_int
        ):
            return Affine(0, ((n, 1),))
        case UnOp(op="neg", operand=a):
            fa = affine(a)
            return None if fa is None else Affine(0, ()) - fa
        case BinOp(op="add" | "sub", lhs=a, rhs=b):
            fa, fb = affine(a), affine(b)
            if fa is None or fb is None:
                return None
            return fa + fb if e.op == "add" else fa - fb
        case BinOp(op="mul", lhs=a, rhs=b):
            fa, fb = affine(a), affine(b)
            if fa is None or fb is None:
                return None
            if fb.is_const:
                fa, fb = fb, fa
            if not fa.is_const:
                return None
            k = fa.const
            return Affine(k * fb.const, tuple((v, k * c) for v, c in fb.terms if k * c))
    return None


def bounds(form: Affine, ranges: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    """Inclusive [min, max] of ``form`` given inclusive ranges of its variables, or None if a
    variable's range is unknown."""
    lo = hi = form.const
    for v, c in form.terms:
        if v not in ranges:
            return None
        a, b = ranges[v]
        lo += min(c * a, c * b)
        hi += max(c * a, c * b)
    return lo, hi
