"""Typing rules of the DSL, shared by the front-end (which types nodes as it builds them) and
the verifier (which re-derives every type and compares).

Rules: numpy broadcasting between tiles; no implicit promotion between dtypes (an explicit
``ts.cast`` is required); scalars and literals adopt the tile's dtype, and a literal must fit
it (a finite float beyond a float dtype's range is refused, an explicit inf is not); integer
scalars act as indices; true division is for floats (``//`` for indices).
"""

from __future__ import annotations

import math

from tilescope.errors import SourceLoc, VerifyError
from tilescope.ir import dtypes as dt
from tilescope.ir import op_registry as registry
from tilescope.ir.nodes import Const, Expr
from tilescope.ir.types import (
    INDEX,
    MAX_TILE_DIMS,
    IndexType,
    ScalarType,
    TensorType,
    TileType,
    Type,
)

_BINARY_OPS = registry.binary_ops()
_COMPARE_OPS = registry.compare_ops()
_LOGICAL_OPS = registry.logical_ops()
_REDUCE_OPS = registry.reduce_ops()
_UNARY_OPS = registry.unary_ops()

_SYMBOL = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "eq": "==",
    "ne": "!=",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
}


def op_label(op: str) -> str:
    """How messages name an op: its operator in quotes (``'+'``), else ``ts.<op>``."""
    return f"'{_SYMBOL[op]}'" if op in _SYMBOL else f"ts.{op}"


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy broadcasting of two shapes, or None if they do not broadcast."""
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + a
    pb = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _is_int_scalar(t: Type) -> bool:
    return isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int)


def _fail(msg: str, loc: SourceLoc | None, hint: str | None = None) -> VerifyError:
    return VerifyError(msg, loc, hint)


def int_range(dtype: dt.DType) -> tuple[int, int]:
    """Inclusive range of an integer dtype."""
    lo, hi = dt.value_range(dtype)
    return int(lo), int(hi)


def check_literal(value: object, dtype: dt.DType, what: str, loc: SourceLoc | None) -> None:
    """Reject a number literal that the ``dtype`` it adopts cannot hold: outside an integer dtype's
    range (0 and 1 for bool), or a finite number beyond a float dtype's largest value (it would
    silently become inf).

    ``float("inf")`` and NaN stay allowed for float dtypes (masks use ``-inf``); bools and
    non-integral floats for integer dtypes are the callers' to judge.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        return
    lo, hi = dt.value_range(dtype)
    if lo <= value <= hi:
        return
    kind = "integer" if isinstance(value, int) else "float"
    hint = f"use a value in {dt.range_str(dtype)}"
    if dtype.is_float:
        hint += " (write float('inf') if you mean infinity)"
    if (w := dt.wider(dtype)) is not None:
        hint += f", or cast to a wider dtype first (ts.cast(t, ts.{w.name}))"
    raise _fail(
        f"{what}: {kind} literal {dt.number_str(value)} is out of range for {dtype.name} {dt.range_str(dtype)}",
        loc,
        hint,
    )


def _scalar_fits_tile(e: Expr, tile: TileType, op: str, loc: SourceLoc | None) -> None:
    """A scalar operand adopts the tile's dtype; reject float scalars with integer tiles."""
    t = e.type
    if isinstance(e, Const):
        if isinstance(e.value, float) and not tile.dtype.is_float:
            raise _fail(
                f"{op_label(op)}: float literal {e.value!r} with a {tile} operand",
                loc,
                "cast the tile to a float dtype first (ts.cast(t, ts.f32))",
            )
        check_literal(e.value, tile.dtype, f"{op_label(op)} with a {tile} operand", loc)
        return
    if isinstance(t, ScalarType) and t.dtype.is_float and not tile.dtype.is_float:
        raise _fail(
            f"{op_label(op)}: float scalar ({t}) with a {tile} operand",
            loc,
            "cast the tile to a float dtype first (ts.cast(t, ts.f32))",
        )
    if not isinstance(t, ScalarType | IndexType):
        raise _fail(f"{op_label(op)}: operand of type {t} cannot combine with a {tile}", loc)


