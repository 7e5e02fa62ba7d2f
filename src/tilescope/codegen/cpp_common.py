"""Pieces shared by the kernel and orchestration C++ emitters.

Invariants: generated C++ reads like hand-written code against the tile library and the
orchestration API; every statement line ends with a ``// @ <file>:<line>`` marker naming the
DSL line it came from (the toolchain maps compile errors back through it, and a hand edit
keeps its marker). Names are mapped per function by ``CppNames``, one-to-one: a name that
collides with a C++ keyword or a name the generated code uses gets a ``_`` suffix (or
``_<n>_`` when the function already has that name). Scalar bf16/f16 arithmetic is computed in
float and converted back explicitly after every op, as the interpreter rounds it. Integer
scalar ``+ - *``, and ``//``/``%`` by anything but a constant other than 0 and -1, go through
``ts::arith`` (index.hpp): exact, or an error naming the expression and its line, never a wrap
or a SIGFPE, as the interpreter checks them (``runtime.interp.checked_int``).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable

import numpy as np

from tilescope.errors import SourceLoc
from tilescope.ir import dtypes as dt
from tilescope.ir.analysis import CHECKED_OPS, checked_int, int_type_name
from tilescope.ir.dtypes import DType
from tilescope.ir.nodes import Assign, BinOp, Const, Expr, For, UnOp, Var
from tilescope.ir.op_registry import OPS, cpp_names
from tilescope.ir.printer import expr_str
from tilescope.ir.traverse import walk_exprs, walk_stmts
from tilescope.ir.types import IndexType, ScalarType, TileType, Type

# C++ keywords and the names the generated code uses, with every tile-library function an op
# calls (ir.op_registry): a variable of one of these names is renamed
CPP_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class
    compl const constexpr const_cast continue decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new noexcept
    not not_eq nullptr operator or or_eq private protected public register reinterpret_cast return short
    signed sizeof static static_assert static_cast struct switch template this thread_local throw true
    try typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq args
    api ctx nargs orch task ts std main matmul_acc matmul_dot matmul_acc_dot scalar_arg Tile TensorView RoundMode int8_t int16_t
    int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t INT64_C ts_arg kernel_entry
    orchestration_entry bf16 f16 select convert probe_box probe_sink ProbeSink ts_probe_install slice
    load_valid store_valid check_bound negative_bound_message arith TileView Extent view extent fuse weight
    WeightView weights_changed ts_weights_changed weights_changed_in ts_weights_changed_in""".split()
) | cpp_names()

_CPP_BINOPS = {"add": ("+", 6), "sub": ("-", 6), "mul": ("*", 7), "div": ("/", 7)}
_CPP_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# the DSL op each C++ operator the emitter writes stands for (what a tool reading a C++ line maps back)
CPP_OPERATORS = {sym: op for op, (sym, _) in _CPP_BINOPS.items()} | {sym: op for op, sym in _CPP_CMP.items()}


class CppNames:
    """The C++ identifier of each variable name of one function, one-to-one.

    A name that is not reserved keeps its spelling; a reserved one (``exp``) becomes ``exp_``,
    or ``exp_1_``, ``exp_2_``... when the function has a name of that spelling already.
    """

    def __init__(self, names: Iterable[str], reserved: Iterable[str] = ()):
        self.reserved = CPP_RESERVED | frozenset(reserved)
        names = set(names)
        taken = set(names) | self.reserved
        self._map = {n: n for n in names if n not in self.reserved}
        for n in sorted(names & self.reserved):
            candidate, i = f"{n}_", 0
            while candidate in taken:
                i += 1
                candidate = f"{n}_{i}_"
            taken.add(candidate)
            self._map[n] = candidate

    def __call__(self, name: str) -> str:
        """The C++ identifier of ``name``; KeyError if it is not a variable of this function."""
        try:
            return self._map[name]
        except KeyError:
            raise KeyError(f"{name!r} is not a variable of this function") from None


def function_names(params, body) -> set[str]:
    """Every variable name of a function: parameters, assignment targets, loop variables and
    the variables its expressions read."""
    names = {p.name for p in params}
    for s in walk_stmts(body):
        if isinstance(s, Assign):
            names.add(s.target)
        elif isinstance(s, For):
            names.add(s.var)
    names.update(e.name for e in walk_exprs(body) if isinstance(e, Var))
    return names


