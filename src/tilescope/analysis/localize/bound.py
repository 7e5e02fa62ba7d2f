"""The error bound of a program in its own dtypes: a float64 run that carries, for every value,
how far any correct computation in the program's dtypes may be from it (running error analysis).

Every float value is a pair ``(v, e)``: ``v`` computed in float64 from the given inputs (the
exact result, up to float64's own rounding), ``e >= 0`` a bound on ``|x - v|`` for any ``x`` a
correct implementation of the same program in its dtypes computes: the tile library's (sim),
the reference interpreter's (interp), in any reduction order. With ``u`` the unit roundoff of
the op's dtype (f32 2^-24, bf16 2^-8, f16 2^-11, f64 2^-53), ``r(x) = u|x| + eta/2`` the
rounding of a result ``x`` (``eta``: the dtype's smallest subnormal) and ``g(K) = K u / (1 - K u)``:

| op | bound of the result |
|---|---|
| ``a + b``, ``a - b`` | ``e_a + e_b + r(v)`` |
| ``a * b`` | ``abs(a) e_b + abs(b) e_a + e_a e_b + r(v)`` |
| ``a / b`` | ``(e_a + abs(v) e_b) / (abs(b) - e_b) + r(v)`` (``inf`` if ``abs(b) <= e_b``) |
| ``maximum``, ``minimum``, ``neg``, ``abs``, ``transpose``, a row/col max or min | the inputs' largest ``e`` |
| ``exp`` | ``t (exp(e_a) - 1) + k ulp(t)``, ``t = exp(a + e_a)`` |
| ``log``, ``sqrt``, ``rsqrt``, ``tanh``, ``sigmoid``, ``silu`` | the input's ``e`` times the function's largest slope nearby, plus ``k ulp`` of the result |
| a row/col sum of ``K`` elements | ``sum(e_i) + g(K) sum(abs(x_i))`` (any order of the adds) |
| ``matmul`` over ``K`` | ``abs(A) e_B + e_A abs(B) + e_A e_B + g(K) abs(A) abs(B)`` (f32 accumulation) |
| a cast to a narrower float | ``e + r(v)``, twice the rounding for ``trunc``/``floor``/``ceil`` |
| a cast to an integer | ``e + 1`` where ``e > 0`` (the rounding may flip) |
| a comparison | exact, but marked uncertain where ``abs(a - b) <= e_a + e_b``; ``where`` then takes both branches' spread |

``k`` is the transcendental's documented error in ulps, sim's and torch's alike (exp and log
1, tanh 1, sigmoid and silu 3): with the rule of each unary op, its ``ErrorModel`` in
``ir.op_registry``. A finite result beyond the dtype's largest value overflows:
it is recorded (``Overflow``) and its bound is ``inf``. Exact infinities (``-inf`` fills) stay
exact. With ``nearest=True`` every cast is bounded as round-to-nearest, whatever its mode: the
bound of what the dtypes themselves allow.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from tilescope.ir import dtypes as dt
from tilescope.ir.nodes import (
    Assign,
    BinOp,
    Cast,
    Const,
    CreateTensor,
    Expr,
    Full,
    Iota,
    Kernel,
    Load,
    LoadRows,
    MatMul,
    Probe,
    Program,
    Rand,
    Reduce,
    Scan,
    Store,
    TileSlice,
    Transpose,
    UnOp,
    Where,
)
from tilescope.ir.op_registry import OPS
from tilescope.ir.type_rules import access_sizes
from tilescope.ir.types import ScalarType, TileType
from tilescope.runtime import interp, unary_ops
from tilescope.runtime.casts import float_to_int
from tilescope.runtime.interp import _KernelInterp, _OrchInterp
from tilescope.runtime.tile_access import counted_sizes, padded_window, region

_INF = math.inf
UNIT_ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8, "f16": 2.0**-11, "f64": 2.0**-53}
_MANT = {"f32": 23, "bf16": 7, "f16": 10, "f64": 52}  # explicit mantissa bits
_EMIN = {"f32": -126, "bf16": -126, "f16": -14, "f64": -1022}  # exponent of the smallest normal
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
_LOGICAL = ("logical_and", "logical_or")


def ulp(dtype: str, mag: torch.Tensor) -> torch.Tensor:
    """The spacing of ``dtype``'s values at magnitude ``mag`` (float64; at 0, the smallest subnormal)."""
    mag = mag.abs().to(torch.float64)
    _, ex = torch.frexp(mag)
    ex = torch.clamp(ex.to(torch.int64) - 1, min=_EMIN[dtype])
    spacing = torch.ldexp(torch.ones_like(mag), (ex - _MANT[dtype]).to(torch.float64))
    return torch.where(torch.isfinite(mag), spacing, torch.zeros_like(mag))