def binop_type(op: str, lhs: Expr, rhs: Expr, loc: SourceLoc | None) -> Type:
    """The type of ``lhs <op> rhs``; VerifyError when the rules forbid it.

    Tiles broadcast and must share a dtype; a scalar operand adopts the tile's dtype. Integer
    scalars and indices give an index (comparisons a bool scalar); ``/`` needs floats.
    """
    lt, rt = lhs.type, rhs.type
    if op not in _BINARY_OPS + _COMPARE_OPS + _LOGICAL_OPS:
        raise _fail(f"unknown binary op {op!r}", loc)
    for t in (lt, rt):
        if isinstance(t, TensorType):
            raise _fail(
                f"{op_label(op)}: tensors cannot be used in arithmetic ({t})",
                loc,
                "load a tile first: ts.load(tensor, offsets, sizes)",
            )
    if isinstance(lt, TileType) or isinstance(rt, TileType):
        return _tile_binop_type(op, lhs, rhs, loc)
    # scalar / index arithmetic
    if op == "pow":
        raise _fail(
            f"ts.pow needs a tile operand, got {lt} and {rt}",
            loc,
            "compute a compile-time power in Python (x ** y); ts.pow raises tile elements",
        )
    if op in _LOGICAL_OPS:
        raise _fail(f"{op_label(op)} needs bool tiles, got {lt} and {rt}", loc)
    if _is_int_scalar(lt) and _is_int_scalar(rt):
        if op == "div":
            raise _fail("'/' on integers (indices)", loc, "use '//' for integer division")
        if op in ("floordiv", "mod") and isinstance(rhs, Const) and rhs.value == 0:
            raise _fail(
                f"{op_label(op)} by the constant 0: an integer division by zero (the generated code would crash)",
                loc,
                "divide by a non-zero value",
            )
        if op in _COMPARE_OPS:
            return ScalarType(dt.bool_)
        if isinstance(lt, ScalarType) and isinstance(rt, ScalarType) and lt == rt:
            return lt
        return INDEX
    if isinstance(lt, ScalarType) and isinstance(rt, ScalarType) and lt.dtype != rt.dtype:
        if not (isinstance(lhs, Const) or isinstance(rhs, Const)):
            raise _fail(
                f"{op_label(op)}: dtype mismatch {lt.dtype.name} vs {rt.dtype.name}",
                loc,
                "insert an explicit ts.cast",
            )
    scalar = next(
        (t for e, t in ((lhs, lt), (rhs, rt)) if isinstance(t, ScalarType) and not isinstance(e, Const)),
        lt if isinstance(lt, ScalarType) else rt,
    )
    if isinstance(scalar, IndexType):
        scalar = ScalarType(dt.f32)
    for e in (lhs, rhs):
        if isinstance(e, Const):
            check_literal(e.value, scalar.dtype, f"{op_label(op)} with a {scalar} operand", loc)
    if op in ("floordiv", "mod") and scalar.dtype.is_float:
        raise _fail(f"{op_label(op)} on float scalars", loc, "use '/' for float division")
    if op in _COMPARE_OPS:
        return ScalarType(dt.bool_)
    return scalar


def _tile_binop_type(op: str, lhs: Expr, rhs: Expr, loc: SourceLoc | None) -> TileType:
    lt, rt = lhs.type, rhs.type
    if isinstance(lt, TileType) and isinstance(rt, TileType):
        if lt.dtype != rt.dtype:
            raise _fail(
                f"{op_label(op)}: dtype mismatch {lt} vs {rt}",
                loc,
                f"no implicit promotion; insert an explicit cast, e.g. ts.cast(x, ts.{lt.dtype.name})",
            )
        shape = broadcast_shapes(lt.shape, rt.shape)
        if shape is None:
            raise _fail(
                f"{op_label(op)}: shape mismatch {list(lt.shape)} vs {list(rt.shape)} (not broadcastable)",
                loc,
                "dims must be equal or 1 (numpy broadcasting)",
            )
        tile = TileType(shape, lt.dtype)
    else:
        tile = lt if isinstance(lt, TileType) else rt
        other = rhs if isinstance(lt, TileType) else lhs
        _scalar_fits_tile(other, tile, op, loc)
    d = tile.dtype
    if op in _LOGICAL_OPS:
        if d != dt.bool_:
            raise _fail(f"{op_label(op)} needs bool tiles, got {tile}", loc)
        return tile
    if op in _COMPARE_OPS:
        return TileType(tile.shape, dt.bool_)
    if d == dt.bool_:
        raise _fail(f"{op_label(op)} on a bool tile", loc, "use ts.logical_and/or or cast to a number type")
    if op in ("div", "pow") and not d.is_float:
        raise _fail(
            f"{op_label(op)} on an integer tile ({tile})", loc, "cast to a float dtype first (ts.cast(t, ts.f32))"
        )
    if op in ("floordiv", "mod"):
        raise _fail(
            f"{op_label(op)} is not supported on tiles ({tile}): tiles take + - * / and @; // and % are for scalars "
            "and indices (loop bounds, offsets)",
            loc,
            "for a tile, divide in a float dtype and round down: q = ts.cast(a / b, ts.i32, mode=\"floor\"), "
            "and write a % b as a - q * b",
        )
    return tile


