"""IR -> DSL Python source.

Invariant: the output is valid DSL source that the front-end parses back to the same IR, so
printing is stable under print -> parse -> print. Parentheses follow the tree, not Python's
associativity, so ``a - (b - c)`` survives the round trip.
"""

from __future__ import annotations

import math

from tilescope.ir.dtypes import DType
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Const,
    CreateTensor,
    DumpTag,
    Evaluate,
    Expr,
    For,
    Full,
    If,
    Iota,
    Kernel,
    Load,
    LoadRows,
    MatMul,
    Param,
    Probe,
    Program,
    Rand,
    Reduce,
    Scan,
    Slice,
    Stmt,
    Store,
    Submit,
    TensorRead,
    TileSlice,
    Transpose,
    UnOp,
    Var,
    Where,
)
from tilescope.ir.op_registry import OPS
from tilescope.ir.traverse import is_expr
from tilescope.ir.types import Direction, IndexType, ScalarType

_INFIX = {
    "add": ("+", 2),
    "sub": ("-", 2),
    "mul": ("*", 3),
    "div": ("/", 3),
    "floordiv": ("//", 3),
    "mod": ("%", 3),
    "eq": ("==", 1),
    "ne": ("!=", 1),
    "lt": ("<", 1),
    "le": ("<=", 1),
    "gt": (">", 1),
    "ge": (">=", 1),
}
_ATOM = 5


def dtype_str(d: DType) -> str:
    """The DSL spelling of a dtype (``ts.f32``, ``ts.bool_``)."""
    return "ts.bool_" if d.name == "bool" else f"ts.{d.name}"


def _const(c: Const) -> str:
    v = c.value
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return f"float('{v}')"
        return repr(v)
    return repr(v)


def _prec(e: Expr) -> int:
    if isinstance(e, BinOp) and e.op in _INFIX:
        return _INFIX[e.op][1]
    if isinstance(e, UnOp) and e.op == "neg":
        return 4
    if isinstance(e, Const) and isinstance(e.value, int | float) and e.value < 0:
        return 4
    return _ATOM


def _wrap(e: Expr, min_prec: int) -> str:
    s = expr_str(e)
    return f"({s})" if _prec(e) < min_prec else s


def _list(items) -> str:
    return "[" + ", ".join(items) + "]"


