"""Pieces shared by the kernel and orchestration C++ emitters.

Invariants: generated C++ reads like hand-written code against the tile library and the
orchestration API; every statement line ends with a ``// @ <file>:<line>`` marker naming the
DSL line it came from (the toolchain maps compile errors back through it, and a hand edit
keeps its marker); names that collide with C++ keywords or library functions get a ``_``.
"""

from __future__ import annotations

import math
import os

from tilescope.errors import SourceLoc
from tilescope.ir.nodes import BinOp, Const, Expr, UnOp, Var
from tilescope.ir.types import IndexType, ScalarType, TileType, Type
from tilescope.language import dtypes as dt
from tilescope.language.dtypes import DType

CPP_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class
    compl const constexpr const_cast continue decltype default delete do double dynamic_cast else enum
    explicit export extern false float for friend goto if inline int long mutable namespace new noexcept
    not not_eq nullptr operator or or_eq private protected public register reinterpret_cast return short
    signed sizeof static static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    args api ctx nargs orch task ts std main load store zeros full exp log sqrt rsqrt abs neg tanh sigmoid
    silu maximum minimum where cast transpose matmul matmul_acc row_sum row_max row_min col_sum col_max
    eq ne lt le gt ge logical_and logical_or logical_not floordiv floormod scalar_arg Tile TensorView
    RoundMode""".split()
)

_CPP_BINOPS = {"add": ("+", 6), "sub": ("-", 6), "mul": ("*", 7), "div": ("/", 7)}
_CPP_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def cpp_name(name: str) -> str:
    return f"{name}_" if name in CPP_RESERVED else name


def marker(loc: SourceLoc | None) -> str:
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
    r, c = (1, t.shape[0]) if len(t.shape) == 1 else t.shape
    return f"Tile<{t.dtype.cpp}, {r}, {c}>"


def tile_dims(t: TileType) -> tuple[int, int]:
    return (1, t.shape[0]) if len(t.shape) == 1 else (t.shape[0], t.shape[1])


def value_type(t: Type) -> str:
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
    s = repr(v)
    if "e" not in s and "." not in s:
        s += ".0"
    return s + ("f" if single else "")


def context_dtype(e: Expr) -> DType | None:
    t = e.type
    return t.dtype if isinstance(t, TileType | ScalarType) else None


class ExprEmitter:
    """Index and scalar expressions (shared); kernels extend it with tile ops."""

    def emit(self, e: Expr, ctx: DType | None = None) -> str:
        return self._emit(e, ctx)[0]

    def _emit(self, e: Expr, ctx: DType | None) -> tuple[str, int]:
        """C++ text and its precedence (higher binds tighter)."""
        match e:
            case Const(value=v, type=t):
                dtype = t.dtype if isinstance(t, ScalarType) and t.dtype != dt.bool_ else ctx
                if isinstance(t, IndexType) and ctx is None:
                    dtype = None
                s = literal(v, dtype)
                return s, (15 if not s.startswith("-") else 14)
            case Var(name=n):
                return cpp_name(n), 16
            case BinOp(op=op, lhs=a, rhs=b) if op in _CPP_BINOPS:
                sym, p = _CPP_BINOPS[op]
                sub_ctx = self.operand_ctx(e)
                la, pa = self._emit(a, sub_ctx)
                lb, pb = self._emit(b, sub_ctx)
                la = la if pa >= p else f"({la})"
                lb = lb if pb > p else f"({lb})"
                return f"{la} {sym} {lb}", p
            case BinOp(op="floordiv" | "mod" as op, lhs=a, rhs=b):
                fn = "floordiv" if op == "floordiv" else "floormod"
                return f"ts::{fn}({self.emit(a)}, {self.emit(b)})", 16
            case BinOp(op=op, lhs=a, rhs=b) if op in _CPP_CMP and not isinstance(e.type, TileType):
                return f"{self._wrap(a, 10)} {_CPP_CMP[op]} {self._wrap(b, 10)}", 9
            case BinOp(op="maximum" | "minimum" as op, lhs=a, rhs=b) if not isinstance(e.type, TileType):
                fn = "std::max" if op == "maximum" else "std::min"
                return f"{fn}<{value_type(e.type)}>({self.emit(a)}, {self.emit(b)})", 16
            case UnOp(op="neg", operand=a) if not isinstance(e.type, TileType):
                return f"-{self._wrap(a, 14)}", 14
        return self.emit_other(e, ctx), 16

    def _wrap(self, e: Expr, p: int) -> str:
        s, q = self._emit(e, context_dtype(e))
        return s if q >= p else f"({s})"

    def operand_ctx(self, e: BinOp) -> DType | None:
        for x in (e.lhs, e.rhs):
            if isinstance(x.type, TileType | ScalarType) and not isinstance(x, Const):
                return x.type.dtype
        return context_dtype(e)

    def emit_other(self, e: Expr, ctx: DType | None) -> str:
        raise TypeError(f"cannot emit {type(e).__name__} here")


def header_comment(what: str, loc: SourceLoc | None, version: str) -> list[str]:
    src = f" from {display_path(loc.file)}:{loc.line}" if loc else ""
    return [
        f"// {what} — generated by tilescope {version}{src}.",
        "// Edit freely and re-run with --runtime-dir: only edited files are rebuilt.",
        "// A trailing '// @ file:line' names the DSL line a statement came from.",
    ]
