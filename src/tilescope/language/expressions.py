"""Expressions of the front-end: operators, compile-time folding, values and attributes
(subscripts are ``subscripts``).

Invariants:
- Python values (ints, floats, tuples, dtypes, kernels) are folded at compile time with every
  Python operator; only tile, scalar, index and tensor values become IR, with the operators
  ``RUNTIME_OPERATORS`` names. A compile-time ``**`` or ``<<`` is refused before it computes
  an integer wider than 4096 bits, and an index must fit 64 bits.
- Errors raised by compile-time Python (``a.shape[2]``, ``math.sqrt(-1.0)``) are DSLErrors at
  the user's line, like every other error here.
"""

from __future__ import annotations

import ast
import math
import operator
import types
from collections.abc import Callable
from typing import Any

from tilescope.errors import DSLError, VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir import type_rules as rules
from tilescope.ir.nodes import (
    BinOp,
    Const,
    MatMul,
    UnOp,
)
from tilescope.ir.op_registry import OPS
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
    INDEX,
    IndexType,
    ScalarType,
)
from tilescope.language import ops
from tilescope.language.annotations import torch_dtype_hint
from tilescope.language.op_lowering import is_number

# operator -> (IR op, fold); an IR op of None: folded on compile-time values only
_AST_BINOPS = {
    ast.Add: ("add", operator.add),
    ast.Sub: ("sub", operator.sub),
    ast.Mult: ("mul", operator.mul),
    ast.Div: ("div", operator.truediv),
    ast.FloorDiv: ("floordiv", operator.floordiv),
    ast.Mod: ("mod", operator.mod),
    ast.Pow: (None, operator.pow),
    ast.LShift: (None, operator.lshift),
    ast.RShift: (None, operator.rshift),
    ast.BitAnd: (None, operator.and_),
    ast.BitOr: (None, operator.or_),
    ast.BitXor: (None, operator.xor),
}

_AST_CMPOPS = {
    ast.Eq: ("eq", operator.eq),
    ast.NotEq: ("ne", operator.ne),
    ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le),
    ast.Gt: ("gt", operator.gt),
    ast.GtE: ("ge", operator.ge),
    ast.Is: (None, operator.is_),
    ast.IsNot: (None, operator.is_not),
    ast.In: (None, lambda a, b: a in b),
    ast.NotIn: (None, lambda a, b: a not in b),
}

_AST_UNARYOPS = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}

_OP_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.MatMult: "@",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Not: "not",
    ast.Invert: "~",
}

# what to write instead of an operator that only folds compile-time values, on run-time ones
_RUNTIME_OP_HINTS = {
    "**": "write x * x, or ts.pow(x, y)",
    "<<": "multiply by a power of two instead (i * 4)",
    ">>": "floor-divide by a power of two instead (i // 4)",
    "&": "use ts.logical_and on bool tiles",
    "|": "use ts.logical_or on bool tiles",
    "^": "use ts.logical_and / ts.logical_or / ts.logical_not on bool tiles",
    "~": "use ts.logical_not on bool tiles",
    "not": "use ts.logical_not on bool tiles",
    "is": "compare values with == or !=",
    "is not": "compare values with == or !=",
    "in": "compare values with == or !=",
    "not in": "compare values with == or !=",
}

RUNTIME_OPERATORS = "+ - * / and @ on tiles, + - * / // % on scalars and indices, unary -, and == != < <= > >="

# the largest integer (in bits) compile-time ** and << may produce: a typo such as 10 ** 10 ** 10
# would otherwise hang the compile
_MAX_FOLD_BITS = 4096

INDEX_MIN, INDEX_MAX = -(2**63), 2**63 - 1


