"""Hypotheses about a wrong answer tested by running the whole program again (on the bounded
float64 interpreter, ``bound.py``, or in the program's own dtypes) with one thing changed, and
comparing every output with the golden: what no single task can show.

- **Swapped offsets** (``swapped_offsets``): two offsets of one load or store exchanged
  (``ts.load(xp, [kw, kh, 0], ...)`` for ``[kh, kw, 0]``). It is how a data-movement kernel (an
  im2col, a transpose, a gather) that copies the right values to the wrong place is told from
  one that copies the wrong values, when what it writes is an intermediate the golden does not
  hold.
- **A loop one step off** (``program_loop_bound``): every loop of the program, the
  orchestration's included, one step longer or shorter: a loop that stops a block short leaves
  part of an output unwritten.
- **Narrow math** (``narrow_dtype``): one statement's cast to f16/bf16 left out, or its f16/bf16
  math done in f32 (an f16 sum of squares, a long accumulation in bf16, GEMM operands cast to
  f16): the op where the precision goes.
- **A rounding mode** (``cast_mode``): one rounding cast (a float to an integer or to a
  narrower float) with another mode (``ts.cast(x, ts.i8, mode="trunc")`` where the golden rounds
  to nearest), the program run in its own dtypes.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.analysis.localize.bound import Bounded, _BoundKernel, _BoundOrch
from tilescope.analysis.localize.golden_match import tile_close
from tilescope.analysis.localize.hypotheses import Stretched
from tilescope.analysis.localize.metrics import close
from tilescope.analysis.localize.op_naming import expr_op
from tilescope.analysis.localize.source_map import loops, statements
from tilescope.errors import TilescopeError
from tilescope.ir.nodes import CAST_MODES, BinOp, Cast, For, Kernel, MatMul, Program, Reduce, Store, UnOp
from tilescope.ir.traverse import child_exprs, walk_exprs
from tilescope.ir.types import TileType
from tilescope.runtime.interp import _KernelInterp, _OrchInterp


@dataclass(frozen=True)
class SwappedOffsets:
    """An access of ``kernel`` whose offsets ``i`` and ``j``, exchanged, make the outputs the golden's."""

    kernel: str
    access: Any  # the Load expression or the Store statement
    i: int
    j: int

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        op = "store" if isinstance(self.access, Store) else "load"
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with offsets {self.i} and {self.j} of the {op} of {self.access.tensor.name} in kernel {self.kernel}{at} "
            "exchanged, the program's outputs match the golden (run again on the interpreter): the offsets are swapped"
        )


class _Swapping(_BoundKernel):
    """A kernel on Bounded tiles with the offsets of one access exchanged."""

    def __init__(self, kernel: Kernel, access: Any, i: int, j: int):
        super().__init__(kernel)
        self.access, self.i, self.j = access, i, j

    def _swapped(self, node: Any) -> Any:
        offs = list(node.offsets)
        offs[self.i], offs[self.j] = offs[self.j], offs[self.i]
        return dataclasses.replace(node, offsets=tuple(offs))

    def expr(self, e, env):
        return super().expr(self._swapped(e) if e is self.access else e, env)

    def stmt(self, s, env) -> None:
        super().stmt(self._swapped(s) if s is self.access else s, env)


def swapped_offsets(program: Program, kernel: Kernel, accesses: list[Any], args: list[Any],
                    golden: dict[str, torch.Tensor], outputs: list[tuple[int, str]], rtol: float,
                    atol: float) -> SwappedOffsets | None:  # fmt: skip
    """The first of ``accesses`` (Loads and Stores of ``kernel``) with two offsets that, exchanged,
    make every output the golden's; ``args`` are the program's (not changed), ``outputs`` its
    (index, name) pairs."""
    for access in accesses:
        offs = access.offsets
        for i, j in itertools.combinations(range(len(offs)), 2):
            if offs[i] == offs[j]:
                continue
            orch = _BoundOrch(program, False)
            orch.kernels[kernel.name] = _Swapping(kernel, access, i, j)
            run = [Bounded.exact(a) if torch.is_tensor(a) else a for a in args]
            try:
                with torch.no_grad():
                    orch.run(run)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # the exchange reads outside a tensor: not the program meant
            if all(tile_close(run[k].v, run[k].e, golden[name], rtol, atol) for k, name in outputs):
                return SwappedOffsets(kernel.name, access, i, j)
    return None


