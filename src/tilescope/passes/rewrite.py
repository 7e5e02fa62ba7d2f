"""Bottom-up rewriting helpers for passes: rebuild expressions and bodies with a function."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    DumpTag,
    Evaluate,
    Expr,
    For,
    Full,
    If,
    Load,
    MatMul,
    Program,
    Reduce,
    Slice,
    SliceRange,
    Stmt,
    Store,
    Submit,
    Transpose,
    UnOp,
    Where,
)

ExprFn = Callable[[Expr], Expr]


def map_expr(e: Expr, f: ExprFn) -> Expr:
    """Apply ``f`` to every sub-expression, children first."""
    r = lambda x: map_expr(x, f)  # noqa: E731
    match e:
        case BinOp():
            e = dataclasses.replace(e, lhs=r(e.lhs), rhs=r(e.rhs))
        case UnOp() | Cast() | Reduce() | Transpose() | Full():
            field = "operand" if isinstance(e, UnOp) else "value"
            e = dataclasses.replace(e, **{field: r(getattr(e, field))})
        case Load():
            e = dataclasses.replace(e, offsets=tuple(map(r, e.offsets)))
        case MatMul():
            e = dataclasses.replace(e, lhs=r(e.lhs), rhs=r(e.rhs), acc=None if e.acc is None else r(e.acc))
        case Where():
            e = dataclasses.replace(e, cond=r(e.cond), lhs=r(e.lhs), rhs=r(e.rhs))
        case Slice():
            e = dataclasses.replace(
                e, ranges=tuple(SliceRange(r(x.start), r(x.stop), x.squeeze) for x in e.ranges)
            )
        case Submit():
            e = dataclasses.replace(e, args=tuple(map(r, e.args)))
        case DumpTag():
            pass
    return f(e)


def map_stmt_exprs(s: Stmt, f: ExprFn) -> Stmt:
    """Rewrite the expressions of ``s`` (and of nested bodies)."""
    m = lambda x: map_expr(x, f)  # noqa: E731
    match s:
        case Assign():
            return dataclasses.replace(s, value=m(s.value))
        case Evaluate():
            return dataclasses.replace(s, value=m(s.value))
        case Store():
            return dataclasses.replace(s, offsets=tuple(map(m, s.offsets)), value=m(s.value))
        case For():
            body = tuple(map_stmt_exprs(x, f) for x in s.body)
            return dataclasses.replace(s, start=m(s.start), stop=m(s.stop), body=body)
        case If():
            return dataclasses.replace(
                s,
                cond=m(s.cond),
                then=tuple(map_stmt_exprs(x, f) for x in s.then),
                orelse=tuple(map_stmt_exprs(x, f) for x in s.orelse),
            )
    raise TypeError(s)


def map_program_exprs(p: Program, f: ExprFn) -> Program:
    kernels = tuple(
        dataclasses.replace(k, body=tuple(map_stmt_exprs(s, f) for s in k.body)) for k in p.kernels
    )
    return dataclasses.replace(p, body=tuple(map_stmt_exprs(s, f) for s in p.body), kernels=kernels)