class Expressions:
    """Operators, folding and value conversions, mixed into the front-end's lowering class
    (which provides ``expr``, ``loc``, ``error``, ``what`` and ``mode``)."""

    def fold(self, node: ast.AST, fn: Callable, *args: Any) -> Any:
        """``fn(*args)`` on compile-time values; a Python error is a DSLError at ``node``."""
        try:
            return fn(*args)
        except DSLError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of compile-time Python is the user's
            raise self.fold_error(node, e) from None

    def fold_error(self, node: ast.AST, e: Exception) -> DSLError:
        """The DSLError for compile-time Python that raised ``e`` (a VerifyError for division by zero)."""
        if isinstance(e, ZeroDivisionError):
            return VerifyError(
                f"division by zero in the compile-time expression {ast.unparse(node)}", self.loc(node)
            )
        return DSLError(
            f"cannot evaluate {ast.unparse(node)} at compile time: {type(e).__name__}: {e}",
            self.loc(node),
            "this expression runs in Python while the program is compiled",
        )

    def as_expr(self, v: Any, node: ast.AST, like: Any = None, what: str | None = None) -> Any:
        """A Python number as an IR constant (typed like ``like`` when given; ``what`` names
        the value in errors)."""
        if is_expr(v):
            return v
        loc = self.loc(node)
        if not is_number(v):
            where = f"{what}: " if what else ""
            raise DSLError(f"{where}{described(v)} cannot be used as a value here", loc)
        if isinstance(v, bool):
            return Const(v, ScalarType(dt.bool_), loc)
        if isinstance(like, ScalarType):
            if not like.dtype.is_float and isinstance(v, float) and not v.is_integer():
                raise VerifyError(f"{v!r} is not an integer for a {like}", loc)
            rules.check_literal(v, like.dtype, what or f"a {like} value", loc)
            value = float(v) if like.dtype.is_float else bool(v) if like.dtype == dt.bool_ else int(v)
            return Const(value, like, loc)
        if isinstance(v, int):
            return Const(self.check_index(v, node), INDEX, loc)
        return Const(v, ScalarType(dt.f32), loc)

    def index(self, v: Any, node: ast.AST, what: str) -> Any:
        """``v`` as an index expression (an int, an index or an integer scalar); VerifyError otherwise."""
        if isinstance(v, bool) or not (isinstance(v, int) or is_expr(v)):
            raise VerifyError(f"{what} must be an integer index, got {described(v)}", self.loc(node))
        if isinstance(v, int):
            return Const(self.check_index(v, node, what), INDEX, self.loc(node))
        t = v.type
        if isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int):
            return v
        raise VerifyError(f"{what} must be an integer index, got a {t}", self.loc(node))

    def check_index(self, v: int, node: ast.AST, what: str = "an integer") -> int:
        """A compile-time int that becomes an index: it must fit 64 bits."""
        if not INDEX_MIN <= v <= INDEX_MAX:
            raise VerifyError(
                f"{what} {dt.number_str(v)} does not fit a 64-bit index [{INDEX_MIN}, {INDEX_MAX}]",
                self.loc(node),
            )
        return v

    def static_ints(self, v: Any, node: ast.AST, what: str) -> tuple[int, ...]:
        """``v`` as a tuple of compile-time ints (a shape or sizes); VerifyError otherwise."""
        if not isinstance(v, list | tuple):
            raise VerifyError(
                f"{what} must be a list of compile-time ints, got {described(v)}", self.loc(node)
            )
        bad = [x for x in v if not isinstance(x, int) or isinstance(x, bool)]
        if bad:
            why = (
                f": {value_str(bad[0])} is a {bad[0].type}, known only at run time" if is_expr(bad[0]) else ""
            )
            raise VerifyError(
                f"{what} must be a list of compile-time ints, got {value_str(v)}{why}", self.loc(node)
            )
        return tuple(v)

    def dtype_arg(self, v: Any, node: ast.AST, what: str) -> dt.DType:
        """``v`` if it is a DType (``ts.f32``); VerifyError otherwise."""
        if not isinstance(v, dt.DType):
            raise VerifyError(
                f"{what} must be a tilescope dtype such as ts.f32, got {described(v)}{torch_dtype_hint(v)}",
                self.loc(node),
            )
        return v

    def binop(self, op: ast.operator | str, lhs: Any, rhs: Any, node: ast.AST) -> Any:
        """``lhs <op> rhs``: folded when both are compile-time values, else a typed BinOp.

        ``op`` is a Python operator node or an IR op name (``"maximum"``); an operator that only folds
        (``**``, ``<<``, ``&`` ...) on a run-time value is an error with a hint.
        """
        if isinstance(op, str):
            name, fold = op, None
        else:
            if type(op) not in _AST_BINOPS:
                raise self.error(node, f"operator {type(op).__name__} is not supported in {self.what()}")
            name, fold = _AST_BINOPS[type(op)]
        if not is_expr(lhs) and not is_expr(rhs):
            if fold is None:
                raise self.error(node, f"cannot apply {name} to {value_str(lhs)} and {value_str(rhs)}")
            self.check_fold_size(op, lhs, rhs, node)
            return self.fold(node, fold, lhs, rhs)
        if name is None:
            raise self.runtime_operator_error(op, lhs if is_expr(lhs) else rhs, node)
        loc = self.loc(node)
        lhs, rhs = self.operands(lhs, rhs, node)
        return BinOp(name, lhs, rhs, rules.binop_type(name, lhs, rhs, loc), loc)

    def operands(self, lhs: Any, rhs: Any, node: ast.AST) -> tuple[Any, Any]:
        """Both operands as IR expressions (numbers become constants); an error for anything else."""
        for v in (lhs, rhs):
            if not is_expr(v) and not is_number(v):
                raise self.error(node, f"{described(v)} cannot be used as an operand")
        return self.as_expr(lhs, node), self.as_expr(rhs, node)

    def runtime_operator_error(self, op: ast.AST, operand: Any, node: ast.AST) -> DSLError:
        """An operator that only folds compile-time values, applied to a run-time one."""
        sym = _OP_SYMBOLS.get(type(op), type(op).__name__)
        hint = _RUNTIME_OP_HINTS.get(sym)
        return self.error(
            node,
            f"operator {sym} ({type(op).__name__}) is not supported on {_a(operand.type)} in {self.what()}: "
            "it is only folded when every operand is a compile-time constant",
            (f"{hint}; " if hint else "") + f"run-time values support {RUNTIME_OPERATORS}",
        )

    def check_fold_size(self, op: ast.AST, lhs: Any, rhs: Any, node: ast.AST) -> None:
        """Refuse a compile-time ``**`` or ``<<`` whose integer result would be enormous."""
        if not (isinstance(lhs, int) and isinstance(rhs, int)) or lhs in (0, 1, -1) or rhs <= 0:
            return
        if isinstance(op, ast.Pow):
            bits = int(rhs * math.log2(abs(lhs))) + 1
        elif isinstance(op, ast.LShift):
            bits = abs(lhs).bit_length() + rhs
        else:
            return
        if bits > _MAX_FOLD_BITS:
            raise VerifyError(
                f"the compile-time value {ast.unparse(node)} has about {bits} bits, more than the "
                f"{_MAX_FOLD_BITS} bits tilescope folds",
                self.loc(node),
                "indices and literals must fit 64 bits",
            )

    def chained_compare(self, left: ast.expr, cmpops: list[ast.cmpop], rights: list[ast.expr], node) -> Any:
        """``a < b < c`` on compile-time values, with Python's short-circuit."""
        lhs = self.expr(left)
        result: Any = True
        for op, r in zip(cmpops, rights):
            rhs = self.expr(r)
            if is_expr(lhs) or is_expr(rhs):
                raise self.error(
                    node,
                    "chained comparisons work on compile-time values only",
                    "compare two run-time values at a time (a < b), and combine bool tiles with "
                    "ts.logical_and",
                )
            result = self.compare(op, lhs, rhs, node)
            if not self.fold(node, bool, result):
                return result
            lhs = rhs
        return result

    def bool_op(self, op: ast.boolop, values: list[ast.expr], node: ast.AST) -> Any:
        """``a and b`` / ``a or b`` on compile-time values: Python's value and short-circuit."""
        v: Any = None
        for e in values:
            v = self.expr(e)
            if is_expr(v):
                raise self.error(
                    node,
                    f"'and'/'or' need compile-time values, got a {v.type}",
                    "use ts.logical_and / ts.logical_or on bool tiles",
                )
            if self.fold(e, bool, v) == isinstance(op, ast.Or):
                return v
        return v

    def compare(self, op: ast.cmpop, lhs: Any, rhs: Any, node: ast.AST) -> Any:
        """``lhs <op> rhs`` for one comparison: folded on compile-time values, else a typed BinOp."""
        if type(op) not in _AST_CMPOPS:
            raise self.error(node, f"comparison {type(op).__name__} is not supported", "use == != < <= > >=")
        name, fold = _AST_CMPOPS[type(op)]
        if not is_expr(lhs) and not is_expr(rhs):
            return self.fold(node, fold, lhs, rhs)
        if name is None:
            raise self.runtime_operator_error(op, lhs if is_expr(lhs) else rhs, node)
        loc = self.loc(node)
        lhs, rhs = self.operands(lhs, rhs, node)
        return BinOp(name, lhs, rhs, rules.binop_type(name, lhs, rhs, loc), loc)

    def unary(self, op: ast.unaryop, v: Any, node: ast.AST) -> Any:
        """A unary operator: folded on a compile-time value; ``-x`` and ``+x`` on a run-time one."""
        if not is_expr(v):
            if type(op) not in _AST_UNARYOPS:
                raise self.error(node, f"operator {type(op).__name__} is not supported")
            return self.fold(node, _AST_UNARYOPS[type(op)], v)
        match op:
            case ast.USub():
                return self.unop("neg", v, node)
            case ast.UAdd():
                return v
        raise self.runtime_operator_error(op, v, node)

    def unop(self, name: str, v: Any, node: ast.AST) -> UnOp:
        """The typed UnOp ``ts.<name>(v)``; VerifyError unless ``v`` is an IR expression."""
        loc = self.loc(node)
        if not is_expr(v):
            hint = None
            if is_number(v):
                python = (OPS[name].python or "Python's math module").format(value_str(v))
                hint = f"ts.* ops compute on tiles; compute a compile-time number in Python: {python}"
            raise VerifyError(f"ts.{name} needs a tile operand, got {described(v)}", loc, hint)
        return UnOp(name, v, rules.unop_type(name, v, loc), loc)

    def matmul(
        self, a: Any, b: Any, acc: Any, node: ast.AST, transpose_a: bool = False, transpose_b: bool = False
    ) -> MatMul:
        """The typed MatMul ``a @ b`` (either transposed first, + ``acc``); VerifyError unless both
        are IR expressions."""
        loc = self.loc(node)
        for v in (a, b):
            if not is_expr(v):
                raise VerifyError(f"ts.matmul needs tiles, got {described(v)}", loc)
        t = rules.matmul_type(a, b, acc, loc, transpose_a, transpose_b)
        return MatMul(a, b, acc, transpose_a, transpose_b, t, loc)

    def runtime_min_max(self, func: Callable, args: list[Any], node: ast.Call) -> Any:
        """Python's ``min``/``max`` of run-time scalars or indices (and numbers): a chain of
        ``ts.minimum``/``ts.maximum``; tiles are refused (they compare elementwise)."""
        name = "minimum" if func is min else "maximum"
        if len(args) < 2:
            raise self.error(node, f"{func.__name__}() of run-time values takes two or more arguments")
        for a in args:
            if is_expr(a) and not isinstance(a.type, ScalarType | IndexType):
                raise self.error(
                    node,
                    f"{func.__name__}() of a {a.type}: Python's {func.__name__} compares whole values",
                    f"use ts.{name}(a, b) for an elementwise {name}",
                )
        out = args[0]
        for a in args[1:]:
            out = self.binop(name, out, a, node)
        return out

    def attribute(self, base: Any, attr: str, node: ast.AST) -> Any:
        """``base.attr``: ``shape``, ``dtype`` or ``ndim`` of an IR value (a run-time shape is an error),
        else the attribute of the compile-time object, with close matches when it has none.
        """
        if is_expr(base):
            t = base.type
            if attr == "shape" and hasattr(t, "shape"):
                if -1 in t.shape:
                    raise VerifyError(f"the shape of {t} is only known at run time", self.loc(node))
                return tuple(t.shape)
            if attr == "dtype" and hasattr(t, "dtype"):
                return t.dtype
            if attr == "ndim" and hasattr(t, "shape"):
                return len(t.shape)
            if isinstance(node.value, ast.Name) and is_dsl_name(attr) and self.named_tilescope(node.value.id):
                raise DSLError(shadowed_message(node.value.id, base, attr), self.loc(node), SHADOWED_HINT)
            if attr in ops.op_names():
                op = ops.STUBS[attr]
                call = (
                    f"ts.{attr}({ast.unparse(node.value)})"
                    if op.signature in ("(x)", "(a)")
                    else f"ts.{attr}{op.signature}"
                )
                raise self.error(node, f"{_a(t)} has no methods: ts.{attr} is an op", f"write {call}")
            available = [a for a in ("shape", "dtype", "ndim") if hasattr(t, "shape" if a == "ndim" else a)]
            raise self.error(
                node,
                f"{_a(t)} has no attribute {attr!r} in the DSL",
                f"available: {', '.join(available)}" if available else f"{_a(t)} has no attributes",
            )
        try:
            return getattr(base, attr)
        except AttributeError:
            raise self.no_attribute(base, attr, node) from None
        except Exception as e:  # noqa: BLE001 - a property of a compile-time object failed
            raise self.fold_error(node, e) from None

    def named_tilescope(self, name: str) -> bool:
        """Whether ``name`` is how the code spells the tilescope module (``ts``, or a name the
        function's module binds to it), so ``name.<op>`` on another value means it was shadowed."""
        value = self.frame.namespace.get(name)
        return name == "ts" or (isinstance(value, types.ModuleType) and value.__name__ == "tilescope")

    def no_attribute(self, base: Any, attr: str, node: ast.Attribute) -> DSLError:
        """``ts.softmax``: which ops exist, with close matches; ``math.sqroot``: close matches."""
        prefix = f"{ast.unparse(node.value)}."
        if isinstance(base, types.ModuleType) and base.__name__ == "tilescope":  # the package, as `ts`
            dsl_names = [
                *ops.op_names(),
                *(n for n in base.__all__ if isinstance(getattr(base, n, None), dt.DType)),
            ]
            message, listing = ops.unknown_op_message(prefix, attr, dsl_names, self.mode)
            return DSLError(message, self.loc(node), f"{listing} (see docs/dsl.md)")
        if isinstance(node.value, ast.Name) and is_dsl_name(attr):
            return DSLError(shadowed_message(node.value.id, base, attr), self.loc(node), SHADOWED_HINT)
        matches = ops.close_matches(attr, [n for n in dir(base) if not n.startswith("_")])
        hint = f"did you mean {' or '.join(prefix + m for m in matches)}?" if matches else None
        what = f"module {base.__name__!r}" if isinstance(base, types.ModuleType) else described(base)
        return DSLError(f"{what} has no attribute {attr!r}", self.loc(node), hint)


SHADOWED_HINT = (
    "a module-level assignment, parameter or variable of that name hides 'import tilescope as ts'; rename it"
)


def is_dsl_name(attr: str) -> bool:
    """Whether ``ts.<attr>`` is a name of the DSL (an op, a dtype, a parameter annotation)."""
    return attr in ops.op_names() or attr in dt.BY_NAME or attr in _SURFACE_NAMES


def shadowed_message(name: str, value: Any, attr: str) -> str:
    """``ts is 3 (int) here, not the tilescope module, so ts.load does not exist``."""
    what = _a(value.type) if is_expr(value) else described(value)
    return f"{name} is {what} here, not the tilescope module, so {name}.{attr} does not exist"


_SURFACE_NAMES = ("Tensor", "Out", "InOut", "Weight", "Scalar", "bool_", "kernel", "jit", "inline")


def _a(thing: Any) -> str:
    """``thing`` with its indefinite article: "a tile[4, 4] f32", "an index"."""
    text = str(thing)
    return f"{'an' if text[:1] in 'aeiou' else 'a'} {text}"