def dropped_dim(sizes: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The dim a tile slice of ``sizes`` indexed with an integer (dropping it) to give ``shape``,
    or None: the first size-1 dim whose removal leaves ``shape``."""
    if len(shape) == len(sizes):
        return None
    return next(d for d, n in enumerate(sizes) if n == 1 and sizes[:d] + sizes[d + 1 :] == shape)


def _valid_str(valid) -> str:
    """``, valid=(r, c)`` of a load or store (nothing without ``valid``)."""
    if not valid:
        return ""
    return f", valid=({', '.join(map(expr_str, valid))}{',' if len(valid) == 1 else ''})"


def expr_str(e: Expr) -> str:
    """An expression as DSL source, parenthesised only where the tree needs it."""
    match e:
        case Const():
            return _const(e)
        case Var(name=n):
            return n
        case BinOp(op=op, lhs=a, rhs=b) if op in _INFIX:
            sym, p = _INFIX[op]
            return f"{_wrap(a, p + (1 if p == 1 else 0))} {sym} {_wrap(b, p + 1)}"
        case BinOp(op=op, lhs=a, rhs=b):
            return f"ts.{op}({expr_str(a)}, {expr_str(b)})"
        case UnOp(op="neg", operand=a):
            return f"-{_wrap(a, 4)}"
        case UnOp(op=op, operand=a) if op in OPS and OPS[op].spelled:
            form = OPS[op].spelled
            return f'ts.{form.op}({expr_str(a)}, {form.keyword}="{form.value}")'
        case UnOp(op=op, operand=a):
            return f"ts.{op}({expr_str(a)})"
        case Load(tensor=t, offsets=offs, sizes=sizes, valid=valid, fill=fill, pad=pad, dims=dims, strides=strides):
            extra = _valid_str(valid) + ("" if fill is None or _is_positive_zero(fill) else f", fill={expr_str(fill)}")
            extra += ("" if pad is None else f", pad={expr_str(pad)}") + _axes_str(dims, strides)
            return f"ts.load({t.name}, {_list(map(expr_str, offs))}, {_list(map(str, sizes))}{extra})"
        case LoadRows(tensor=t, rows=rows, col=col, valid=valid, fill=fill, type=tt):
            cols = str(tt.shape[1]) if _is_const(col, 0) else f"({expr_str(col)}, {tt.shape[1]})"
            extra = "" if valid is None else f", valid={expr_str(valid)}"
            extra += "" if fill is None or _is_positive_zero(fill) else f", fill={expr_str(fill)}"
            return f"ts.load_rows({t.name}, {expr_str(rows)}, {cols}{extra})"
        case Rand(seed=seed, offset=offset, type=t):
            at = "" if _is_const(offset, 0) else f", {expr_str(offset)}"
            return f"ts.rand({_list(map(str, t.shape))}, {expr_str(seed)}{at})"
        case Iota(dim=d, type=t):
            dtype = "" if t.dtype.name == "i32" else f", {dtype_str(t.dtype)}"
            dim = "" if d == len(t.shape) - 1 else f", dim={d}"
            return f"ts.iota({_list(map(str, t.shape))}{dtype}{dim})"
        case TileSlice(value=v, starts=starts, sizes=sizes, type=t):
            drop = dropped_dim(sizes, t.shape)
            parts = [str(a) if dim == drop else f"{a}:{a + n}" for dim, (a, n) in enumerate(zip(starts, sizes))]
            return f"{_wrap(v, _ATOM)}[{', '.join(parts)}]"
        case Full(value=v, type=t):
            shape = _list(map(str, t.shape))
            if _is_positive_zero(v):
                return f"ts.zeros({shape}, {dtype_str(t.dtype)})"
            return f"ts.full({shape}, {expr_str(v)}, {dtype_str(t.dtype)})"
        case Cast(value=v, mode=mode, type=t):
            extra = "" if mode == "rint" else f", mode={mode!r}"
            return f"ts.cast({expr_str(v)}, {dtype_str(t.dtype)}{extra})"
        case Reduce(op=op, value=v):
            return f"ts.{op}({expr_str(v)})"
        case MatMul(lhs=a, rhs=b, acc=c, transpose_a=ta, transpose_b=tb):
            extra = "" if c is None else f", acc={expr_str(c)}"
            extra += ", transpose_a=True" if ta else ""
            extra += ", transpose_b=True" if tb else ""
            return f"ts.matmul({expr_str(a)}, {expr_str(b)}{extra})"
        case Transpose(value=v):
            return f"ts.transpose({expr_str(v)})"
        case Scan(op=op, value=v, dim=d, reverse=rev, exclusive=exc, type=t):
            extra = "" if d == len(t.shape) - 1 else f", dim={d}"
            extra += ", reverse=True" if rev else ""
            extra += ", exclusive=True" if exc else ""
            return f"ts.{op}({expr_str(v)}{extra})"
        case Where(cond=c, lhs=a, rhs=b):
            return f"ts.where({expr_str(c)}, {expr_str(a)}, {expr_str(b)})"
        case CreateTensor(type=t):
            return f"ts.create_tensor({_list(map(str, t.shape))}, {dtype_str(t.dtype)})"
        case Slice(tensor=t, ranges=ranges):
            parts = []
            for dim, r in enumerate(ranges):
                size = t.type.shape[dim]
                if r.squeeze:
                    parts.append(expr_str(r.start))
                elif _is_const(r.start, 0) and _is_const(r.stop, size):
                    parts.append(":")
                else:
                    parts.append(f"{expr_str(r.start)}:{expr_str(r.stop)}")
            return f"{t.name}[{', '.join(parts)}]"
        case TensorRead(tensor=t, indices=indices):
            return f"{t.name}[{', '.join(map(expr_str, indices))}]"
        case Submit(kernel=k, args=args, name=name, deps=deps, dumps=dumps):
            arg_s = [expr_str(a) for a in args]
            if name is None and not deps and not dumps:
                return f"{k}({', '.join(arg_s)})"
            opts = []
            if name is not None:
                opts.append(f"name={name!r}")
            if deps:
                opts.append(f"deps={_list(map(expr_str, deps))}")
            if dumps:
                opts.append(f"dumps={_list(map(expr_str, dumps))}")
            return f"ts.submit({', '.join([k, *arg_s, *opts])})"
        case DumpTag(tensor=t):
            return f"ts.dump_tag({expr_str(t)})"
    raise TypeError(f"cannot print {e!r}")


def value_str(v: object) -> str:
    """A value as an error message shows it, in DSL source: an IR expression as it is written
    (``n + 1``), a list or tuple item by item (``[n, 32]``), a dtype as ``ts.f32``, any other
    Python value by its repr."""
    if isinstance(v, list):
        return _list(value_str(x) for x in v)
    if isinstance(v, tuple):
        return "(" + ", ".join(value_str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, DType):
        return dtype_str(v)
    if is_expr(v):
        return expr_str(v)
    return repr(v)


def described(v: object) -> str:
    """``value_str(v)`` followed by what it is: ``n (scalar i32)``, ``t (tile[64, 64] f32)``,
    ``'abc' (str)``."""
    what = str(v.type) if is_expr(v) else type(v).__name__
    return f"{value_str(v)} ({what})"


def _is_positive_zero(e: Expr) -> bool:
    """A literal +0 (``-0.0`` is printed as itself: it keeps its sign through a division)."""
    return (
        isinstance(e, Const)
        and not isinstance(e.value, bool)
        and e.value == 0
        and math.copysign(1.0, e.value) > 0
    )


def _is_const(e: Expr, value: int) -> bool:
    return isinstance(e, Const) and isinstance(e.type, IndexType | ScalarType) and e.value == value


def _axes_str(dims: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """A load's or store's ``dims=`` and ``strides=`` keywords (none for the defaults)."""
    return ("" if not dims else f", dims={_list(map(str, dims))}") + (
        "" if not strides else f", strides={_list(map(str, strides))}"
    )


def stmt_lines(s: Stmt, indent: str) -> list[str]:
    """A statement's DSL source lines at ``indent``, nested bodies included."""
    match s:
        case Assign(target=t, value=v):
            return [f"{indent}{t} = {expr_str(v)}"]
        case Store(tensor=t, offsets=offs, value=v, valid=valid, dims=dims, strides=strides):
            extra = _valid_str(valid) + _axes_str(dims, strides)
            return [f"{indent}ts.store({t.name}, {_list(map(expr_str, offs))}, {expr_str(v)}{extra})"]
        case Probe(value=v, name=n):
            return [f"{indent}ts.probe({expr_str(v)}, {n!r})"]
        case Evaluate(value=v):
            return [f"{indent}{expr_str(v)}"]
        case For(var=v, start=a, stop=b, step=c, body=body):
            return [
                f"{indent}for {v} in ts.range({expr_str(a)}, {expr_str(b)}, {expr_str(c)}):",
                *block(body, indent),
            ]
        case If(cond=c, then=then, orelse=orelse):
            lines = [f"{indent}if {expr_str(c)}:", *block(then, indent)]
            if orelse:
                lines += [f"{indent}else:", *block(orelse, indent)]
            return lines
    raise TypeError(f"cannot print {s!r}")


def block(body: tuple[Stmt, ...], indent: str) -> list[str]:
    """A body's lines indented one level under ``indent``; ``pass`` for an empty body."""
    inner = indent + "    "
    lines = [line for s in body for line in stmt_lines(s, inner)]
    return lines or [f"{inner}pass"]


def param_str(p: Param) -> str:
    """A parameter as DSL source: ``name: ts.Out[[shape], ts.f32]``."""
    if p.direction is Direction.SCALAR:
        return f"{p.name}: ts.Scalar[{dtype_str(p.type.dtype)}]"
    what = "ts.Weight" if p.weight else p.direction.annotation
    return f"{p.name}: {what}[{_list(map(str, p.type.shape))}, {dtype_str(p.type.dtype)}]"


def function_lines(decorator: str, name: str, params: tuple[Param, ...], body: tuple[Stmt, ...]) -> list[str]:
    """A decorated function: the decorator, the ``def`` line and the body."""
    head = f"def {name}({', '.join(param_str(p) for p in params)}):"
    return [decorator, head, *block(body, "")]


def kernel_str(k: Kernel) -> str:
    """One kernel as DSL source."""
    return "\n".join(function_lines("@ts.kernel", k.name, k.params, k.body)) + "\n"


def program_str(p: Program, header: str | None = None) -> str:
    """The whole program as one DSL module: kernels first, then the orchestration."""
    lines = []
    if header:
        lines += [f"# {line}" for line in header.splitlines()]
    lines += ["import tilescope as ts", ""]
    for k in p.kernels:
        lines += ["", *function_lines("@ts.kernel", k.name, k.params, k.body), ""]
    lines += ["", *function_lines("@ts.jit", p.name, p.params, p.body)]
    return "\n".join(lines) + "\n"