def string_literal(text: str) -> str:
    """``text`` as a C++ string literal: quotes, backslashes, control and non-ASCII characters
    are escaped (octal escapes of the UTF-8 bytes, which end after three digits)."""
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def marker(loc: SourceLoc | None) -> str:
    """The ``  // @ <file>:<line>`` suffix naming a statement's DSL line; ``''`` without a location."""
    if loc is None:
        return ""
    return f"  // @ {display_path(loc.file)}:{loc.line}"


def display_path(path: str) -> str:
    """A path relative to the working directory when that is shorter."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") and len(rel) < len(path) else path


def tile_type(t: TileType) -> str:
    """The tile library's type of a tile: ``Tile<T, R, C>`` (a 1-D tile of N is ``1 x N``)."""
    r, c = (1, t.shape[0]) if len(t.shape) == 1 else t.shape
    return f"Tile<{t.dtype.cpp}, {r}, {c}>"


def tile_dims(t: TileType) -> tuple[int, int]:
    """A tile's C++ rows and columns (a 1-D tile of N is ``(1, N)``)."""
    return (1, t.shape[0]) if len(t.shape) == 1 else (t.shape[0], t.shape[1])


def value_type(t: Type) -> str:
    """The C++ type of a tile, scalar or index value; TypeError for a tensor or task."""
    if isinstance(t, TileType):
        return tile_type(t)
    if isinstance(t, ScalarType):
        return t.dtype.cpp
    if isinstance(t, IndexType):
        return "int64_t"
    raise TypeError(f"no C++ value type for {t}")