class _StretchedOrch(_BoundOrch):
    """The whole program on Bounded tensors with one loop (the orchestration's or a kernel's) moved."""

    def __init__(self, program: Program, loop: For, steps: int, kernel: Kernel | None):
        super().__init__(program, False)
        self.loop, self.steps = loop, steps
        if kernel is not None:
            self.kernels[kernel.name] = Stretched(kernel, loop, steps)

    def expr(self, e, env):
        value = super().expr(e, env)
        if e is self.loop.stop:
            return value + self.steps * super().expr(self.loop.step, env)
        return value


@dataclass(frozen=True)
class ProgramLoop:
    """A loop of the program (``kernel`` None: the orchestration's) one step off."""

    kernel: str | None
    loop: Any
    steps: int

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        where = f"kernel {self.kernel}" if self.kernel else "the orchestration"
        at = f" at {dsl_line}" if dsl_line else ""
        more = "one step longer" if self.steps > 0 else "one step shorter"
        return (
            f"with the loop over {self.loop.var} of {where}{at} {more}, every output matches the golden "
            "(the program run again on the interpreter): the loop's bound is off by one step"
        )


def program_loop_bound(program: Program, args: list[Any], golden: dict[str, torch.Tensor],
                       outputs: list[tuple[int, str]], rtol: float, atol: float, limit: int = 16) -> ProgramLoop | None:  # fmt: skip
    """The first loop of the program (the orchestration's, then each kernel's, in source order; at
    most ``limit``) that, one step longer or shorter, makes every output the golden's."""
    found = [(None, x) for x in loops(program.body)]
    found += [(k, x) for k in program.kernels for x in statements(k.body) if isinstance(x, For)]
    for kernel, loop in found[:limit]:
        for steps in (1, -1):
            run = [Bounded.exact(a) if torch.is_tensor(a) else a for a in args]
            try:
                with torch.no_grad():
                    _StretchedOrch(program, loop, steps, kernel).run(run)
            except (IndexError, ValueError, RuntimeError, TilescopeError):
                continue  # one step more leaves a tensor: not what the program meant
            if all(tile_close(run[k].v, run[k].e, golden[name], rtol, atol) for k, name in outputs):
                return ProgramLoop(kernel.name if kernel else None, loop, steps)
    return None


@dataclass(frozen=True)
class CastMode:
    """A cast of ``kernel`` that, with ``mode``, makes every output the golden's."""

    kernel: str
    stmt: Any  # the statement holding the cast
    cast: Any
    mode: str

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        return (
            f"with mode={self.mode!r} instead of mode={self.cast.mode!r}, the cast to {self.cast.type.dtype.name} in "
            f"kernel {self.kernel}{at} makes every output match the golden (the program run again in its dtypes): "
            "it rounds otherwise than the golden"
        )


class _Recast(_KernelInterp):
    """A kernel in its dtypes with one cast's mode changed."""

    def __init__(self, kernel: Kernel, cast: Cast, mode: str):
        super().__init__(kernel, float64=False)
        self.target, self.mode = cast, mode

    def expr(self, e, env):
        return super().expr(dataclasses.replace(e, mode=self.mode) if e is self.target else e, env)


def cast_mode(program: Program, args: list[Any], golden: dict[str, torch.Tensor], outputs: list[tuple[int, str]],
              rtol: float, atol: float, limit: int = 8) -> CastMode | None:  # fmt: skip
    """The first rounding cast of the program (a float to an integer or a narrower float; at most
    ``limit``) whose other mode makes every output the golden's, run in the program's dtypes."""
    casts = []
    for k in program.kernels:
        for stmt in statements(k.body):
            for e in walk_exprs(child_exprs(stmt)):
                if isinstance(e, Cast) and isinstance(e.value.type, TileType) and e.value.type.dtype.is_float and (
                        not e.type.dtype.is_float or e.type.dtype.itemsize < e.value.type.dtype.itemsize):  # fmt: skip
                    casts.append((k, stmt, e))
    for k, stmt, c in casts[:limit]:
        for mode in (m for m in CAST_MODES if m != c.mode):
            if _golden_with(program, _Recast(k, c, mode), args, golden, outputs, rtol, atol):
                return CastMode(k.name, stmt, c, mode)
    return None


