"""Expressions of the front-end: operators, compile-time folding, values, attributes and
subscripts.

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
from tilescope.ir.affine import affine
from tilescope.ir.nodes import (
    BinOp,
    Const,
    MatMul,
    Slice,
    SliceRange,
    TensorRead,
    TileSlice,
    UnOp,
    Var,
)
from tilescope.ir.printer import described, value_str
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import (
    INDEX,
    IndexType,
    ScalarType,
    TensorType,
    TileType,
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

# the Python spelling of a ts.<op> applied to a compile-time number (``{}`` is the number)
_PYTHON_UNARY = {
    "exp": "math.exp({})",
    "log": "math.log({})",
    "sqrt": "math.sqrt({})",
    "rsqrt": "1 / math.sqrt({})",
    "abs": "abs({})",
    "neg": "-{}",
    "tanh": "math.tanh({})",
    "sigmoid": "1 / (1 + math.exp(-{}))",
}

RUNTIME_OPERATORS = "+ - * / // % (and @ on tiles), unary -, and == != < <= > >="

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
                python = _PYTHON_UNARY.get(name, "Python's math module").format(value_str(v))
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
                op = getattr(ops, attr)
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
        """``ts.gelu``: which ops exist, with close matches; ``math.sqroot``: close matches."""
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

    def subscript(self, base: Any, sl: ast.expr, node: ast.AST) -> Any:
        """``base[sl]``: a compile-time list item, or a tensor region in an orchestration; anything
        else (a kernel tensor, a region, a tile) is an error saying what to write instead.
        """
        if isinstance(base, list | tuple):
            i = self.expr(sl)
            if not isinstance(i, int):
                raise self.error(node, "compile-time lists are indexed with compile-time ints")
            return self.fold(node, operator.getitem, base, i)
        if isinstance(base, Var) and isinstance(base.type, TensorType):
            if self.mode != "orch":
                raise self.error(
                    node,
                    "tensors are not sliced inside kernels",
                    "read a tile with ts.load(tensor, offsets, sizes)",
                )
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            if len(elts) == len(base.type.shape) and not any(isinstance(e, ast.Slice) for e in elts):
                return self.tensor_read(base, elts, node)
            return self.slice(base, sl, node)
        if isinstance(base, Slice):
            raise self.error(node, "a region cannot be sliced again", "slice the tensor once: x[a:b, c:d]")
        if is_expr(base) and isinstance(base.type, TileType):
            return self.tile_slice(base, sl, node)
        if is_expr(base):
            raise self.error(node, f"a {base.type} cannot be indexed")
        raise self.error(node, f"{described(base)} cannot be indexed in {self.what()}")

    def slice(self, base: Var, sl: ast.expr, node: ast.AST) -> Slice:
        """The region ``base[sl]``: one SliceRange per dim (missing dims are whole, an integer index
        squeezes its dim, negative compile-time bounds count from the end). A dim whose extent is not
        constant is -1 in the type; compile-time bounds must lie inside the tensor.
        """
        loc = self.loc(node)
        t: TensorType = base.type
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if len(elts) > len(t.shape):
            raise VerifyError(f"{len(elts)} indices for a {len(t.shape)}-D tensor {base.name}: {t}", loc)
        ranges, shape = [], []
        for dim, size in enumerate(t.shape):
            e = elts[dim] if dim < len(elts) else ast.Slice()
            if isinstance(e, ast.Slice):
                if e.step is not None and self.expr(e.step) != 1:
                    raise self.error(e, "slices with a step are not supported", "use step 1 (x[a:b])")
                start = self.expr(e.lower) if e.lower is not None else 0
                stop = self.expr(e.upper) if e.upper is not None else size
                squeeze = False
            else:
                start = self.expr(e)
                stop = start + 1 if isinstance(start, int) else None
                squeeze = True
            if isinstance(start, int) and start < 0:
                start += size
            if isinstance(stop, int) and stop < 0:
                stop += size
            start_e = self.index(start, node, f"slice start of dim {dim}")
            if stop is None:
                stop_e = BinOp("add", start_e, Const(1, INDEX), INDEX, loc)
            else:
                stop_e = self.index(stop, node, f"slice stop of dim {dim}")
            if (
                isinstance(start, int)
                and isinstance(stop, int)
                and 0 <= start
                and stop <= size
                and start >= stop
            ):
                raise VerifyError(
                    f"slice of {base.name} dim {dim}: [{start}, {stop}) is empty (start {start} >= stop {stop}); "
                    "a region holds at least one element",
                    loc,
                    "slice a:b with a < b",
                )
            if isinstance(start, int) and isinstance(stop, int) and not (0 <= start < stop <= size):
                raise VerifyError(
                    f"slice of {base.name} dim {dim}: [{start}, {stop}) is outside the tensor's shape {list(t.shape)}",
                    loc,
                )
            ranges.append(SliceRange(start_e, stop_e, squeeze))
            if not squeeze:
                fa, fb = affine(start_e), affine(stop_e)
                ext = (fb - fa) if fa is not None and fb is not None else None
                shape.append(ext.const if ext is not None and ext.is_const else -1)
        if not shape:
            raise VerifyError(f"indexing every dim of {base.name} leaves no region", loc, "use a slice a:a+1")
        return Slice(base, tuple(ranges), TensorType(tuple(shape), t.dtype), loc)

    def tensor_read(self, base: Var, elts: list[ast.expr], node: ast.AST) -> Any:
        """``counts[e]`` (every dim indexed) in an orchestration: a run-time read of one element of
        an integer tensor. Compile-time indices must lie inside the tensor (a negative one counts
        from the end). Read as the whole value of ``name = ...`` it is that assignment's value;
        anywhere else it gets a variable of its own first, so it runs once, where it is written."""
        loc = self.loc(node)
        t: TensorType = base.type
        if not t.dtype.is_int:
            raise VerifyError(
                f"the orchestration reads an element of {base.name} ({t}): only integer tensors "
                f"({', '.join(dt.name for dt in _READABLE)}) can be read; orchestrations never touch tile data",
                loc,
                f"pass {base.name} to a kernel, or slice it ({base.name}[a:a + 1, ...]) to give a kernel a region",
            )
        indices = []
        for dim, (e, size) in enumerate(zip(elts, t.shape)):
            i = self.expr(e)
            if isinstance(i, int) and not isinstance(i, bool):
                if not -size <= i < size:
                    raise VerifyError(
                        f"index {i} of {base.name} dim {dim} is outside the tensor's shape {list(t.shape)}", loc
                    )
                i %= size
            indices.append(self.index(i, e, f"index {dim} of {base.name}"))
        read = TensorRead(base, tuple(indices), ScalarType(t.dtype), loc)
        if getattr(self, "bare_read", None) is node:
            return read
        return self.new_var(f"{base.name}_read", read, loc)


    def tile_slice(self, base: Any, sl: ast.expr, node: ast.AST) -> TileSlice:
        """``t[r0:r1, c0:c1]``: a static sub-tile (compile-time bounds, step 1, negative bounds count
        from the end, missing dims whole); an integer index drops its dim as numpy does."""
        loc = self.loc(node)
        shape = base.type.shape
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if len(elts) > len(shape):
            raise VerifyError(f"{len(elts)} indices for a {base.type}", loc)
        starts, sizes, kept = [], [], []
        for dim, size in enumerate(shape):
            e = elts[dim] if dim < len(elts) else ast.Slice()
            if isinstance(e, ast.Slice):
                if e.step is not None and self.expr(e.step) != 1:
                    raise self.error(e, "tile slices take step 1", "write t[a:b]")
                bounds = [self.expr(b) if b is not None else d for b, d in ((e.lower, 0), (e.upper, size))]
            else:
                i = self.expr(e)
                bounds = [i, (size if i == -1 else i + 1) if isinstance(i, int) else i]
            for b in bounds:
                if not isinstance(b, int) or isinstance(b, bool):
                    raise VerifyError(
                        f"tile slice bounds must be compile-time ints, got {value_str(b)}"
                        + (f" (a {b.type}, known only at run time)" if is_expr(b) else ""),
                        loc,
                        "a tile's shape is static; to take a run-time part of a tensor use ts.load(..., valid=)",
                    )
            a, b = (x + size if x < 0 else x for x in bounds)
            if not 0 <= a < b <= size:
                raise VerifyError(
                    f"tile slice dim {dim}: [{bounds[0]}, {bounds[1]}) is empty or outside the {base.type}",
                    loc,
                    f"bounds must satisfy 0 <= start < stop <= {size}",
                )
            starts.append(a)
            sizes.append(b - a)
            if isinstance(e, ast.Slice):
                kept.append(b - a)
        if not kept:
            raise VerifyError(
                f"indexing every dim of a {base.type} leaves a single element, not a tile",
                loc,
                "keep a dim: t[i:i + 1, j:j + 1]",
            )
        return TileSlice(base, tuple(starts), tuple(sizes), TileType(tuple(kept), base.type.dtype), loc)


# the dtypes an orchestration may read (TensorRead): the integer ones
_READABLE = tuple(d for d in dt.ALL_DTYPES if d.is_int)


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


_SURFACE_NAMES = ("Tensor", "Out", "InOut", "Scalar", "bool_", "kernel", "jit", "inline")


def _a(thing: Any) -> str:
    """``thing`` with its indefinite article: "a tile[4, 4] f32", "an index"."""
    text = str(thing)
    return f"{'an' if text[:1] in 'aeiou' else 'a'} {text}"