def unop_type(op: str, operand: Expr, loc: SourceLoc | None) -> Type:
    """The type of ``ts.<op>(operand)``: the operand's. VerifyError for a non-tile operand (only
    ``-x`` takes a scalar or index) or a dtype the op does not take (its registry ``dtypes``).
    """
    d = registry.OPS.get(op)
    if d is None or op not in _UNARY_OPS:
        raise _fail(f"unknown unary op {op!r}", loc)
    t = operand.type
    if isinstance(t, IndexType | ScalarType) and op == "neg":
        return t
    name = f"ts.{d.dsl_name}"
    if not isinstance(t, TileType):
        raise _fail(f"{name} needs a tile operand, got {t}", loc)
    if d.dtypes == registry.BOOL:
        if t.dtype != dt.bool_:
            raise _fail(f"{name} needs a bool tile, got {t}", loc)
        return t
    if t.dtype == dt.bool_ and d.dtypes == registry.NUMBER:
        raise _fail(f"{name} on a bool tile", loc)
    if d.dtypes == registry.FLOAT and not t.dtype.is_float:
        raise _fail(f"{name} needs a float tile, got {t}", loc, "cast first: ts.cast(t, ts.f32)")
    return t


def reduce_type(op: str, operand: Expr, loc: SourceLoc | None) -> TileType:
    """``[R, 1]`` for a row reduction, ``[1, C]`` for a column one (i32 for an arg-reduction);
    VerifyError unless a 2-D number tile (a float one for a mean or logsumexp)."""
    t = operand.type
    if op not in _REDUCE_OPS:
        raise _fail(f"unknown reduction {op!r}", loc)
    if not isinstance(t, TileType) or len(t.shape) != 2:
        raise _fail(f"ts.{op} needs a 2-D tile, got {t}", loc)
    if t.dtype == dt.bool_:
        raise _fail(f"ts.{op} on a bool tile", loc, "cast to a number type first")
    if op.endswith(("_mean", "_logsumexp")) and not t.dtype.is_float:
        raise _fail(f"ts.{op} needs a float tile, got {t}", loc, "cast first: ts.cast(t, ts.f32)")
    r, c = t.shape
    index = op.endswith(("_argmax", "_argmin"))  # an i32 index along the reduced dim
    return TileType((r, 1) if op.startswith("row") else (1, c), dt.i32 if index else t.dtype)


def matmul_type(
    lhs: Expr,
    rhs: Expr,
    acc: Expr | None,
    loc: SourceLoc | None,
    transpose_a: bool = False,
    transpose_b: bool = False,
) -> TileType:
    """The ``[M, N]`` tile of ``[M, K] @ [K, N]`` (each operand transposed first when asked):
    f32 for f32/bf16/f16 inputs, i32 for int8 inputs; ``acc`` must have that type."""
    a, b = lhs.type, rhs.type
    if not (isinstance(a, TileType) and isinstance(b, TileType)) or len(a.shape) != 2 or len(b.shape) != 2:
        raise _fail(f"ts.matmul needs two 2-D tiles, got {a} and {b}", loc)
    if a.dtype != b.dtype:
        raise _fail(f"ts.matmul: dtype mismatch {a} vs {b}", loc, "cast one operand explicitly")
    if a.dtype not in MATMUL_DTYPES:
        raise _fail(
            f"ts.matmul supports {', '.join(d.name for d in MATMUL_DTYPES)} inputs, got {a.dtype.name}",
            loc,
            "cast both operands first: ts.cast(t, ts.f32)",
        )
    (m, k), (kb, n) = (a.shape[::-1] if transpose_a else a.shape), (b.shape[::-1] if transpose_b else b.shape)
    if k != kb:
        flags = "".join(f", {f}=True" for f, on in (("transpose_a", transpose_a), ("transpose_b", transpose_b)) if on)
        raise _fail(
            f"ts.matmul{f'({flags[2:]})' if flags else ''}: inner dims differ: [{m}, {k}] @ [{kb}, {n}]",
            loc,
            "lhs is [M, K] and rhs is [K, N] (after transpose_a / transpose_b)",
        )
    out = TileType((m, n), dt.i32 if a.dtype == dt.i8 else dt.f32)
    if acc is not None and acc.type != out:
        raise _fail(f"ts.matmul: acc must be a {out}, got {acc.type}", loc)
    return out


MATMUL_DTYPES = (dt.f32, dt.bf16, dt.f16, dt.i8)


