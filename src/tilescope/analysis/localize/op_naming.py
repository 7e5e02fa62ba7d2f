"""How localize names an op: the DSL op a statement or an expression is, and the op a hand edit
of a C++ line changed."""

from __future__ import annotations

import difflib
import re
from typing import Any

from tilescope.codegen.cpp_common import CPP_OPERATORS
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
    Scan,
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
        case Scan(op=op):
            return op
    return type(e).__name__.lower()


# a C++ line's tokens: a number whole (``2.0f``, ``1e-5``), a name, a two-character operator, any other character
_TOKEN = re.compile(r"\d+\.?\d*(?:[eE][-+]?\d+)?[fFlLuU]*|\.\d+(?:[eE][-+]?\d+)?[fF]?|\w+|<=|>=|==|!=|&&|\|\||::|\S")


def edited_op(stmt: Any, generated: str, now: str) -> str:
    """The op of ``stmt`` an edit of its C++ line changed: the op the generated line calls where
    the edited one differs (``row_sum`` edited into ``row_max``); for an edited operand (a
    constant, a variable), the operator next to it (``x * 2.0f`` into ``x * 3.0f`` is ``mul``) or
    the call it is an argument of; else the statement's op."""
    a, b = _TOKEN.findall(generated), _TOKEN.findall(now)
    ops = {expr_op(e) for e in walk_exprs(stmt)}
    changed = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in
               difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if tag != "equal"]  # fmt: skip
    for i1, i2, j1, j2 in changed:  # an op replaced, or one put in: the generated line's first
        hit = next((CPP_OPERATORS.get(t, t) for t in [*a[i1:i2], *b[j1:j2]] if CPP_OPERATORS.get(t, t) in ops), None)
        if hit is not None:
            return hit
    for i1, i2, _, _ in changed:
        hit = _operand_of(a, i1, i2, ops | {"store"})
        if hit is not None:
            return hit
    return op_name(stmt)


def _operand_of(tokens: list[str], i1: int, i2: int, ops: set[str]) -> str | None:
    """The op whose operand tokens[i1:i2] is: the operator beside it, else the call around it."""
    for t in (tokens[i1 - 1] if i1 > 0 else None, tokens[i2] if i2 < len(tokens) else None):
        op = CPP_OPERATORS.get(t or "")
        if op in ops:
            return op
    depth = 0
    for k in range(i1 - 1, -1, -1):
        t = tokens[k]
        if t in ")]}":
            depth += 1
        elif t in "([{" and depth:
            depth -= 1
        elif t == "(":
            name = _callee(tokens, k)
            name = "load" if name == "view" else name  # a load read in place (kernel_fusion.py)
            if name in ops:
                return name
    return None


def _callee(tokens: list[str], paren: int) -> str | None:
    """The function name before the ``(`` at ``paren``, past template arguments (``load<64, 64>(``)."""
    k = paren - 1
    if k >= 0 and tokens[k] == ">":
        depth = 0
        while k >= 0:
            depth += tokens[k] == ">"
            depth -= tokens[k] == "<"
            if depth == 0:
                break
            k -= 1
        k -= 1
    return tokens[k] if k >= 0 else None


__all__ = ["edited_op", "expr_op", "op_name"]