def _tiny(dtype: str) -> float:
    return 2.0 ** (_EMIN[dtype] - _MANT[dtype])


def rounding(dtype: str, mag: torch.Tensor, directed: bool = False) -> torch.Tensor:
    """The most one rounding to ``dtype`` moves a value of magnitude ``mag`` (0 for infinities,
    which every rounding keeps); twice that for a directed rounding (trunc, floor, ceil)."""
    if dtype not in UNIT_ROUNDOFF:
        return torch.zeros_like(mag, dtype=torch.float64)
    mag = mag.abs().to(torch.float64)
    r = UNIT_ROUNDOFF[dtype] * mag + _tiny(dtype) / 2
    r = torch.where(torch.isfinite(mag), r, torch.zeros_like(r))
    return 2 * r if directed else r


def _f64_rounded(dtype: str, v: torch.Tensor) -> torch.Tensor:
    """The most the tile library's rounding of a float64 result to ``dtype`` moves it: once, or
    twice for bf16/f16 (to f32 first)."""
    return rounding(dtype, v) + (rounding("f32", v) if dtype in ("bf16", "f16") else 0)


def _clean(e: torch.Tensor) -> torch.Tensor:
    """A bound with NaN (inf - inf, 0 * inf) made infinite: unknown, never smaller."""
    return torch.where(torch.isnan(e), torch.full_like(e, _INF), e)


def _finite(x: torch.Tensor) -> torch.Tensor:
    """Where ``x`` (any dtype) is finite."""
    return torch.isfinite(x) if x.is_floating_point() else torch.ones_like(x, dtype=torch.bool)