def cast_type(value: Expr, dtype: dt.DType, mode: str, loc: SourceLoc | None) -> TileType:
    """``value``'s tile shape with ``dtype``; VerifyError for a scalar or an unknown ``mode``."""
    from tilescope.ir.nodes import CAST_MODES

    if mode not in CAST_MODES:
        raise _fail(f"ts.cast: unknown mode {mode!r}; expected one of {', '.join(CAST_MODES)}", loc)
    t = value.type
    if not isinstance(t, TileType):
        raise _fail(f"ts.cast needs a tile, got {t}", loc, "scalars adopt the tile's dtype; no cast is needed")
    if mode != "rint" and (not t.dtype.is_float or dtype == dt.bool_):
        raise _fail(
            f"ts.cast: mode={mode!r} rounds a float to an integer or to a narrower float; a {t.dtype} tile cast to "
            f"{dtype} has no such rounding (it converts as torch does)",
            loc,
            "drop mode=",
        )
    return TileType(t.shape, dtype)


def where_type(cond: Expr, lhs: Expr, rhs: Expr, loc: SourceLoc | None) -> TileType:
    """The broadcast tile of ``ts.where``: a bool ``cond`` and at least one tile value, dtypes equal."""
    ct = cond.type
    if not (isinstance(ct, TileType) and ct.dtype == dt.bool_):
        raise _fail(f"ts.where: condition must be a bool tile, got {ct}", loc, "compare tiles: a > b")
    tiles = [e.type for e in (lhs, rhs) if isinstance(e.type, TileType)]
    if len(tiles) == 2 and tiles[0].dtype != tiles[1].dtype:
        raise _fail(f"ts.where: dtype mismatch {tiles[0]} vs {tiles[1]}", loc, "insert an explicit cast")
    if not tiles:
        raise _fail("ts.where: at least one of the two values must be a tile", loc)
    shape = ct.shape
    for t in tiles:
        s = broadcast_shapes(shape, t.shape)
        if s is None:
            raise _fail(f"ts.where: shapes {list(ct.shape)} and {list(t.shape)} do not broadcast", loc)
        shape = s
    tile = TileType(shape, tiles[0].dtype)
    for e in (lhs, rhs):
        if not isinstance(e.type, TileType):
            _scalar_fits_tile(e, tile, "where", loc)
    return tile


def load_tile(
    tensor: TensorType, sizes: tuple[int, ...], dims: tuple[int | None, ...] | None, what: str, loc: SourceLoc | None
) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """The tile shape of a load of ``sizes`` (one per tensor dim) and the tensor dim of each tile
    dim (``()``: the default, the last ones). The tile's dims are ``dims`` when given, else the
    last two dims when every size above 1 lies there, else the two dims whose sizes are above 1;
    every other size must be 1. A 0-dim tensor (no sizes) loads as a [1, 1] tile."""
    nd = len(tensor.shape)
    if len(sizes) != nd:
        raise _fail(f"{what}: {len(sizes)} sizes for a {nd}-D tensor {tensor}", loc, "give one size per tensor dim")
    if any(s <= 0 for s in sizes):
        raise _fail(f"{what}: sizes must be positive, got {list(sizes)}", loc)
    if nd == 0:
        if dims:
            raise _fail(f"{what}: dims= {list(dims)} for the 0-dim tensor {tensor}", loc, "leave dims= out")
        return (1, 1), ()
    if dims is None:
        big = [d for d, n in enumerate(sizes) if n != 1]
        if all(d >= nd - MAX_TILE_DIMS for d in big):
            return tuple(sizes[-MAX_TILE_DIMS:]), ()
        if len(big) > MAX_TILE_DIMS:
            raise _fail(
                f"{what}: sizes {list(sizes)} are above 1 in {len(big)} dims {big}; a tile has at most "
                f"{MAX_TILE_DIMS} dims",
                loc,
                "load a tile over two dims at a time (size 1 in every other dim)",
            )
        if len(big) == MAX_TILE_DIMS:
            return tuple(sizes[d] for d in big), tuple(big)
        d = big[0]
        raise _fail(
            f"{what}: sizes {list(sizes)} are above 1 in dim {d} only, which is not one of the last two: "
            "which tile is meant is ambiguous",
            loc,
            f"say which dims the tile covers: dims=[{d}] for a [{sizes[d]}] tile, dims=[{d}, {nd - 1}] for a "
            f"[{sizes[d]}, {sizes[nd - 1]}] one",
        )
    others = [d for d in range(nd) if d not in dims and sizes[d] != 1]
    if others:
        raise _fail(
            f"{what}: sizes {list(sizes)} with dims={list(dims)}: dim {others[0]} is not a tile dim, so its size "
            "must be 1",
            loc,
            f"add dim {others[0]} to dims=, or give it size 1",
        )
    tile = tuple(1 if d is None else sizes[d] for d in dims)
    return tile, canonical_dims(nd, dims)