def _golden_with(program: Program, kernel: _KernelInterp, args: list[Any], golden: dict[str, torch.Tensor],
                 outputs: list[tuple[int, str]], rtol: float, atol: float) -> bool:  # fmt: skip
    """Whether every output matches the golden when the program runs in its dtypes with one of
    its kernels run by ``kernel`` (False when that run fails: it reads outside a tensor)."""
    orch = _OrchInterp(program, False)
    orch.kernels[kernel.k.name] = kernel
    run = [a.clone() if torch.is_tensor(a) else a for a in args]
    try:
        with torch.no_grad():
            orch.run(run)
    except (IndexError, ValueError, RuntimeError, TilescopeError):
        return False
    return all(bool(close(run[i], golden[name], rtol, atol).all()) for i, name in outputs)


@dataclass(frozen=True)
class NarrowDtype:
    """A kernel statement whose narrow float math (f16/bf16), done in f32, makes every output the golden's."""

    kernel: str
    stmt: Any
    op: str  # the op named: the narrowing cast, or the statement's reduction (else its outermost op)
    dtype: str  # the narrow dtype
    cast: bool  # True: the statement's cast to ``dtype`` is what loses it

    def text(self, dsl_line: str | None) -> str:
        """The evidence line."""
        at = f" at {dsl_line}" if dsl_line else ""
        what = (f"without the cast to {self.dtype}" if self.cast else
                f"with its {self.dtype} math done in f32")  # fmt: skip
        return (
            f"{what}, the statement of kernel {self.kernel}{at} makes every output match the golden (the program run "
            f"again in its dtypes): its {self.op} in {self.dtype} is where the precision goes"
        )


_NARROW = (torch.float16, torch.bfloat16)


class _Widened(_KernelInterp):
    """A kernel in its dtypes with one statement's f16/bf16 math done in f32 (``cast_only``: only
    its casts to f16/bf16 left out)."""

    def __init__(self, kernel: Kernel, stmt: Any, cast_only: bool):
        super().__init__(kernel, float64=False)
        self.target, self.cast_only = stmt, cast_only

    def expr(self, e, env):
        if self.now is not self.target:
            return super().expr(e, env)
        if isinstance(e, Cast) and e.type.dtype.torch in _NARROW:
            return super().expr(e.value, env)
        value = super().expr(e, env)
        if not self.cast_only and torch.is_tensor(value) and value.dtype in _NARROW:
            return value.float()
        return value


def _narrow_sites(program: Program) -> list[tuple[Kernel, Any, Any, bool]]:
    """(kernel, statement, op expression, cast?) of each statement that casts to f16/bf16 or
    computes in them, in source order."""
    out = []
    for k in program.kernels:
        for stmt in statements(k.body):
            exprs = list(walk_exprs(child_exprs(stmt)))
            narrowing = [e for e in exprs if isinstance(e, Cast) and e.type.dtype.torch in _NARROW
                         and isinstance(e.value.type, TileType) and e.value.type.dtype.itemsize > e.type.dtype.itemsize]
            if narrowing:
                out.append((k, stmt, narrowing[0], True))
            math = [e for e in exprs if isinstance(e, BinOp | UnOp | Reduce | MatMul) and isinstance(e.type, TileType)
                    and e.type.dtype.torch in _NARROW]  # fmt: skip
            if math:
                out.append((k, stmt, next((e for e in math if isinstance(e, Reduce | MatMul)), math[0]), False))
    return out


def narrow_dtype(program: Program, args: list[Any], golden: dict[str, torch.Tensor], outputs: list[tuple[int, str]],
                 rtol: float, atol: float, limit: int = 12) -> NarrowDtype | None:  # fmt: skip
    """The first statement (at most ``limit``) whose cast to f16/bf16 left out, or whose f16/bf16
    math done in f32, makes every output the golden's, the program run in its dtypes."""
    for k, stmt, e, cast_only in _narrow_sites(program)[:limit]:
        if _golden_with(program, _Widened(k, stmt, cast_only), args, golden, outputs, rtol, atol):
            return NarrowDtype(k.name, stmt, expr_op(e), e.type.dtype.name, cast_only)
    return None


__all__ = ["CastMode", "NarrowDtype", "narrow_dtype", "ProgramLoop", "SwappedOffsets", "cast_mode", "program_loop_bound", "swapped_offsets"]