def _mul0(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a * b`` of magnitudes with ``0 * inf = 0`` (an exact zero times an exact infinity)."""
    return torch.where((a == 0) | (b == 0), torch.zeros_like(a), a * b)


def _gamma(k: int, dtype: str) -> float:
    ku = k * UNIT_ROUNDOFF.get(dtype, 0.0)
    return ku / (1 - ku) if ku < 1 else _INF


@dataclass
class Bounded:
    """A value and its bound: ``v`` (float64 for float dtypes, else the dtype itself) and ``e``
    (float64, same shape; for a bool, 1.0 where the outcome may differ)."""

    v: torch.Tensor
    e: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        """The value's shape."""
        return self.v.shape

    def __getitem__(self, index: Any) -> Bounded:
        return Bounded(self.v[index], self.e[index])

    @staticmethod
    def exact(t: torch.Tensor) -> Bounded:
        """An input value: exact (bound 0), float values held in float64."""
        v = t.detach().to(torch.float64) if t.is_floating_point() else t.detach().clone()
        return Bounded(v, torch.zeros(t.shape, dtype=torch.float64))


@dataclass(frozen=True)
class Overflow:
    """A finite exact result beyond its dtype's largest value, where it first happened."""

    stmt: Any  # the IR statement
    op: str
    dtype: str
    value: float  # the exact result of largest magnitude there
    task: int | None = None


class _BoundKernel(_KernelInterp):
    """A kernel run on Bounded tiles (see the module docstring for the rules)."""

    def __init__(self, kernel: Kernel, nearest: bool = False):
        super().__init__(kernel, float64=True)
        self.nearest = nearest
        self.overflows: list[Overflow] = []
        self.task: int | None = None
        self.values: list[tuple[Any, Bounded]] = []  # every tile assigned, stored or probed, in order (when kept)
        self.keep_values = False

    def assigned(self, s: Assign, value: Any) -> None:
        if self.keep_values and isinstance(value, Bounded):
            self.values.append((s, value))

    def probed(self, s, value) -> None:
        if self.keep_values:
            self.values.append((s, self.tile(value, s.value.type)))

    def stmt(self, s, env) -> None:
        if isinstance(s, Probe):
            self.probed(s, self.expr(s.value, env))
            return
        if not isinstance(s, Store):
            raise TypeError(f"interp: unexpected statement {type(s).__name__} in a kernel")
        tile = self.tile(self.expr(s.value, env), s.value.type)
        view = env[s.tensor.name]
        offs = [self.expr(o, env) for o in s.offsets]
        sizes = access_sizes(view.v.dim(), tuple(tile.shape), s.dims)
        if s.valid:
            counts = self.valid_counts(s.valid, tuple(tile.shape), env, "store", s)
            sizes = counted_sizes(sizes, s.dims, tuple(tile.shape), counts)
            tile = tile[tuple(slice(0, n) for n in counts)]
        region_v, region_e = (region(x, offs, sizes, strides=s.strides) for x in (view.v, view.e))
        region_v.copy_(tile.v.reshape(region_v.shape).to(region_v.dtype))
        region_e.copy_(tile.e.reshape(region_e.shape))
        if self.keep_values:
            self.values.append((s, tile))

    # -- helpers ---------------------------------------------------------------------------

    def tile(self, x: Any, t) -> Bounded:
        """``x`` (a Bounded or a scalar adopting a tile's dtype) as a Bounded."""
        if isinstance(x, Bounded):
            return x
        d = t.dtype
        v = torch.tensor(x, dtype=torch.float64 if d.is_float else d.torch)
        e = torch.zeros((), dtype=torch.float64)
        if d.is_float and d.name != "f64" and math.isfinite(float(x)):
            e = (v - torch.tensor(float(x), dtype=d.torch).to(torch.float64)).abs()  # the literal's rounding
        return Bounded(v, e)

    def finish(
        self, op: str, dtype: dt.DType, v: torch.Tensor, e: torch.Tensor, finite_in: torch.Tensor | None = None
    ) -> Bounded:
        """The result of ``op`` in ``dtype``: NaN bounds made infinite; an overflow (a finite result
        beyond the dtype, or an infinite one where ``finite_in``, a mask of v's shape, says every
        operand was finite: float64 itself could not hold it) recorded, its bound infinite."""
        e = _clean(e)
        if dtype.is_float and dtype.name != "f64" and v.is_floating_point():
            top = dt.value_range(dtype)[1]
            finite = torch.isfinite(v)
            over = finite & (v.abs() - e > top)
            made = torch.isinf(v) & (finite_in if finite_in is not None else torch.zeros_like(v, dtype=torch.bool))
            if bool(over.any()) or bool(made.any()):
                big = float(v[over].abs().max()) if bool(over.any()) else _INF
                self.overflows.append(Overflow(self.now, op, dtype.name, big, self.task))
            e = torch.where((finite & (v.abs() + e > top)) | made, torch.full_like(e, _INF), e)
        return Bounded(v, e)

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        match e:
            case BinOp(op=op, lhs=a, rhs=b) if isinstance(e.type, TileType):
                ta = a.type if isinstance(a.type, TileType) else b.type
                tb = b.type if isinstance(b.type, TileType) else a.type
                return self.binary(op, self.tile(self.expr(a, env), ta), self.tile(self.expr(b, env), tb), e.type)
            case UnOp(op=op, operand=a) if isinstance(e.type, TileType):
                return self.unary(op, self.expr(a, env), e.type)
            case Load(tensor=t, offsets=offs, sizes=sizes, valid=valid, fill=fill, type=tt):
                view = env[t.name]
                at = [self.expr(o, env) for o in offs]
                if not valid and e.pad is None:
                    v, err = (region(x, at, sizes, strides=e.strides).reshape(tt.shape).clone() for x in (view.v, view.e))
                    return Bounded(v, err)
                out = self.tile(self.expr(fill if e.pad is None else e.pad, env), tt)
                out = Bounded(out.v.expand(tt.shape).clone(), out.e.expand(tt.shape).clone())
                if e.pad is not None:
                    inside, part = padded_window(view.v, e, at)
                    if part is not None:
                        out.v[inside] = part.reshape(out.v[inside].shape).to(out.v.dtype)
                        out.e[inside] = padded_window(view.e, e, at)[1].reshape(out.e[inside].shape)
                    return out
                counts = self.valid_counts(valid, tt.shape, env, "load", e)
                if all(counts):
                    box = counted_sizes(sizes, e.dims, tt.shape, counts)
                    inside = tuple(slice(0, n) for n in counts)
                    out.v[inside] = region(view.v, at, box, strides=e.strides).reshape(counts).to(out.v.dtype)
                    out.e[inside] = region(view.e, at, box, strides=e.strides).reshape(counts)
                return out
            case LoadRows(tensor=t, rows=rows, col=col, type=tt):
                view = env[t.name]
                index, at = self.expr(rows, env).v.reshape(-1), self.expr(col, env)
                fill = 0 if e.fill is None else self.expr(e.fill, env)
                v = self.load_rows(view.v, e, index, at, fill, env)
                return Bounded(v, self.load_rows(view.e, e, index, at, 0.0, env).to(torch.float64))
            case Iota() | Rand():
                return Bounded.exact(super().expr(e, env))
            case TileSlice(value=val, starts=starts, sizes=sizes, type=tt):
                x = self.expr(val, env)
                box = tuple(slice(a, a + n) for a, n in zip(starts, sizes))
                return Bounded(x.v[box].reshape(tt.shape).contiguous(), x.e[box].reshape(tt.shape).contiguous())
            case Full(value=fill, type=tt):
                x = self.tile(self.expr(fill, env), tt)
                return Bounded(x.v.expand(tt.shape).clone(), x.e.expand(tt.shape).clone())
            case Cast(value=val, mode=mode, type=tt):
                return self.cast(self.tile(self.expr(val, env), val.type), val.type.dtype, tt.dtype, mode)
            case Reduce(op=op, value=val):
                return self.reduce(op, self.expr(val, env), e.type)
            case MatMul(lhs=a, rhs=b, acc=c):
                return self.matmul(self.expr(a, env), self.expr(b, env), None if c is None else self.expr(c, env), e)
            case Transpose(value=val):
                x = self.expr(val, env)
                return Bounded(x.v.transpose(0, 1).contiguous(), x.e.transpose(0, 1).contiguous())
            case Scan(op=op, value=val, dim=d, reverse=rev, exclusive=exc, type=tt):
                return self.scan(op, self.tile(self.expr(val, env), tt), d, rev, exc, tt)
            case Where(cond=c, lhs=a, rhs=b, type=tt):
                return self.where(self.expr(c, env), self.tile(self.expr(a, env), tt), self.tile(self.expr(b, env), tt), tt)
            case Const(value=v, type=ScalarType(dtype=d)) if d in (dt.bf16, dt.f16):
                return float(v)  # exact here; its rounding is counted where it meets a tile
        return super().expr(e, env)

    def binary(self, op: str, a: Bounded, b: Bounded, t: TileType) -> Bounded:
        d = t.dtype.name
        if op in _COMPARE:
            v = interp._TILE_OPS[op](a.v, b.v)
            unsure = (a.v - b.v).abs() <= a.e + b.e if a.v.is_floating_point() else (a.e + b.e) > 0
            unsure = unsure & ((a.e + b.e) > 0)
            return Bounded(v, unsure.to(torch.float64))
        if op in _LOGICAL:
            return Bounded(interp._TILE_OPS[op](a.v, b.v), _clean(torch.maximum(a.e, b.e)).expand(torch.broadcast_shapes(a.shape, b.shape)).clone())
        if op in ("maximum", "minimum"):
            fn = torch.maximum if op == "maximum" else torch.minimum
            return Bounded(fn(a.v, b.v), _clean(torch.maximum(a.e, b.e)).expand(torch.broadcast_shapes(a.shape, b.shape)).clone())
        if op == "pow":
            return self.power(a, b, t)
        v = interp._TILE_OPS[op](a.v, b.v)
        if not v.is_floating_point():  # integer arithmetic: exact
            err = a.e + b.e if op in ("add", "sub") else _mul0(a.v.abs().double(), b.e) + _mul0(b.v.abs().double(), a.e)
            return Bounded(v, err.expand(v.shape).clone())
        if op in ("add", "sub"):
            err = a.e + b.e
        elif op == "mul":
            err = _mul0(a.v.abs(), b.e) + _mul0(b.v.abs(), a.e) + _mul0(a.e, b.e)
        else:  # div
            room = b.v.abs() - b.e
            err = (a.e + _mul0(v.abs(), b.e)) / room.clamp(min=0)
            err = torch.where((a.e == 0) & (b.e == 0), torch.zeros_like(err), err)
            err = torch.where(room <= 0, torch.full_like(err, _INF), err)
        return self.finish(op, t.dtype, v, err + rounding(d, v), _finite(a.v) & _finite(b.v))

    def unary(self, op: str, x: Bounded, t: TileType) -> Bounded:
        d = t.dtype.name
        model = OPS[op].error
        fn = unary_ops.unary_fn(op)
        if model.rule == "exact":
            return Bounded(fn(x.v), x.e.clone())
        v = fn(x.v)
        lo, hi = x.v - x.e, x.v + x.e
        if model.rule == "exp":  # b^x, scale = ln b
            top = fn(hi)
            err = _mul0(top, torch.expm1(x.e * model.scale))
        elif model.rule == "expm1":  # e^x - 1: the slope e^x
            top = torch.maximum(v.abs(), fn(hi).abs())
            err = _mul0(torch.exp(hi), torch.expm1(x.e))
        elif model.rule == "log":  # |f'(x)| <= 1 / (scale (x - pole))
            room = lo - model.pole
            err = torch.where(room > 0, x.e / (room.clamp(min=1e-300) * model.scale), torch.full_like(lo, _INF))
            top = torch.maximum(fn((hi - model.pole).clamp(min=1e-300) + model.pole).abs(), v.abs())
        elif model.rule == "sqrt":
            top = torch.sqrt(hi.clamp(min=0))
            err = x.e / (torch.sqrt(lo.clamp(min=0)) + torch.sqrt(x.v.clamp(min=0))).clamp(min=1e-300)
        elif model.rule == "rsqrt":
            lo_c = lo.clamp(min=1e-300)
            top = torch.rsqrt(lo_c)
            err = torch.where(lo > 0, 0.5 * x.e * lo_c.pow(-1.5), torch.full_like(lo, _INF))
        elif model.rule == "reciprocal":  # |1/x - 1/y| <= e / (|x| (|x| - e))
            room = x.v.abs() - x.e
            err = torch.where(room > 0, _mul0(v.abs(), x.e) / room.clamp(min=1e-300), torch.full_like(room, _INF))
            top = v.abs()
        else:  # slope: the largest |f'| on the whole line
            err = x.e * model.slope
            top = torch.maximum(v.abs(), fn(hi).abs())
            if model.of_x:
                top = torch.maximum(top, hi.abs())
        err = torch.where(x.e == 0, torch.zeros_like(err), err)
        # bf16/f16 compute in f32 and round the result once more
        err = err + model.ulps * ulp("f64" if d == "f64" else "f32", top)
        if d in ("bf16", "f16"):
            err = err + rounding(d, top)
        return self.finish(op, t.dtype, v, err, _finite(x.v))

    def reduce(self, op: str, x: Bounded, t: TileType) -> Bounded:
        dim = -1 if op.startswith("row") else 0
        kind = op.split("_")[1]
        if kind in ("max", "min"):
            fn = torch.amax if kind == "max" else torch.amin
            return Bounded(fn(x.v, dim=dim, keepdim=True), _clean(torch.amax(x.e, dim=dim, keepdim=True)))
        if kind in ("argmax", "argmin"):  # exact, unless another element may be the extreme within the errors
            v = getattr(torch, kind)(x.v, dim=dim, keepdim=True)
            best = torch.gather(x.v.double(), dim % 2, v)
            reach = torch.gather(x.e, dim % 2, v) + x.e
            rival = ((x.v.double() - best).abs() <= reach) & (torch.arange(x.v.shape[dim]).view(
                (1, -1) if dim == -1 else (-1, 1)) != v)  # fmt: skip
            err = torch.where(rival.any(dim=dim, keepdim=True), torch.full_like(best, _INF), torch.zeros_like(best))
            return Bounded(v.to(torch.int32), err)
        if kind == "logsumexp":  # its slopes are a softmax: the largest input error, plus its rounding
            v = torch.logsumexp(x.v.double(), dim=dim, keepdim=True)
            err = torch.amax(x.e, dim=dim, keepdim=True) + _f64_rounded(t.dtype.name, v) + ulp("f64", v)
            return self.finish(op, t.dtype, v, err, _finite(x.v).all(dim=dim, keepdim=True))
        n = x.v.shape[dim]
        v = x.v.sum(dim=dim, keepdim=True)
        mags = x.v.abs().double().sum(dim=dim, keepdim=True)
        err = x.e.sum(dim=dim, keepdim=True) + _mul0(torch.full_like(mags, _gamma(n, t.dtype.name)), mags)
        if kind == "mean":  # the sum divided by n, rounded once more
            v, err = v / n, err / n + rounding(t.dtype.name, v / n)
        return self.finish(op, t.dtype, v, err, _finite(x.v).all(dim=dim, keepdim=True))

    def scan(self, op: str, x: Bounded, dim: int, reverse: bool, exclusive: bool, t: TileType) -> Bounded:
        """A running sum or product: the inputs' errors carried along (a sum's add up; a product's
        are bounded by the product of the widened magnitudes), plus the one rounding of each output
        (the running value is in float64)."""
        run = functools.partial(unary_ops.scan, op=op, dim=dim, reverse=reverse, exclusive=exclusive)
        v = run(x.v)
        if op == "cumsum":
            err = run(x.e) + x.v.shape[dim] * ulp("f64", run(x.v.abs().double()))
        else:
            mags = x.v.abs().double()
            err = run(mags + x.e) - run(mags)
        if t.dtype.is_float:
            err = err + _f64_rounded(t.dtype.name, v)
        return self.finish(op, t.dtype, v, err, _finite(x.v))

    def power(self, a: Bounded, b: Bounded, t: TileType) -> Bounded:
        """``a ** b``: ``|v| (|b| e_a / (|a| - e_a) + |ln a| e_b)`` plus the library's ulps."""
        v = torch.pow(a.v, b.v)
        room = a.v.abs() - a.e
        spread = _mul0(b.v.abs(), a.e) / room.clamp(min=1e-300) + _mul0(torch.log(a.v.abs().clamp(min=1e-300)).abs(), b.e)
        err = torch.where((a.e > 0) & (room <= 0), torch.full_like(spread, _INF), _mul0(v.abs(), spread))
        err = err + OPS["pow"].error.ulps * ulp("f64" if t.dtype.name == "f64" else "f32", v)
        if t.dtype.name in ("bf16", "f16"):
            err = err + rounding(t.dtype.name, v)
        err = err.expand(v.shape).clone()
        return self.finish("pow", t.dtype, v, err, _finite(a.v) & _finite(b.v))

    def matmul(self, a: Bounded, b: Bounded, acc: Bounded | None, e: MatMul) -> Bounded:
        if e.transpose_a:
            a = Bounded(a.v.transpose(0, 1), a.e.transpose(0, 1))
        if e.transpose_b:
            b = Bounded(b.v.transpose(0, 1), b.e.transpose(0, 1))
        k = a.v.shape[-1]
        av, bv = a.v.to(torch.float64), b.v.to(torch.float64)
        if e.type.dtype == dt.i32:  # int8 products summed exactly in int32
            v = (a.v.to(torch.int64) @ b.v.to(torch.int64)).to(torch.int32)
            err = av.abs() @ b.e + a.e @ bv.abs() + a.e @ b.e
            return Bounded(v if acc is None else acc.v + v, err if acc is None else err + acc.e)
        v = av @ bv
        mags = av.abs() @ bv.abs()
        err = av.abs() @ b.e + a.e @ bv.abs() + a.e @ b.e + _gamma(k, "f32") * mags
        if acc is not None:
            v = acc.v + v
            err = err + acc.e + rounding("f32", v)
        if e.type.dtype.name in ("bf16", "f16"):
            err = err + rounding(e.type.dtype.name, v)
        finite_in = _finite(a.v).all(dim=-1, keepdim=True) & _finite(b.v).all(dim=0, keepdim=True)
        return self.finish("matmul", e.type.dtype, v, err, finite_in)

    def cast(self, x: Bounded, src: dt.DType, to: dt.DType, mode: str) -> Bounded:
        directed = mode in ("trunc", "floor", "ceil") and not self.nearest
        if to.is_float:
            v = x.v.to(torch.float64)
            narrower = src.is_float and (to.itemsize < src.itemsize or (to.itemsize == src.itemsize and to != src))
            if not src.is_float or narrower:
                return self.finish("cast", to, v, x.e + rounding(to.name, v.abs() + x.e, directed))
            return Bounded(v, x.e.clone())
        if to == dt.bool_:
            return Bounded(x.v != 0, ((x.v.abs() <= x.e) & (x.e > 0)).to(torch.float64))
        v = float_to_int(x.v, to, mode) if x.v.is_floating_point() else x.v.to(to.torch)
        return Bounded(v, torch.where(x.e > 0, x.e + 1, torch.zeros_like(x.e)))

    def where(self, c: Bounded, a: Bounded, b: Bounded, t: TileType) -> Bounded:
        shape = torch.broadcast_shapes(c.shape, a.shape, b.shape)
        v = torch.where(c.v, a.v, b.v)
        err = torch.where(c.v, a.e, b.e).expand(shape)
        av, bv = a.v.to(torch.float64), b.v.to(torch.float64)  # bool and int branches too
        gap = torch.where(av == bv, torch.zeros_like(av), (av - bv).abs())  # equal infinities: no gap
        spread = gap + torch.maximum(a.e, b.e)
        err = torch.where(c.e > 0, torch.maximum(err, spread.expand(shape)), err)
        return Bounded(v, _clean(err).clone())


def run_kernel_bound(kernel: Kernel, args: list[Any], *, nearest: bool = False, task: int | None = None,
                     keep_values: bool = False) -> _BoundKernel:
    """Run ``kernel`` on ``args`` (Bounded tensors, updated in place, and Python scalars); returns
    the interpreter, whose ``overflows`` and (with ``keep_values``) ``values`` it recorded."""
    k = _BoundKernel(kernel, nearest)
    k.task, k.keep_values = task, keep_values
    with torch.no_grad():
        k.run(args)
    return k


class _BoundOrch(_OrchInterp):
    """The whole program on Bounded tensors: every task's kernel through ``_BoundKernel``."""

    def __init__(self, program: Program, nearest: bool):
        super().__init__(program, float64=True)
        self.kernels = {k.name: _BoundKernel(k, nearest) for k in program.kernels}

    def create_tensor(self, e: CreateTensor) -> Bounded:
        t = super().create_tensor(e)
        return Bounded(t, torch.zeros(t.shape, dtype=torch.float64))

    def element(self, base: Bounded, index: tuple[int, ...]) -> int:
        return int(base.v[index].item())  # an integer tensor: exact

    def submit(self, e, env) -> int:
        self.kernels[e.kernel].task = self.tasks
        return super().submit(e, env)

    def overflows(self) -> list[Overflow]:
        found = [o for k in self.kernels.values() for o in k.overflows]
        return sorted(found, key=lambda o: -1 if o.task is None else o.task)


__all__ = ["Bounded", "Overflow", "UNIT_ROUNDOFF", "rounding", "run_kernel_bound", "ulp"]