def tile_dims_given(
    v: object, ndim: int, rank: int | None, what: str, loc: SourceLoc | None
) -> tuple[int | None, ...]:
    """``dims=``: the tensor dim of each tile dim (``rank`` of them when the tile's rank is known),
    negative ones counted from the end, in increasing order; ``None`` is a tile dim of size 1 with
    no tensor dim (numpy's ``newaxis``: ``dims=[0, None]`` reads a 1-D tensor as a column)."""
    items = list(v) if isinstance(v, list | tuple) else [v]
    if not items or not all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in items):
        raise _fail(f"{what}: dims= takes one or two compile-time tensor dims (or None), got {v!r}", loc)
    out: list[int | None] = []
    for d in items:
        if d is not None and not -ndim <= d < ndim:
            raise _fail(f"{what}: dims= {items}: dim {d} is outside the tensor's {ndim} dims", loc)
        out.append(None if d is None else d % ndim)
    if len(out) > MAX_TILE_DIMS or (rank is not None and len(out) != rank):
        need = f"{rank}, one per tile dim" if rank is not None else f"1 or {MAX_TILE_DIMS}"
        raise _fail(f"{what}: dims= {items} names {len(out)} dims; it takes {need}", loc)
    if None in out and (len(out) != MAX_TILE_DIMS or out == [None, None]):
        raise _fail(
            f"{what}: dims= {items}: None adds a size-1 tile dim beside a tensor dim",
            loc,
            "dims=[d, None] is a column tile along dim d, dims=[None, d] a row",
        )
    if len(out) == 2 and None not in out and not out[0] < out[1]:
        raise _fail(
            f"{what}: dims= {items}: the row dim must come before the column dim",
            loc,
            "transpose the tile (ts.transpose) for the other order",
        )
    return tuple(out)


def canonical_dims(ndim: int, dims: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """``dims`` as the IR keeps it: ``()`` when they are the default (the last ones)."""
    return () if None not in dims and dims == tuple(range(ndim - len(dims), ndim)) and len(dims) == min(ndim, MAX_TILE_DIMS) else dims


def access_dims(ndim: int, tile_rank: int, dims: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """The tensor dim of each tile dim of an access (``dims``, or by default the last ones); None
    for a size-1 tile dim with no tensor dim."""
    if dims:
        return dims
    return tuple(range(max(0, ndim - tile_rank), ndim))


def access_sizes(ndim: int, tile: tuple[int, ...], dims: tuple[int | None, ...]) -> tuple[int, ...]:
    """The count of an access of a ``tile`` along ``dims`` in each tensor dim (1 off the tile)."""
    out = [1] * ndim
    for d, n in zip(access_dims(ndim, len(tile), dims), tile if ndim else ()):
        if d is not None:
            out[d] = n
    return tuple(out)


def access_strides(
    v: object, ndim: int, dims: tuple[int | None, ...], tile_rank: int, what: str, loc: SourceLoc | None
) -> tuple[int, ...]:
    """``strides=``: one positive compile-time step per tensor dim, 1 in every dim the tile does
    not cover; ``()`` (the IR's default) when every step is 1."""
    if v is None:
        return ()
    items = list(v) if isinstance(v, list | tuple) else [v]
    if len(items) != ndim or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in items):
        raise _fail(
            f"{what}: strides= takes one positive compile-time step per tensor dim ({ndim}), got {v!r}",
            loc,
            "element [i, j] of the tile is the tensor's [offset + i * step, ...]: give 1 for unit steps",
        )
    tile_dims = access_dims(ndim, tile_rank, dims)
    off = [d for d in range(ndim) if d not in tile_dims and items[d] != 1]
    if off:
        raise _fail(
            f"{what}: strides= {items}: dim {off[0]} is not one of the tile's dims {list(tile_dims)}, so its step "
            "must be 1",
            loc,
        )
    return () if all(s == 1 for s in items) else tuple(items)


def access_extents(sizes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The span of tensor elements an access of ``sizes`` with ``strides`` covers in each dim
    (``(n - 1) * step + 1``; 0 for a count of 0)."""
    steps = strides or (1,) * len(sizes)
    return tuple(0 if n == 0 else (n - 1) * s + 1 for n, s in zip(sizes, steps))
