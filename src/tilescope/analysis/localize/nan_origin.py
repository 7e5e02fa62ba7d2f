"""Where in a statement a NaN or an Inf is made: the innermost op whose result is not finite
while its operands are (a NaN from operands without one, say ``-inf - -inf``), found by running
the kernel on the reference interpreter in the program's dtypes (which sim agrees with bit for
bit). A constant the program asks for (``ts.full(.., -inf)``), a name or a load makes nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from tilescope.ir.nodes import Const, Expr, Full, Kernel, Load, Stmt, Var
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
        if self.found is None and not isinstance(e, Const | Var | Full | Load) and _made(value, operands):
            self.found = (self.now, e)
        return value


def _made(value: Any, operands: list[Any]) -> bool:
    """``value`` holds a NaN none of ``operands`` holds, or an Inf where every operand is finite."""
    if not (torch.is_tensor(value) and value.is_floating_point()):
        return False
    tensors = [o for o in operands if torch.is_tensor(o) and o.is_floating_point()]
    if bool(torch.isnan(value).any()) and not any(bool(torch.isnan(o).any()) for o in tensors):
        return True
    return bool(torch.isinf(value).any()) and all(bool(torch.isfinite(o).all()) for o in tensors)


def nonfinite_origin(kernel: Kernel, args: list[Any]) -> tuple[Stmt, Expr] | None:
    """The statement and the innermost op of ``kernel`` that first makes a NaN or an Inf when run
    on ``args`` (copies: the arguments are written), or None."""
    origin = _Origin(kernel)
    origin.run(args)
    return origin.found
