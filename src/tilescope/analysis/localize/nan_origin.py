"""Where in a statement a NaN or an Inf is made: the innermost op whose result is not finite
while its operands are (a NaN from operands without one, say ``-inf - -inf``; an Inf of a sign
no operand has, say ``x - -inf``), found by running
the kernel on the reference interpreter in the program's dtypes (which sim agrees with bit for
bit). A constant the program asks for (``ts.full(.., -inf)``, a ``fill=-inf``, ``ts.where(mask, t, -inf)``),
a name or a load makes nothing.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilescope.ir.nodes import Const, Expr, Full, Kernel, Load, Stmt, Var, Where
from tilescope.runtime.interp import _KernelInterp


class _Origin(_KernelInterp):
    def __init__(self, kernel: Kernel):
        super().__init__(kernel, float64=False)
        self.found: tuple[Stmt, Expr] | None = None
        self._operands: list[list[Any]] = []

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        self._operands.append([])
        try:
            value = super().expr(e, env)
        finally:
            operands = self._operands.pop()
        if self._operands:
            self._operands[-1].append(value)
        if self.found is None and not isinstance(e, Const | Var | Full | Load) and not asks_inf(e) and _made(
                value, operands):  # fmt: skip
            self.found = (self.now, e)
        return value


def _inf_const(e: Any) -> bool:
    return isinstance(e, Const) and isinstance(e.value, float) and math.isinf(e.value)


def asks_inf(e: Expr) -> bool:
    """Whether ``e`` itself puts an infinity the program asks for into a tile: a masked load's
    ``fill=-inf``, ``ts.full(.., -inf)``, ``ts.where(mask, t, -inf)``."""
    match e:
        case Load(fill=fill):
            return _inf_const(fill)
        case Full(value=v):
            return _inf_const(v)
        case Where(lhs=a, rhs=b):
            return _inf_const(a) or _inf_const(b)
    return False


def _made(value: Any, operands: list[Any]) -> bool:
    """``value`` holds a NaN none of ``operands`` holds, an Inf where every operand is finite, or
    an Inf of a sign no operand holds (``finite - -inf``: a -inf the program asked for, flipped)."""
    if not (torch.is_tensor(value) and value.is_floating_point()):
        return False
    tensors = [o for o in operands if torch.is_tensor(o) and o.is_floating_point()]
    if bool(torch.isnan(value).any()) and not any(bool(torch.isnan(o).any()) for o in tensors):
        return True
    if bool(torch.isinf(value).any()) and all(bool(torch.isfinite(o).all()) for o in tensors):
        return True
    for sign in (torch.isposinf, torch.isneginf):
        if bool(sign(value).any()) and not any(bool(sign(o).any()) for o in tensors) and any(
                bool(torch.isinf(o).any()) for o in tensors):  # fmt: skip
            return True
    return False


def nonfinite_origin(kernel: Kernel, args: list[Any]) -> tuple[Stmt, Expr] | None:
    """The statement and the innermost op of ``kernel`` that first makes a NaN or an Inf when run
    on ``args`` (copies: the arguments are written), or None."""
    origin = _Origin(kernel)
    origin.run(args)
    return origin.found
