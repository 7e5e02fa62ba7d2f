"""The default pass pipeline, as one readable list.

- FoldConstants: fold constant index arithmetic and index identities (x + 0, x * 1).
- FuseMatmulAccumulate: ``acc = acc + ts.matmul(a, b)`` -> ``acc = ts.matmul(a, b, acc=acc)``,
  which accumulates in place instead of building a temporary; not when ``a`` or ``b`` reads
  ``acc`` (accumulating in place would change ``acc`` while the product reads it).
- EliminateDeadCode: drop kernel assignments whose value is never used.
"""

from __future__ import annotations

import dataclasses

from tilescope.ir.affine import INDEX_OPS
from tilescope.ir.analysis import live_before, uses
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Const,
    Expr,
    For,
    Kernel,
    MatMul,
    Program,
    Stmt,
    Var,
)
from tilescope.ir.traverse import map_bodies, map_exprs, map_stmts
from tilescope.ir.types import IndexType
from tilescope.passes.manager import Pass

_FOLD = INDEX_OPS


def _fold(e: Expr) -> Expr:
    if not isinstance(e, BinOp) or not isinstance(e.type, IndexType):
        return e
    a, b = e.lhs, e.rhs
    if isinstance(a, Const) and isinstance(b, Const) and e.op in _FOLD:
        if e.op in ("floordiv", "mod") and b.value == 0:
            return e
        return Const(_FOLD[e.op](a.value, b.value), e.type, e.loc)
    if e.op in ("add", "sub") and isinstance(b, Const) and b.value == 0 and isinstance(a.type, IndexType):
        return a
    if e.op == "add" and isinstance(a, Const) and a.value == 0 and isinstance(b.type, IndexType):
        return b
    if e.op == "mul" and isinstance(b, Const) and b.value == 1 and isinstance(a.type, IndexType):
        return a
    if e.op == "mul" and isinstance(a, Const) and a.value == 1 and isinstance(b.type, IndexType):
        return b
    return e


def fold_constants(p: Program) -> Program:
    """FoldConstants: constant index arithmetic folded, ``x + 0`` and ``x * 1`` on indices simplified."""
    return map_exprs(p, _fold)


def _fuse_acc(s: Stmt) -> Stmt:
    if isinstance(s, Assign) and isinstance(s.value, BinOp) and s.value.op == "add":
        a, b = s.value.lhs, s.value.rhs
        for acc, mm in ((a, b), (b, a)):
            if (
                isinstance(acc, Var)
                and acc.name == s.target
                and isinstance(mm, MatMul)
                and mm.acc is None
                and acc.type == mm.type
                and acc.name not in uses(mm.lhs) | uses(mm.rhs)
            ):
                return dataclasses.replace(s, value=dataclasses.replace(mm, acc=acc, loc=s.value.loc))
    return s


def fuse_matmul_accumulate(p: Program) -> Program:
    """FuseMatmulAccumulate: in kernels, ``acc = acc + ts.matmul(a, b)`` -> ``ts.matmul(a, b, acc=acc)``."""
    return dataclasses.replace(p, kernels=map_stmts(p.kernels, _fuse_acc))


def _dce_body(body: tuple[Stmt, ...], live_after: set[str]) -> tuple[Stmt, ...]:
    out: list[Stmt] = []
    live = set(live_after)
    # Walk backwards keeping statements whose targets are live after them.
    for s in reversed(body):
        after = set(live)
        if isinstance(s, Assign) and s.target not in after:
            continue
        if isinstance(s, For):
            carried = live_before((s,), after) | after
            s = dataclasses.replace(s, body=_dce_body(s.body, carried))
        else:  # the branches of an If: each sees what is live after it
            s = map_bodies(s, lambda b, after=after: _dce_body(b, after))
        out.append(s)
        live = live_before((s,), after)
    return tuple(reversed(out))


def _dce_kernel(k: Kernel) -> Kernel:
    return dataclasses.replace(k, body=_dce_body(k.body, set()))


def eliminate_dead_code(p: Program) -> Program:
    """EliminateDeadCode: kernel assignments whose value is never read are dropped."""
    return dataclasses.replace(p, kernels=tuple(map(_dce_kernel, p.kernels)))


DEFAULT_PIPELINE: tuple[Pass, ...] = (
    Pass("FoldConstants", fold_constants, "fold constant index arithmetic"),
    Pass("FuseMatmulAccumulate", fuse_matmul_accumulate, "accumulate matmuls in place"),
    Pass("EliminateDeadCode", eliminate_dead_code, "drop unused kernel values"),
)
