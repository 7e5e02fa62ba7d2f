"""How localize names an op: the DSL op a statement or an expression is, and the op a hand edit
of a C++ line changed."""

from __future__ import annotations

import difflib
import re
from typing import Any

from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Expr,
    For,
    Full,
    Load,
    LoadRows,
    MatMul,
    Reduce,
    Store,
    TileSlice,
    Transpose,
    UnOp,
    Where,
)
from tilescope.ir.traverse import walk_exprs


def op_name(stmt: Any) -> str:
    """The DSL op a statement's value is (``row_sum``, ``exp``, ``div``, ``cast``, ``store``)."""
    match stmt:
        case Store():
            return "store"
        case For():
            return "for"
        case Assign(value=v):
            return expr_op(v)
    return type(stmt).__name__.lower()


def expr_op(e: Expr) -> str:
    """The DSL op an expression is (its outermost one)."""
    match e:
        case BinOp(op=op) | UnOp(op=op) | Reduce(op=op):
            return op
        case Cast():
            return "cast"
        case MatMul():
            return "matmul"
        case Load():
            return "load"
        case LoadRows():
            return "load_rows"
        case TileSlice():
            return "slice"
        case Full():
            return "full"
        case Where():
            return "where"
        case Transpose():
            return "transpose"
    return type(e).__name__.lower()


def edited_op(stmt: Any, generated: str, now: str) -> str:
    """The op of ``stmt`` an edit of its C++ line changed: the op the generated line calls where
    the edited one differs (``row_sum`` edited into ``row_max``), else the statement's op."""
    a, b = re.findall(r"\w+|\S", generated), re.findall(r"\w+|\S", now)
    ops = {expr_op(e) for e in walk_exprs(stmt)}
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            hit = next((t for t in a[i1:i2] if t in ops), None)
            if hit is not None:
                return hit
    return op_name(stmt)


__all__ = ["edited_op", "expr_op", "op_name"]
