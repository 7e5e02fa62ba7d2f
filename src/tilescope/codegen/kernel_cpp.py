"""Kernel IR -> one readable C++ file against the tile library (``tilescope/kernel.hpp``).

``acc = ts.matmul(a, b, acc=acc)`` is emitted in place (``matmul_acc(acc, a, b)``) only when
``a`` and ``b`` do not read ``acc``: the in-place form writes ``acc`` while it is being read.
"""

from __future__ import annotations

import math

from tilescope._version import __version__
from tilescope.codegen.cpp_common import (
    CppNames,
    ExprEmitter,
    context_dtype,
    function_names,
    header_comment,
    marker,
    tile_dims,
    value_type,
)
from tilescope.ir.analysis import uses
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Const,
    Expr,
    For,
    Full,
    Kernel,
    Load,
    MatMul,
    Reduce,
    Stmt,
    Store,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.types import Direction

_TILE_FN = {
    "maximum": "maximum",
    "minimum": "minimum",
    "logical_and": "logical_and",
    "logical_or": "logical_or",
}
_CMP_FN = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


class _KernelEmitter(ExprEmitter):
    def emit_other(self, e: Expr, ctx) -> str:
        match e:
            case BinOp(op=op, lhs=a, rhs=b) if op in _TILE_FN or op in _CMP_FN:
                sub = self.operand_ctx(e)
                fn = _TILE_FN.get(op) or _CMP_FN[op]
                return f"{fn}({self.emit(a, sub)}, {self.emit(b, sub)})"
            case UnOp(op=op, operand=a):
                return f"{op}({self.emit(a)})"
            case Load(tensor=t, offsets=offs, type=tt):
                r, c = tile_dims(tt)
                return f"load<{r}, {c}>({self.name(t.name)}, {{{', '.join(self.emit(o) for o in offs)}}})"
            case Full(value=v, type=tt):
                r, c = tile_dims(tt)
                return f"full<{tt.dtype.cpp}, {r}, {c}>({self.emit(v, tt.dtype)})"
            case Cast(value=v, mode=mode, type=tt):
                m = "" if mode == "rint" else f", RoundMode::{mode}"
                return f"cast<{tt.dtype.cpp}>({self.emit(v)}{m})"
            case Reduce(op=op, value=v):
                return f"{op}({self.emit(v)})"
            case MatMul(lhs=a, rhs=b, acc=c):
                extra = "" if c is None else f", {self.emit(c)}"
                return f"matmul({self.emit(a)}, {self.emit(b)}{extra})"
            case Transpose(value=v):
                return f"transpose({self.emit(v)})"
            case Where(cond=c, lhs=a, rhs=b):
                d = e.type.dtype
                return f"where({self.emit(c)}, {self.emit(a, d)}, {self.emit(b, d)})"
        raise TypeError(f"cannot emit {type(e).__name__} in a kernel")


def _zeros(e: Full) -> bool:
    """A fill with +0 (``-0.0`` keeps its sign: ``1 / -0.0`` is ``-inf``)."""
    v = e.value
    return (
        isinstance(v, Const)
        and not isinstance(v.value, bool)
        and v.value == 0
        and math.copysign(1.0, v.value) > 0
    )


def _accumulates_in_place(target: str, v: Expr) -> bool:
    return (
        isinstance(v, MatMul)
        and isinstance(v.acc, Var)
        and v.acc.name == target
        and target not in uses(v.lhs) | uses(v.rhs)
    )


def kernel_cpp(k: Kernel) -> str:
    """The C++ source of one kernel: ``extern "C" void kernel_entry(const ts_arg *args)``."""
    name_of = CppNames(function_names(k.params, k.body))
    em = _KernelEmitter(name_of)
    lines = header_comment(f"kernel {k.name} ({k.core})", k.loc, __version__)
    lines += ["#include <tilescope/kernel.hpp>", "", "using namespace ts;", ""]
    lines.append('extern "C" void kernel_entry(const ts_arg *args) {')
    for i, p in enumerate(k.params):
        name = name_of(p.name)
        if p.direction is Direction.SCALAR:
            lines.append(
                f"    const {p.type.dtype.cpp} {name} = scalar_arg<{p.type.dtype.cpp}>(args[{i}]);{marker(p.loc)}"
            )
        else:
            view = f"TensorView<{p.type.dtype.cpp}> {name}(args[{i}]);"
            where = marker(p.loc).replace("  // @", " @")
            lines.append(f"    {view:<44}// {p.direction.value} {list(p.type.shape)}{where}")
    declared: list[set[str]] = [set()]

    def stmt(s: Stmt, ind: str) -> None:
        m = marker(s.loc)
        match s:
            case Assign(target=t, value=v):
                name = name_of(t)
                if _accumulates_in_place(t, v):
                    lines.append(f"{ind}matmul_acc({name}, {em.emit(v.lhs)}, {em.emit(v.rhs)});{m}")
                    return
                if isinstance(v, Full) and _zeros(v):
                    r, c = tile_dims(v.type)
                    rhs = f"zeros<{v.type.dtype.cpp}, {r}, {c}>()"
                else:
                    rhs = em.emit(v, context_dtype(v))
                if any(t in d for d in declared):
                    lines.append(f"{ind}{name} = {rhs};{m}")
                else:
                    declared[-1].add(t)
                    lines.append(f"{ind}{value_type(v.type)} {name} = {rhs};{m}")
            case Store(tensor=t, offsets=offs, value=v):
                off = ", ".join(em.emit(o) for o in offs)
                lines.append(f"{ind}store({name_of(t.name)}, {{{off}}}, {em.emit(v)});{m}")
            case For(var=v, start=a, stop=b, step=c, body=body):
                var = name_of(v)
                lines.append(
                    f"{ind}for (int64_t {var} = {em.emit(a)}; {var} < {em.emit(b)}; {var} += {em.emit(c)}) {{{m}"
                )
                declared.append({v})
                for x in body:
                    stmt(x, ind + "    ")
                declared.pop()
                lines.append(f"{ind}}}")
            case _:
                raise TypeError(f"cannot emit {type(s).__name__} in a kernel")

    for s in k.body:
        stmt(s, "    ")
    lines.append("}")
    return "\n".join(lines) + "\n"