def literal(value: int | float | bool, dtype: DType | None) -> str:
    """A C++ literal of ``value`` in the computation type of ``dtype`` (float for f32/bf16/f16,
    double for f64, int64 for indices)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if dtype is None or dtype.is_int or dtype == dt.bool_:
        if isinstance(value, float):
            value = int(value)
        return str(value) if -(2**31) <= value < 2**31 else f"INT64_C({value})"
    v = float(value)
    single = dtype != dt.f64
    if single and math.isfinite(v):
        v = _to_f32(v)  # as interp rounds a literal: ties to even (overflow: infinity)
    if math.isnan(v):
        return (
            "std::numeric_limits<float>::quiet_NaN()"
            if single
            else "std::numeric_limits<double>::quiet_NaN()"
        )
    if math.isinf(v):
        inf = (
            "std::numeric_limits<float>::infinity()" if single else "std::numeric_limits<double>::infinity()"
        )
        return inf if v > 0 else f"-{inf}"
    if not single:
        s = repr(v)
        return s if "e" in s or "." in s else s + ".0"
    # the shortest decimal that is this f32: g++ reads it back as exactly this value, where the
    # double's own decimal could round the other way (1.0000000596046448, halfway between two
    # f32 values, rounds to 1.0 here as on interp)
    f = np.float32(v)
    if v == 0 or 1e-4 <= abs(v) < 1e16:
        return np.format_float_positional(f, unique=True, trim="0") + "f"
    return np.format_float_scientific(f, unique=True, trim="0") + "f"


def _to_f32(v: float) -> float:
    """``v`` rounded to the nearest f32, ties to even (beyond f32's range: +-infinity)."""
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def context_dtype(e: Expr) -> DType | None:
    """The dtype of a tile or scalar expression (what a literal beside it adopts), else None."""
    t = e.type
    return t.dtype if isinstance(t, TileType | ScalarType) else None


def is_half(t: Type) -> bool:
    """Whether ``t`` is a bf16 or f16 scalar (computed in float, converted back after each op)."""
    return isinstance(t, ScalarType) and t.dtype in (dt.bf16, dt.f16)


class ExprEmitter:
    """Index and scalar expressions (shared); kernels extend it with tile ops. ``at`` is the DSL
    line of the statement being emitted (what a checked op's error names)."""

    def __init__(self, names: CppNames):
        self.name = names
        self.at: SourceLoc | None = None

    def emit(self, e: Expr, ctx: DType | None = None) -> str:
        """C++ text of ``e``; a literal in it takes ``ctx``'s computation type when it has none of its own."""
        return self._emit(e, ctx)[0]

    def _emit(self, e: Expr, ctx: DType | None) -> tuple[str, int]:
        """C++ text and its precedence (higher binds tighter)."""
        if is_half(e.type) and isinstance(e, BinOp | UnOp | Const):
            # NOTE: bf16/f16 scalars compute in float (their implicit conversion); a result or
            # a literal converts back explicitly (the constructor is explicit), so each op
            # rounds as the interpreter rounds it.
            text, _ = self._emit_value(e, ctx)
            return f"{e.type.dtype.cpp}({text})", 16
        return self._emit_value(e, ctx)

    def _emit_value(self, e: Expr, ctx: DType | None) -> tuple[str, int]:
        match e:
            case Const(value=v, type=t):
                dtype = t.dtype if isinstance(t, ScalarType) and t.dtype != dt.bool_ else ctx
                if isinstance(t, IndexType) and ctx is None:
                    dtype = None
                s = literal(v, dtype)
                return s, (15 if not s.startswith("-") else 14)
            case Var(name=n):
                return self.name(n), 16
            case BinOp(op=op, lhs=a, rhs=b) if checked_int(e):
                ctype = value_type(e.type)
                what = string_literal(f"{expr_str(e)} at {self.at}" if self.at is not None else expr_str(e))
                args = f"{self.emit(a)}, {self.emit(b)}, {string_literal(int_type_name(e.type))}, {what}"
                return f"ts::arith<'{CHECKED_OPS[op][0]}', {ctype}>({args})", 16
            case BinOp(op=op, lhs=a, rhs=b) if op in _CPP_BINOPS:
                sym, p = _CPP_BINOPS[op]
                sub_ctx = self.operand_ctx(e)
                la, pa = self._emit(a, sub_ctx)
                lb, pb = self._emit(b, sub_ctx)
                la = la if pa >= p else f"({la})"
                lb = lb if pb > p else f"({lb})"
                return f"{la} {sym} {lb}", p
            case BinOp(op="floordiv" | "mod" as op, lhs=a, rhs=b):
                fn = OPS[op].cpp
                return f"ts::{fn}({self.emit(a)}, {self.emit(b)})", 16
            case BinOp(op=op, lhs=a, rhs=b) if op in _CPP_CMP and not isinstance(e.type, TileType):
                return f"{self._wrap(a, 10)} {_CPP_CMP[op]} {self._wrap(b, 10)}", 9
            case BinOp(op="maximum" | "minimum" as op, lhs=a, rhs=b) if not isinstance(e.type, TileType):
                fn = "std::max" if op == "maximum" else "std::min"
                vt = "float" if is_half(e.type) else value_type(e.type)
                return f"{fn}<{vt}>({self.emit(a)}, {self.emit(b)})", 16
            case UnOp(op="neg", operand=a) if not isinstance(e.type, TileType):
                return f"-{self._wrap(a, 14)}", 14
        return self.emit_other(e, ctx), 16

    def _wrap(self, e: Expr, p: int) -> str:
        s, q = self._emit(e, context_dtype(e))
        return s if q >= p else f"({s})"

    def operand_ctx(self, e: BinOp) -> DType | None:
        """The dtype a BinOp's operands compute in: its first non-literal tile or scalar operand's."""
        for x in (e.lhs, e.rhs):
            if isinstance(x.type, TileType | ScalarType) and not isinstance(x, Const):
                return x.type.dtype
        return context_dtype(e)

    def emit_other(self, e: Expr, ctx: DType | None) -> str:
        """C++ of a node the shared emitter does not handle; subclasses extend it, here a TypeError."""
        raise TypeError(f"cannot emit {type(e).__name__} here")


def header_comment(what: str, loc: SourceLoc | None, version: str) -> list[str]:
    """The comment lines that open a generated C++ file: what it is, its DSL origin, how to edit it."""
    src = f" from {display_path(loc.file)}:{loc.line}" if loc else ""
    return [
        f"// {what} — generated by tilescope {version}{src}.",
        "// Edit freely and re-run with --runtime-dir: only edited files are rebuilt.",
        "// A trailing '// @ file:line' names the DSL line a statement came from.",
    ]
