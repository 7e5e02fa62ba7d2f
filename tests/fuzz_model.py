"""The model behind the fuzz net's random programs (tests/fuzz_programs.py generates them).

A program is built from the nodes below: kernel expressions and statements, orchestration
statements, and ``FuzzProgram``, which renders the DSL source and evaluates the program the way
the interp platform does — one task at a time in submission order, each op in torch in the
program's dtypes — carrying next to every value a sound elementwise bound on how far the sim
platform's value can be from it:

- 0 where every op on the way is exactly rounded in both (+ - * /, neg, abs, maximum/minimum,
  sqrt, casts, comparisons and where, transpose, loads and stores): the two must then agree
  bit for bit;
- else the documented error of each op on each side (exp/log/tanh/sigmoid/silu: SIM_ULPS +
  TORCH_ULPS; sums and matmuls: Higham's gamma_n for two different f32 summation orders), plus
  the input error propagated through the op (Lipschitz bounds; a comparison that may flip
  makes ``where`` pick the other branch), plus one rounding of the result.

docs/testing.md describes the model. The nodes also carry an interval of the values they can
take, which the generator uses to keep every value finite and every op inside its domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from tilescope.ir import op_registry as reg
from tilescope.runtime.philox import philox_uniform
from tilescope.runtime.unary_ops import logsumexp, scan, unary_fn

F32, F16, BF16, I32 = "f32", "f16", "bf16", "i32"
FLOATS = (F32, F16, BF16)
TORCH = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16, I32: torch.int32}
MANT = {F32: 23, F16: 10, BF16: 7}  # explicit mantissa bits
EMIN = {F32: -126, F16: -14, BF16: -126}  # exponent of the smallest normal
CAP = 4096.0  # |value| bound the generator keeps every float value under (f16's max is 65504)
INT_CAP = 1 << 20  # |value| bound for i32 values (no wrap-around)
IN_MAG = 2.0  # float inputs are uniform in [-IN_MAG, IN_MAG]
INT_IN = 20  # i32 inputs are uniform integers in [-INT_IN, INT_IN]
SCALAR_MAG = 2.0

# Documented max errors in ulps of the exact result. sim: tile_math.hpp (max over all 2^32
# floats against libm in double). torch (interp, CPU): not documented; measured on ~10^7
# floats each (tests/system/test_fuzz.py::test_torch_transcendental_error_assumptions re-checks them
# on every run) as exp 0.56, log 0.88, tanh 0.51, sigmoid 2.4, silu 2.4 ulp; we assume a margin.
# exp2/log2/erf/gelu/gelu_tanh/pow: sim 0.5001, 0.5000, 0.5000, 0.5001, 0.5001, 0.5001 ulp
# (tile_math.hpp); torch measured as exp2 0.80, log2 0.58, erf 0.74, gelu_tanh 1.7, pow 0.59 ulp,
# gelu 4.6 ulp of max(|gelu(x)|, |x|) (its 1 + erf cancels for x < 0: the gelu rules use that
# magnitude, never |gelu(x)| alone). softplus/log1p: sim 0.5000 each; torch (f32, bf16/f16
# through f32 as interp) measured as softplus 1.5 and log1p 0.63 ulp. The activations
# (expm1 ... logsigmoid): sim in double, rounded once; interp the same formulas in float64
# (runtime/unary_ops.py), rounded once.
ACTIVATIONS = ("expm1", "elu", "selu", "hardsigmoid", "hardswish", "mish", "softsign", "logsigmoid")
SIM_ULPS = {
    "exp": 1.0, "log": 1.0, "tanh": 0.51, "sigmoid": 0.51, "silu": 0.51,
    "exp2": 0.51, "log2": 0.51, "erf": 0.51, "gelu": 0.51, "gelu_tanh": 0.51, "pow": 0.51,
    "softplus": 0.51, "log1p": 0.51, **dict.fromkeys(ACTIVATIONS, 0.51),
}  # fmt: skip
TORCH_ULPS = {
    "exp": 1.0, "log": 1.0, "tanh": 1.0, "sigmoid": 3.0, "silu": 3.0,
    "exp2": 1.0, "log2": 1.0, "erf": 1.0, "gelu": 6.0, "gelu_tanh": 3.0, "pow": 1.0,
    "softplus": 2.0, "log1p": 1.0, **dict.fromkeys(ACTIVATIONS, 0.51),
}  # fmt: skip
# Lipschitz constants on the whole line (log: 1 / lower end of the interval, exp: e^upper end;
# log2, log1p, exp2 and expm1 likewise; gelu/gelu_tanh: max |f'| = 1.1290 at x = +-1.41;
# softplus' = sigmoid; selu: scale * alpha; hardswish: (2x + 3) / 6 at x = 3; mish: 1.0885)
LIPSCHITZ = {"tanh": 1.0, "sigmoid": 0.25, "silu": 1.1, "erf": 2 / math.sqrt(math.pi) * 1.0001, "gelu": 1.13, "gelu_tanh": 1.13,
             "softplus": 1.0, "elu": 1.0, "selu": 1.7581, "hardsigmoid": 1 / 6, "hardswish": 1.5, "mish": 1.09,
             "softsign": 1.0, "logsigmoid": 1.0}  # fmt: skip
GELU_MIN = -0.1701  # min of gelu and gelu_tanh (-0.16997, -0.17004)
U32 = 2.0**-24  # unit roundoff of f32 (the accumulator of sums and matmuls)
# The bound of a zero whose sign may differ (known bug zero_sign_minmax): the smallest positive
# double, so the element need not be bit-exact but must still be equal (|diff| = 0).
ZERO_SIGN = 2.0**-1074
# Bounds at or below SIGN_ONLY only mark zeros whose sign may differ: the values are equal. (A
# real difference of f32/bf16/f16 values is at least 2^-149, and bounds built from real ones
# stay far above 1e-300.)
SIGN_ONLY = 1e-300

# ------------------------------------------------------------------------------------------------
# Error-model helpers (float64 tensors)


def ulp(dtype: str, mag: torch.Tensor) -> torch.Tensor:
    """Spacing of ``dtype`` at magnitude ``mag`` (>= the spacing of every value below it)."""
    mag = mag.abs().double()
    _, e = torch.frexp(mag)
    e = torch.clamp(e.to(torch.int64) - 1, min=EMIN[dtype])
    u = torch.ldexp(torch.ones_like(mag), (e - MANT[dtype]).to(torch.float64))
    u = torch.where(mag == 0, torch.full_like(mag, 2.0 ** (EMIN[dtype] - MANT[dtype])), u)
    return torch.where(torch.isfinite(mag), u, torch.full_like(mag, math.inf))


def rounding(dtype: str, mag: torch.Tensor) -> torch.Tensor:
    """Bound on |round(a) - round(b)| - |a - b| for |a|, |b| <= mag: half an ulp each side. One
    full ulp plus 1% covers bf16/f16 results that are first rounded to f32 (double rounding)."""
    return 1.01 * ulp(dtype, mag * (1 + 2.0**-30))


def exactly_rounded(prop: torch.Tensor, differs: torch.Tensor, rnd: torch.Tensor) -> torch.Tensor:
    """The bound of a correctly rounded op: 0 where no input may differ (both round the same
    exact result), the sign-of-zero mark where the inputs may differ only in the sign of a zero
    (equal values give equal results, up to the sign of a zero), else the propagated bound
    ``prop`` of the exact results plus the rounding term ``rnd``."""
    e = torch.where(prop > SIGN_ONLY, prop + rnd, torch.zeros_like(prop))
    return torch.where(differs & (e == 0), torch.full_like(e, ZERO_SIGN), e)


def gamma(n: int) -> float:
    """Higham's gamma_n for f32: bound on the relative error of n roundings in a sum/dot."""
    return n * U32 / (1 - n * U32)


def f64(x: Any) -> torch.Tensor:
    return x.double() if torch.is_tensor(x) else torch.tensor(float(x), dtype=torch.float64)


@dataclass
class Val:
    """A value of the model: ``v`` what interp computes (a torch tensor in the program dtype, or
    a Python number for scalars), ``e`` a float64 bound on |sim - interp| (0 = bit-exact; for
    bool tiles > 0 means the two may differ)."""

    v: Any
    e: torch.Tensor


def _zero_err(v: Any) -> torch.Tensor:
    return torch.zeros(v.shape if torch.is_tensor(v) else (), dtype=torch.float64)


# ------------------------------------------------------------------------------------------------
# Kernel expressions. Each node knows its tile type, an interval containing every value it can
# take (used by the generator to keep values finite and ops in their domain), its DSL text and
# its model semantics.


def broadcast(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


class Expr:
    shape: tuple[int, int] | None = None  # None for scalars
    dtype: str = F32
    lo: float = 0.0
    hi: float = 0.0

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def render(self) -> str:
        raise NotImplementedError

    def ev(self, env: dict[str, Any]) -> Val:
        raise NotImplementedError

    def children(self) -> tuple[Expr, ...]:
        return ()


class Var(Expr):
    def __init__(self, name: str, shape, dtype: str, lo: float, hi: float, defn: Expr | None = None):
        self.name, self.shape, self.dtype, self.lo, self.hi = name, shape, dtype, lo, hi
        self.defn = defn  # the expression assigned to it (None for a loop-carried value)

    def render(self) -> str:
        return self.name

    def ev(self, env):
        return env[self.name]


class Lit(Expr):
    """A number literal; it adopts the dtype of the tile it combines with."""

    def __init__(self, value: float | int, dtype: str):
        self.value, self.dtype = value, dtype
        self.lo = self.hi = float(value)

    def render(self) -> str:
        return repr(self.value)

    def ev(self, env):
        return Val(self.value, _zero_err(0.0))


class ScalarParam(Expr):
    def __init__(self, name: str):
        self.name = name
        self.dtype = F32
        self.lo, self.hi = -SCALAR_MAG, SCALAR_MAG

    def render(self) -> str:
        return self.name

    def ev(self, env):
        return env[self.name]


def _as_tensor(x: Any, dtype: str) -> torch.Tensor:
    """A scalar operand adopts the tile's dtype (as interp and the tile library do)."""
    return x if torch.is_tensor(x) else torch.tensor(x, dtype=TORCH[dtype])


class Full(Expr):
    def __init__(self, shape, value: float | int, dtype: str):
        self.shape, self.value, self.dtype = shape, value, dtype
        self.lo = self.hi = float(value)

    def render(self) -> str:
        if self.value == 0 and not (isinstance(self.value, float) and math.copysign(1, self.value) < 0):
            return f"ts.zeros({list(self.shape)}, ts.{self.dtype})"
        return f"ts.full({list(self.shape)}, {self.value!r}, ts.{self.dtype})"

    def ev(self, env):
        v = torch.full(self.shape, self.value, dtype=TORCH[self.dtype])
        return Val(v, _zero_err(v))


def render_count(n) -> str:
    """A ``valid=`` count: an int, or ``(scalar, cap)``: ``ts.minimum(scalar, cap)`` at run time."""
    return str(n) if isinstance(n, int) else f"ts.minimum({n[0]}, {n[1]})"


def eval_count(n, env) -> int:
    return n if isinstance(n, int) else min(int(env[n[0]].v), n[1])


def render_valid(valid) -> str:
    return f", valid=({', '.join(render_count(n) for n in valid)})"


class Load(Expr):
    """ts.load(param, [row, col], [rows, cols]); ``col`` may be a loop variable's name. With
    ``valid=(rows, cols)`` (ints or run-time counts) the elements outside it are ``fill``; with
    ``pad`` element [i, j] is ``param[row + i * s0, col + j * s1]`` (``strides``) where that lies
    inside the param, else ``pad``. ``dims=(0, None)``: a ``[rows, 1]`` column read along dim 0
    only (the tile's column has no tensor dim)."""

    def __init__(self, param: str, offsets: tuple, sizes, dtype: str, lo: float, hi: float, valid=None, fill=None,
                 pad=None, strides=(1, 1), dims=None):  # fmt: skip
        self.param, self.offsets, self.shape, self.dtype = param, offsets, tuple(sizes), dtype
        self.lo, self.hi = lo, hi
        self.valid, self.fill, self.pad, self.strides, self.dims = valid, fill, pad, tuple(strides), dims
        if valid is not None:
            self.lo, self.hi = min(lo, float(fill)), max(hi, float(fill))
        if pad is not None:
            self.lo, self.hi = min(lo, float(pad)), max(hi, float(pad))

    def render(self) -> str:
        offs = ", ".join(str(o) for o in self.offsets)
        extra = "" if self.valid is None else f"{render_valid(self.valid)}, fill={self.fill!r}"
        extra += "" if self.pad is None else f", pad={self.pad!r}"
        extra += "" if self.strides == (1, 1) else f", strides={list(self.strides)}"
        extra += "" if self.dims is None else f", dims={list(self.dims)}"
        return f"ts.load({self.param}, [{offs}], {list(self.shape)}{extra})"

    def ev(self, env):
        view, err = env[self.param]
        r0, c0 = (env[o] if isinstance(o, str) else o for o in self.offsets)
        r, c = self.shape
        if self.pad is not None:
            rows = torch.arange(r) * self.strides[0] + r0
            cols = torch.arange(c) * self.strides[1] + c0
            inside = ((rows >= 0) & (rows < view.shape[0]))[:, None] & ((cols >= 0) & (cols < view.shape[1]))[None, :]
            ri, ci = rows.clamp(0, view.shape[0] - 1), cols.clamp(0, view.shape[1] - 1)
            v = torch.where(inside, view[ri[:, None], ci[None, :]], torch.tensor(self.pad, dtype=TORCH[self.dtype]))
            return Val(v.to(TORCH[self.dtype]), torch.where(inside, err[ri[:, None], ci[None, :]], 0.0))
        if self.valid is None:
            return Val(view[r0 : r0 + r, c0 : c0 + c].clone(), err[r0 : r0 + r, c0 : c0 + c].clone())
        vr, vc = (eval_count(n, env) for n in self.valid)
        v = torch.full((r, c), self.fill, dtype=TORCH[self.dtype])
        e = torch.zeros((r, c), dtype=torch.float64)
        v[:vr, :vc] = view[r0 : r0 + vr, c0 : c0 + vc]
        e[:vr, :vc] = err[r0 : r0 + vr, c0 : c0 + vc]
        return Val(v, e)


class Iota(Expr):
    """ts.iota(shape, dtype, dim=): each element's index along ``dim`` (exact)."""

    def __init__(self, shape, dtype: str, dim: int):
        self.shape, self.dtype, self.dim = tuple(shape), dtype, dim
        self.lo, self.hi = 0.0, float(self.shape[dim] - 1)

    def render(self) -> str:
        return f"ts.iota({list(self.shape)}, ts.{self.dtype}, dim={self.dim})"

    def ev(self, env):
        n = self.shape[self.dim]
        idx = torch.arange(n, dtype=torch.int64).reshape([n if i == self.dim else 1 for i in range(2)])
        v = idx.expand(self.shape).to(TORCH[self.dtype]).contiguous()
        return Val(v, _zero_err(v))


class Rand(Expr):
    """ts.rand(shape, seed, offset): uniform [0, 1) f32 numbers (exact: sim and interp draw the
    same bits)."""

    def __init__(self, shape, seed: int, offset: int):
        self.shape, self.dtype, self.seed, self.offset = tuple(shape), F32, seed, offset
        self.lo, self.hi = 0.0, 1.0

    def render(self) -> str:
        return f"ts.rand({list(self.shape)}, {self.seed}, {self.offset})"

    def ev(self, env):
        v = philox_uniform(self.seed, self.offset, self.shape)
        return Val(v, _zero_err(v))


class TileSlice(Expr):
    """A static sub-tile ``x[r0:r1, c0:c1]`` of a named tile (exact)."""

    def __init__(self, x: Var, r0: int, r1: int, c0: int, c1: int):
        self.x, self.box = x, (r0, r1, c0, c1)
        self.shape, self.dtype, self.lo, self.hi = (r1 - r0, c1 - c0), x.dtype, x.lo, x.hi

    def children(self):
        return (self.x,)

    def render(self) -> str:
        r0, r1, c0, c1 = self.box
        return f"{self.x.render()}[{r0}:{r1}, {c0}:{c1}]"

    def ev(self, env):
        x = self.x.ev(env)
        r0, r1, c0, c1 = self.box
        return Val(x.v[r0:r1, c0:c1].contiguous(), x.e[r0:r1, c0:c1].contiguous())


class IndexDrop(Expr):
    """``x[i]`` (axis 0) or ``x[:, j]`` (axis 1) of a named tile: a 1-D tile, which broadcasts
    as a ``[1, n]`` row (numpy), so the model gives it the shape ``(1, n)``; the generator only
    uses it as an operand of an op with a 2-D tile (exact)."""

    def __init__(self, x: Var, axis: int, index: int):
        self.x, self.axis, self.index = x, axis, index
        self.shape = (1, x.shape[1 - axis])
        self.dtype, self.lo, self.hi = x.dtype, x.lo, x.hi

    def children(self):
        return (self.x,)

    def render(self) -> str:
        return f"{self.x.render()}[{self.index}]" if self.axis == 0 else f"{self.x.render()}[:, {self.index}]"

    def ev(self, env):
        x = self.x.ev(env)
        if self.axis == 0:
            return Val(x.v[self.index].contiguous(), x.e[self.index].contiguous())
        return Val(x.v[:, self.index].contiguous(), x.e[:, self.index].contiguous())


def _via_f32(fn, x: torch.Tensor) -> torch.Tensor:
    return fn(x.float()).to(x.dtype) if x.dtype in (torch.bfloat16, torch.float16) else fn(x)


# every unary op of the registry on numbers; rsqrt is left to the op grids
UNARY = tuple(n for n in reg.unary_ops() if reg.OPS[n].dtypes != reg.BOOL and n != "rsqrt")
_TORCH_UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "sqrt": lambda x: torch.sqrt(x.double()).float() if x.dtype == torch.float32 else torch.sqrt(x),  # as interp
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "silu": torch.nn.functional.silu,
    "erf": lambda x: _via_f32(torch.erf, x),  # as interp: bf16/f16 through f32
    "exp2": torch.exp2,
    "log2": torch.log2,
    "reciprocal": torch.reciprocal,
    "gelu": lambda x: _via_f32(torch.nn.functional.gelu, x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "softplus": lambda x: _via_f32(torch.nn.functional.softplus, x),
    "log1p": lambda x: _via_f32(torch.log1p, x),
    **{name: unary_fn(name) for name in ACTIVATIONS},  # interp's own: torch's formulas in float64
}
# the ops interp computes in float64 or by its own functions: the model computes them the same way
_TORCH_UNARY.update({n: unary_fn(n) for n in _TORCH_UNARY if reg.OPS[n].interp in ("f64", "own") and n != "sqrt"})


def _silu(x: float) -> float:
    return x / (1 + math.exp(-x)) if x > -700 else 0.0


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x > -700 else 0.0


MISH_MIN = -0.30885  # min of mish (-0.308840 at x = -1.1924)
_ACTIVATION = {  # the activations on one float, for interval bounds
    "expm1": math.expm1,
    "elu": lambda x: x if x >= 0 else math.expm1(x),
    "selu": lambda x: 1.0507009873554805 * (x if x >= 0 else 1.6732632423543772 * math.expm1(x)),
    "hardsigmoid": lambda x: min(max(x + 3, 0.0), 6.0) / 6,
    "hardswish": lambda x: x * min(max(x + 3, 0.0), 6.0) / 6,
    "mish": lambda x: x * math.tanh(_softplus(x)),
    "softsign": lambda x: x / (1 + abs(x)),
    "logsigmoid": lambda x: -_softplus(-x),
}


class Unary(Expr):
    def __init__(self, op: str, x: Expr):
        self.op, self.x = op, x
        self.shape, self.dtype = x.shape, x.dtype
        lo, hi = x.lo, x.hi
        if op == "neg":
            self.lo, self.hi = -hi, -lo
        elif op == "abs":
            self.lo, self.hi = (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
        elif op == "sqrt":
            assert lo >= 0, "sqrt of a possibly negative value"
            self.lo, self.hi = math.sqrt(lo), math.sqrt(hi)
        elif op == "exp":
            self.lo, self.hi = math.exp(lo), math.exp(hi)
        elif op == "log":
            assert lo > 0, "log of a possibly non-positive value"
            self.lo, self.hi = math.log(lo), math.log(hi)
        elif op == "tanh":
            self.lo, self.hi = math.tanh(lo), math.tanh(hi)
        elif op == "sigmoid":
            self.lo, self.hi = _sigmoid(lo), _sigmoid(hi)
        elif op == "silu":
            self.lo, self.hi = (-0.2785 if lo < 0 else _silu(lo)), max(_silu(hi), 0.0)
        elif op == "erf":
            self.lo, self.hi = math.erf(lo), math.erf(hi)
        elif op == "exp2":
            self.lo, self.hi = 2.0**lo, 2.0**hi
        elif op == "log2":
            assert lo > 0, "log2 of a possibly non-positive value"
            self.lo, self.hi = math.log2(lo), math.log2(hi)
        elif op == "reciprocal":
            assert min(abs(lo), abs(hi)) >= 0.5 and (lo > 0 or hi < 0), "reciprocal near zero"
            self.lo, self.hi = 1 / hi, 1 / lo
        elif op == "softplus":  # increasing
            self.lo, self.hi = _softplus(lo), _softplus(hi)
        elif op == "log1p":
            assert lo > -0.5, "log1p of a value possibly near or below -1"
            self.lo, self.hi = math.log1p(lo), math.log1p(hi)
        elif op in ("expm1", "elu", "selu", "hardsigmoid", "softsign", "logsigmoid"):  # increasing
            self.lo, self.hi = _ACTIVATION[op](lo), _ACTIVATION[op](hi)
        elif op == "hardswish":  # decreasing to -0.375 at -1.5, then increasing
            ends = (_ACTIVATION[op](lo), _ACTIVATION[op](hi))
            self.lo, self.hi = (-0.375 if lo <= -1.5 <= hi else min(ends)), max(ends)
        elif op == "mish":  # >= MISH_MIN, <= max(x, 0)
            self.lo, self.hi = (MISH_MIN if lo < 0 else _ACTIVATION[op](lo)), max(hi, 0.0)
        elif op in ("gelu", "gelu_tanh"):  # x Phi(x): >= GELU_MIN, <= max(x, 0)
            self.lo, self.hi = (GELU_MIN if lo < 0 else lo * 0.5 * math.erfc(-lo / math.sqrt(2))), max(hi, 0.0)

    def children(self):
        return (self.x,)

    def render(self) -> str:
        if self.op == "gelu_tanh":
            return f"ts.gelu({self.x.render()}, approximate='tanh')"
        return f"-{self.x.render()}" if self.op == "neg" else f"ts.{self.op}({self.x.render()})"

    def ev(self, env):
        x = self.x.ev(env)
        v = _TORCH_UNARY[self.op](x.v)
        xv, ex = f64(x.v), x.e
        d = self.dtype
        if self.op in ("neg", "abs"):  # exact, 1-Lipschitz
            return Val(v, ex.clone())
        if self.op == "sqrt":  # correctly rounded in both
            lower = torch.clamp(xv - ex, min=0)
            prop = torch.minimum(torch.sqrt(ex), ex / (torch.sqrt(lower) + torch.sqrt(xv)).clamp(min=1e-300))
            top = torch.sqrt(xv + ex)
            e = exactly_rounded(prop, ex > 0, rounding(d, top))
            return Val(v, e)
        if self.op == "reciprocal":  # correctly rounded in both (as division): 1/x' - 1/x
            gap = xv.abs() - ex
            prop = torch.where(gap > 0, ex / (xv.abs() * gap.clamp(min=1e-300)), torch.full_like(gap, math.inf))
            top = 1 / gap.clamp(min=1e-300)
            return Val(v, exactly_rounded(prop, ex > 0, rounding(d, top)))
        # exp, log, tanh, sigmoid, silu: not correctly rounded; each side errs by its ulp bound
        # (in f32, bf16/f16 compute in float), plus the input error through the Lipschitz bound,
        # plus the final rounding of bf16/f16.
        hi_in, lo_in = xv + ex, xv - ex
        # lip: the largest |f'| over [lo_in, hi_in]; top: the largest |f| there
        if self.op == "exp":
            lip = top = torch.exp(hi_in)
        elif self.op == "exp2":
            top = torch.exp2(hi_in)
            lip = math.log(2) * top
        elif self.op in ("log", "log2"):
            scale = 1.0 if self.op == "log" else 1 / math.log(2)
            lip = torch.where(lo_in > 0, scale / lo_in.clamp(min=1e-300), torch.full_like(lo_in, math.inf))
            top = scale * torch.maximum(torch.log(hi_in).abs(), torch.log(lo_in.clamp(min=1e-300)).abs())
        elif self.op == "expm1":  # f' = e^x, increasing, > -1
            lip = torch.exp(hi_in)
            top = torch.maximum(torch.expm1(hi_in).abs(), torch.expm1(lo_in).abs())
        elif self.op == "log1p":  # |f'| = 1 / (1 + x)
            room = 1 + lo_in
            lip = torch.where(room > 0, 1 / room.clamp(min=1e-300), torch.full_like(lo_in, math.inf))
            top = torch.maximum(torch.log1p(hi_in).abs(), torch.log1p(lo_in.clamp(min=-1 + 1e-15)).abs())
        else:
            lip = torch.full_like(xv, LIPSCHITZ[self.op])
            if self.op == "tanh":  # |tanh x| <= min(|x|, 1)
                top = torch.clamp(xv.abs() + ex, max=1.0)
            elif self.op == "sigmoid":  # increasing
                top = torch.sigmoid(hi_in)
            elif self.op == "softplus":  # increasing, positive
                top = torch.clamp(hi_in, min=0) + torch.log1p(torch.exp(-hi_in.abs()))
            elif self.op == "hardsigmoid":  # in [0, 1], |f| <= 1/2 + |x| / 6
                top = torch.clamp((xv.abs() + ex) / 6 + 0.5, max=1.0)
            elif self.op == "softsign":  # |f| <= min(|x|, 1)
                top = torch.clamp(xv.abs() + ex, max=1.0)
            elif self.op == "selu":  # |selu x| <= scale alpha |x|
                top = LIPSCHITZ["selu"] * (xv.abs() + ex)
            elif self.op == "logsigmoid":  # negative, increasing: largest at the low end
                top = torch.clamp(-lo_in, min=0) + torch.log1p(torch.exp(-lo_in.abs()))
            elif self.op == "erf":  # |erf x| <= min(L |x|, 1)
                top = torch.clamp(LIPSCHITZ["erf"] * (xv.abs() + ex), max=1.0)
            else:  # |silu x| = |x| sigmoid(x) <= |x|; gelu's errors are in ulps of max(|gelu x|, |x|) = |x|
                top = xv.abs() + ex
        k = SIM_ULPS[self.op] + TORCH_ULPS[self.op]
        e = torch.where(ex > 0, lip * ex, torch.zeros_like(ex)) + k * ulp(F32, top * (1 + 2.0**-20))
        if d != F32:
            e = e + rounding(d, top + e)
        return Val(v, e)


BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_TORCH_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
}


def _interval(op: str, a: Expr, b: Expr) -> tuple[float, float]:
    if op == "add":
        return a.lo + b.lo, a.hi + b.hi
    if op == "sub":
        return a.lo - b.hi, a.hi - b.lo
    if op == "mul":
        ps = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return min(ps), max(ps)
    if op == "div":  # the generator only divides by values of magnitude >= 1/2
        m = a.mag / max(min(abs(b.lo), abs(b.hi)), 0.5)
        return (-m if a.lo < 0 else 0.0), (m if a.hi > 0 else 0.0)
    if op == "maximum":
        return max(a.lo, b.lo), max(a.hi, b.hi)
    return min(a.lo, b.lo), min(a.hi, b.hi)


class Binary(Expr):
    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        tile = a if a.shape is not None else b
        self.dtype = tile.dtype
        self.shape = broadcast(a.shape, b.shape) if a.shape and b.shape else tile.shape
        assert self.shape is not None, (a.shape, b.shape)
        self.lo, self.hi = _interval(op, a, b)

    def children(self):
        return (self.a, self.b)

    def render(self) -> str:
        if self.op in _SYM:
            return f"({self.a.render()} {_SYM[self.op]} {self.b.render()})"
        return f"ts.{self.op}({self.a.render()}, {self.b.render()})"

    def ev(self, env):
        a, b = self.a.ev(env), self.b.ev(env)
        v = _TORCH_BINARY[self.op](_as_tensor(a.v, self.dtype), _as_tensor(b.v, self.dtype))
        av, bv, ea, eb = f64(a.v), f64(b.v), a.e, b.e
        if self.op in ("maximum", "minimum"):  # exact, 1-Lipschitz in the max norm
            e = torch.maximum(ea, eb).expand(v.shape).clone()
            if "zero_sign_minmax" in env["#tolerate"]:  # known bug: a tie of -0.0 and +0.0
                av, bv = _as_tensor(a.v, self.dtype), _as_tensor(b.v, self.dtype)
                tie = (av == 0) & (bv == 0) & (torch.signbit(av) != torch.signbit(bv))
                e = torch.where(tie.expand(v.shape) & (e == 0), torch.full_like(e, ZERO_SIGN), e)
            return Val(v, e)
        if self.op in ("add", "sub"):
            prop = ea + eb
            exact = av + bv if self.op == "add" else av - bv
        elif self.op == "mul":
            prop = av.abs() * eb + bv.abs() * ea + ea * eb
            exact = av * bv
        else:  # |x'/y' - x/y| <= (ex |y| + |x| ey) / (|y| (|y| - ey))
            gap = bv.abs() - eb
            prop = torch.where(
                gap > 0,
                (ea * bv.abs() + av.abs() * eb) / (bv.abs() * gap.clamp(min=1e-300)),
                torch.full_like(gap, math.inf),
            )
            prop = torch.where((ea == 0) & (eb == 0), torch.zeros_like(prop), prop)
            exact = av / bv
        prop = prop.expand(v.shape)
        if self.dtype == I32:  # exact integer arithmetic (the generator avoids wrap-around)
            return Val(v, torch.where(prop > SIGN_ONLY, prop, torch.zeros_like(prop)))
        differs = ((ea > 0) | (eb > 0)).expand(v.shape)
        return Val(v, exactly_rounded(prop, differs, rounding(self.dtype, exact.abs() + prop)))


class Pow(Expr):
    """ts.pow(base, exponent): tile^tile, tile^literal or literal^tile, with a positive base."""

    def __init__(self, a: Expr, b: Expr):
        self.a, self.b = a, b
        assert a.lo > 0, "pow of a possibly non-positive base"
        tile = a if a.shape is not None else b
        self.dtype = tile.dtype
        self.shape = broadcast(a.shape, b.shape) if a.shape and b.shape else tile.shape
        assert self.shape is not None
        corners = [x**y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]  # monotone in each
        self.lo, self.hi = min(corners), max(corners)

    def children(self):
        return (self.a, self.b)

    def render(self) -> str:
        return f"ts.pow({self.a.render()}, {self.b.render()})"

    def ev(self, env):
        a, b = self.a.ev(env), self.b.ev(env)
        v = torch.pow(_as_tensor(a.v, self.dtype), _as_tensor(b.v, self.dtype))
        av, bv, ea, eb = f64(a.v), f64(b.v), a.e, b.e
        exact = torch.pow(av, bv)
        # x^y is monotone in x and in y (base > 0): over the box of possible sim inputs the
        # extremes are at its corners (float64, inflated for its own rounding)
        lo_a = av - ea
        corners = [torch.pow(torch.clamp(av + sa * ea, min=1e-300), bv + sb * eb) for sa in (-1, 1) for sb in (-1, 1)]
        prop = torch.stack([(c - exact).abs() for c in torch.broadcast_tensors(*corners)]).amax(0) * (1 + 1e-9)
        prop = torch.where(lo_a > 0, prop, torch.full_like(prop, math.inf))
        top = torch.stack(torch.broadcast_tensors(*[c.abs() for c in corners], exact.abs())).amax(0)
        differs = (ea > 0) | (eb > 0)
        k = SIM_ULPS["pow"] + TORCH_ULPS["pow"]
        e = torch.where(differs, prop, torch.zeros_like(prop)) + k * ulp(F32, top * (1 + 2.0**-20))
        if self.dtype != F32:
            e = e + rounding(self.dtype, top + e)
        return Val(v, e.expand(v.shape).clone())


class Clamp(Expr):
    """ts.clamp(x, min=, max=): lowered to ts.minimum(ts.maximum(x, min), max) (exact)."""

    def __init__(self, x: Expr, lo: Expr | None, hi: Expr | None):
        self.x, self.min, self.max = x, lo, hi
        inner = x
        if lo is not None:
            inner = Binary("maximum", inner, lo)
        if hi is not None:
            inner = Binary("minimum", inner, hi)
        self.inner = inner
        self.shape, self.dtype, self.lo, self.hi = inner.shape, inner.dtype, inner.lo, inner.hi

    def children(self):
        return tuple(c for c in (self.x, self.min, self.max) if c is not None)

    def render(self) -> str:
        bounds = "".join(f", {k}={c.render()}" for k, c in (("min", self.min), ("max", self.max)) if c is not None)
        return f"ts.clamp({self.x.render()}{bounds})"

    def ev(self, env):
        return self.inner.ev(env)


CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_TORCH_CMP = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}


class Cmp(Expr):
    """A comparison (bool tile); its error is 1 where sim and interp may decide differently."""

    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b
        tile = a if a.shape is not None else b
        self.shape = broadcast(a.shape, b.shape) if a.shape and b.shape else tile.shape
        self.dtype = "bool"
        self.operand_dtype = tile.dtype
        self.lo, self.hi = 0.0, 1.0

    def children(self):
        return (self.a, self.b)

    def render(self) -> str:
        return f"({self.a.render()} {CMP[self.op]} {self.b.render()})"

    def ev(self, env):
        a, b = self.a.ev(env), self.b.ev(env)
        v = _TORCH_CMP[self.op](_as_tensor(a.v, self.operand_dtype), _as_tensor(b.v, self.operand_dtype))
        slack = a.e + b.e
        may_flip = (slack > SIGN_ONLY) & ((f64(a.v) - f64(b.v)).abs() <= slack)  # -0.0 == 0.0
        return Val(v, may_flip.double().expand(v.shape).clone())


class Logical(Expr):
    def __init__(self, op: str, a: Expr, b: Expr | None):
        self.op, self.a, self.b = op, a, b
        self.shape = a.shape if b is None else broadcast(a.shape, b.shape)
        self.dtype = "bool"

    def children(self):
        return (self.a,) if self.b is None else (self.a, self.b)

    def render(self) -> str:
        if self.b is None:
            return f"ts.logical_not({self.a.render()})"
        return f"ts.{self.op}({self.a.render()}, {self.b.render()})"

    def ev(self, env):
        a = self.a.ev(env)
        if self.b is None:
            return Val(torch.logical_not(a.v), a.e.clone())
        b = self.b.ev(env)
        fn = torch.logical_and if self.op == "logical_and" else torch.logical_or
        return Val(fn(a.v, b.v), torch.maximum(a.e, b.e).expand(broadcast(a.v.shape, b.v.shape)).clone())


class Where(Expr):
    def __init__(self, cond: Expr, a: Expr, b: Expr):
        self.cond, self.a, self.b = cond, a, b
        tile = a if a.shape is not None else b
        self.dtype = tile.dtype
        ab = broadcast(a.shape, b.shape) if a.shape and b.shape else tile.shape
        self.shape = broadcast(cond.shape, ab)
        assert self.shape is not None
        self.lo, self.hi = min(a.lo, b.lo), max(a.hi, b.hi)

    def children(self):
        return (self.cond, self.a, self.b)

    def render(self) -> str:
        return f"ts.where({self.cond.render()}, {self.a.render()}, {self.b.render()})"

    def ev(self, env):
        c, a, b = self.cond.ev(env), self.a.ev(env), self.b.ev(env)
        v = torch.where(c.v, _as_tensor(a.v, self.dtype), _as_tensor(b.v, self.dtype))
        chosen = torch.where(c.v, a.e, b.e)
        # a flipped choice: sim took the other branch, |a_s - b_i| <= |a_i - b_i| + e_a (or e_b)
        flipped = (f64(a.v) - f64(b.v)).abs() + torch.maximum(a.e, b.e)
        return Val(v, torch.where(c.e > 0, flipped, chosen).expand(v.shape).clone())


REDUCE = ("row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min", "row_mean", "col_mean", "row_logsumexp",
          "col_logsumexp", "row_argmax", "row_argmin", "col_argmax", "col_argmin")  # fmt: skip
FLOAT_REDUCE = ("mean", "logsumexp")  # of float tiles only


class Reduce(Expr):
    def __init__(self, op: str, x: Expr):
        self.op, self.x = op, x
        r, c = x.shape
        self.n = c if op.startswith("row") else r
        self.shape = (r, 1) if op.startswith("row") else (1, c)
        self.dtype = x.dtype
        if op.endswith("sum"):
            self.lo, self.hi = self.n * x.lo, self.n * x.hi
        elif op.endswith(("mean", "logsumexp")):
            assert x.dtype in FLOATS, f"{op} of integers"
            self.lo, self.hi = x.lo, x.hi + (math.log(self.n) if op.endswith("logsumexp") else 0.0)
        elif op.endswith(("argmax", "argmin")):  # an i32 index
            self.dtype, self.lo, self.hi = I32, 0, self.n - 1
        else:
            self.lo, self.hi = x.lo, x.hi

    def children(self):
        return (self.x,)

    def render(self) -> str:
        return f"ts.{self.op}({self.x.render()})"

    def ev(self, env):
        x = self.x.ev(env)
        dim = -1 if self.op.startswith("row") else 0
        kind = self.op.split("_")[1]
        if kind == "sum":
            v = x.v.sum(dim=dim, keepdim=True, dtype=x.v.dtype)
        elif kind == "mean":
            v = x.v.mean(dim=dim, keepdim=True)
        elif kind in ("argmax", "argmin"):  # exact, unless another element is the extreme within the errors
            v = getattr(torch, kind)(x.v, dim=dim, keepdim=True)
            xv = f64(x.v)
            best, reach = torch.gather(xv, dim % 2, v), torch.gather(x.e, dim % 2, v) + x.e
            other = torch.arange(xv.shape[dim]).view((1, -1) if dim == -1 else (-1, 1)) != v
            rival = (((xv - best).abs() <= reach) & other).any(dim=dim, keepdim=True)
            return Val(v.to(torch.int32), torch.where(rival, math.inf, 0.0).to(torch.float64))
        elif kind == "logsumexp":  # slopes summing to 1; both sides compute in double and round once
            v = logsumexp(x.v, dim)  # interp's
            e = x.e.amax(dim=dim, keepdim=True)
            top = f64(v).abs() + e
            return Val(v, e + 2 * (ulp(F32, top) if self.dtype == F32 else rounding(self.dtype, top)))
        else:
            v = (torch.amax if kind == "max" else torch.amin)(x.v, dim=dim, keepdim=True)
        if kind not in ("sum", "mean"):  # exact, 1-Lipschitz
            e = x.e.amax(dim=dim, keepdim=True)
            if "zero_sign_minmax" in env["#tolerate"] and x.v.is_floating_point():  # known bug
                zero = x.v == 0
                tie = (zero & torch.signbit(x.v)).any(dim=dim, keepdim=True) & (
                    zero & ~torch.signbit(x.v)
                ).any(dim=dim, keepdim=True)
                e = torch.where(tie & (e == 0), torch.full_like(e, ZERO_SIGN), e)
            return Val(v, e)
        prop = x.e.sum(dim=dim, keepdim=True)
        if self.dtype == I32 or self.n == 1:  # exact (no wrap-around) / a single element
            return Val(v, prop)
        # both sum in f32 in some order (sim: the documented lanes; interp: torch's): each is
        # within gamma_{n-1} * sum|x| of the exact sum; bf16/f16 then round once.
        absum = (f64(x.v).abs() + x.e).sum(dim=dim, keepdim=True)
        e = prop + 2 * gamma(self.n) * absum  # gamma_n: sim may fuse a product into the sum
        if kind == "mean":
            # the sums' bound over n, then each side's f32 division (sim: correctly rounded; torch
            # may multiply by a rounded 1/n): within one ulp of f32 each, so 2 ulps with margin;
            # bf16/f16: both round the f32 mean once (test_torch_half_reductions_accumulate_in_f32)
            e = e / self.n + 2.02 * ulp(F32, (absum / self.n) * (1 + 2.0**-20))
            if self.dtype != F32:
                e = e + rounding(self.dtype, absum / self.n + e)
            return Val(v, e)
        if self.dtype != F32:
            e = e + rounding(self.dtype, absum)
        return Val(v, e)


class Scan(Expr):
    """ts.cumsum / ts.cumprod along ``dim``: sim and interp both run one float64 (int64) value along
    the dim and round each output once, so they agree bit for bit on equal inputs; their inputs'
    differences are carried along (a sum's add up, a product's are bounded by the widened
    magnitudes' product), and each output may then round the other way."""

    def __init__(self, op: str, x: Expr, dim: int, reverse: bool, exclusive: bool):
        self.op, self.x, self.dim, self.reverse, self.exclusive = op, x, dim, reverse, exclusive
        self.shape, self.dtype = x.shape, x.dtype
        n = x.shape[dim]
        if op == "cumsum":
            self.lo, self.hi = n * min(x.lo, 0.0), n * max(x.hi, 0.0)
        else:
            assert max(abs(x.lo), abs(x.hi)) <= 1.0, "cumprod of values that may grow"
            self.lo, self.hi = -1.0, 1.0

    def children(self):
        return (self.x,)

    def render(self) -> str:
        flags = f", dim={self.dim}" if self.dim == 0 else ""
        flags += ", reverse=True" if self.reverse else ""
        flags += ", exclusive=True" if self.exclusive else ""
        return f"ts.{self.op}({self.x.render()}{flags})"

    def ev(self, env):
        x = self.x.ev(env)
        run = lambda t, op=self.op: scan(t, op, self.dim, self.reverse, self.exclusive)  # noqa: E731
        v = run(x.v)
        mags = f64(x.v).abs()
        if self.op == "cumsum":
            prop, top = run(x.e, "cumsum"), run(mags + x.e, "cumsum")
        else:
            top = run(mags + x.e, "cumprod")
            prop = top - run(mags, "cumprod")
        if self.dtype == I32:
            return Val(v, prop)
        flip = rounding(self.dtype, top) + (rounding(F32, top) if self.dtype != F32 else 0)
        return Val(v, torch.where(prop > 0, prop + 2 * flip, torch.zeros_like(prop)))


MODES = ("rint", "round", "floor", "ceil", "trunc")


def _round_mode(x: torch.Tensor, mode: str) -> torch.Tensor:
    v = x.double()
    return {
        "rint": torch.round,
        "round": lambda t: torch.sign(t) * torch.floor(torch.abs(t) + 0.5),
        "floor": torch.floor,
        "ceil": torch.ceil,
        "trunc": torch.trunc,
    }[mode](v)


class Cast(Expr):
    def __init__(self, x: Expr, dtype: str, mode: str | None = None):
        self.x, self.dtype, self.mode = x, dtype, mode
        self.shape = x.shape
        self.lo, self.hi = x.lo, x.hi
        if dtype == I32:
            self.lo, self.hi = math.floor(x.lo) - 1.0, math.ceil(x.hi) + 1.0

    def children(self):
        return (self.x,)

    def render(self) -> str:
        mode = f", mode={self.mode!r}" if self.mode else ""
        return f"ts.cast({self.x.render()}, ts.{self.dtype}{mode})"

    def ev(self, env):
        x = self.x.ev(env)
        src, dst = self.x.dtype, self.dtype
        ex = x.e
        if dst == I32:
            v = _round_mode(x.v, self.mode or "rint").to(torch.int32)  # |x| <= CAP: no saturation
            return Val(v, torch.where(ex > SIGN_ONLY, torch.floor(ex) + 1, torch.zeros_like(ex)))
        v = x.v.to(TORCH[dst])
        if src in (F16, BF16) and dst == F32:  # exact
            return Val(v, ex.clone())
        return Val(v, exactly_rounded(ex, ex > 0, rounding(dst, f64(x.v).abs() + ex)))


class MatMul(Expr):
    """ts.matmul(a, b) (optionally with acc=, transpose_a=, transpose_b=), f32 result with f32
    accumulation."""

    def __init__(self, a: Expr, b: Expr, acc: Expr | None = None, ta: bool = False, tb: bool = False):
        self.a, self.b, self.acc, self.ta, self.tb = a, b, acc, ta, tb
        (m, self.k), (kb, n) = a.shape[:: -1 if ta else 1], b.shape[:: -1 if tb else 1]
        assert kb == self.k and a.dtype == b.dtype
        self.shape = (m, n)
        self.dtype = F32
        m = self.k * a.mag * b.mag + (acc.mag if acc is not None else 0.0)
        self.lo, self.hi = -m, m

    def children(self):
        return (self.a, self.b) if self.acc is None else (self.a, self.b, self.acc)

    def render(self) -> str:
        acc = f", acc={self.acc.render()}" if self.acc is not None else ""
        acc += ", transpose_a=True" if self.ta else ""
        acc += ", transpose_b=True" if self.tb else ""
        return f"ts.matmul({self.a.render()}, {self.b.render()}{acc})"

    def ev(self, env):
        a, b = self.a.ev(env), self.b.ev(env)
        if self.ta:
            a = Val(a.v.transpose(0, 1), a.e.transpose(0, 1))
        if self.tb:
            b = Val(b.v.transpose(0, 1), b.e.transpose(0, 1))
        v = a.v.to(torch.float32) @ b.v.to(torch.float32)
        aa, ba = f64(a.v).abs(), f64(b.v).abs()
        prop = aa @ b.e + a.e @ ba + a.e @ b.e
        mag = (aa + a.e) @ (ba + b.e)
        n = self.k
        if self.acc is not None:
            c = self.acc.ev(env)
            v = c.v + v
            prop = prop + c.e
            mag = mag + f64(c.v).abs() + c.e
            n += 1
        # sim: K fused multiply-adds from acc (or 0) in order; interp: torch's f32 GEMM in any
        # order, then + acc: each within gamma_{K+1} * (|acc| + sum |a||b|) of the exact value.
        return Val(v, prop + 2 * gamma(n) * mag)


class AccMatMul(MatMul):
    """``acc = acc + ts.matmul(a, b)`` (or ``ts.matmul(a, b) + acc``, or ``acc=acc``): the
    FuseMatmulAccumulate pass turns the first two into ``ts.matmul(a, b, acc=acc)``, which sim
    accumulates in place, so the model treats all three as the fused form."""

    def __init__(self, a: Expr, b: Expr, acc: Expr, form: str):
        super().__init__(a, b, acc)
        self.form = form

    def render(self) -> str:
        mm = f"ts.matmul({self.a.render()}, {self.b.render()})"
        if self.form == "acc+mm":
            return f"{self.acc.render()} + {mm}"
        if self.form == "mm+acc":
            return f"{mm} + {self.acc.render()}"
        return super().render()


class Transpose(Expr):
    def __init__(self, x: Expr):
        self.x = x
        self.shape = (x.shape[1], x.shape[0])
        self.dtype, self.lo, self.hi = x.dtype, x.lo, x.hi

    def children(self):
        return (self.x,)

    def render(self) -> str:
        return f"ts.transpose({self.x.render()})"

    def ev(self, env):
        x = self.x.ev(env)
        return Val(x.v.transpose(0, 1).contiguous(), x.e.transpose(0, 1).contiguous())


# ------------------------------------------------------------------------------------------------
# Kernel statements


@dataclass
class Assign:
    name: str
    value: Expr

    def lines(self, ind: str) -> list[str]:
        return [f"{ind}{self.name} = {self.value.render()}"]

    def run(self, env):
        env[self.name] = self.value.ev(env)


@dataclass
class Store:
    """ts.store(param, offsets, value), with ``valid=`` (InOut params only: the rest keeps its
    input) writing only the first rows x cols of the tile."""

    param: str
    offsets: tuple
    value: Expr
    valid: tuple | None = None

    def lines(self, ind: str) -> list[str]:
        offs = ", ".join(str(o) for o in self.offsets)
        valid = "" if self.valid is None else render_valid(self.valid)
        return [f"{ind}ts.store({self.param}, [{offs}], {self.value.render()}{valid})"]

    def run(self, env):
        tile = self.value.ev(env)
        view, err = env[self.param]
        r0, c0 = (env[o] if isinstance(o, str) else o for o in self.offsets)
        r, c = tile.v.shape
        if self.valid is not None:
            vr, vc = (eval_count(n, env) for n in self.valid)
            view[r0 : r0 + vr, c0 : c0 + vc].copy_(tile.v[:vr, :vc].to(view.dtype))
            err[r0 : r0 + vr, c0 : c0 + vc].copy_(tile.e.expand(r, c)[:vr, :vc])
            return
        view[r0 : r0 + r, c0 : c0 + c].copy_(tile.v.to(view.dtype))
        err[r0 : r0 + r, c0 : c0 + c].copy_(tile.e.expand(r, c))


@dataclass
class Loop:
    var: str
    start: int
    stop: int
    step: int
    body: list

    def lines(self, ind: str) -> list[str]:
        out = [f"{ind}for {self.var} in ts.range({self.start}, {self.stop}, {self.step}):"]
        for s in self.body:
            out += s.lines(ind + "    ")
        return out

    def run(self, env):
        for i in range(self.start, self.stop, self.step):
            env[self.var] = i
            for s in self.body:
                s.run(env)


@dataclass
class Param:
    name: str
    kind: str  # in | out | inout | scalar
    shape: tuple[int, int] | None
    dtype: str

    def annotation(self) -> str:
        if self.kind == "scalar":
            return f"ts.Scalar[ts.{self.dtype}]"
        wrap = {"in": "Tensor", "out": "Out", "inout": "InOut"}[self.kind]
        return f"ts.{wrap}[{list(self.shape)}, ts.{self.dtype}]"


@dataclass
class Kernel:
    name: str
    params: list[Param]
    body: list

    def source(self) -> str:
        sig = ", ".join(f"{p.name}: {p.annotation()}" for p in self.params)
        lines = ["@ts.kernel", f"def {self.name}({sig}):"]
        for s in self.body:
            lines += s.lines("    ")
        return "\n".join(lines)

    def run(self, args: list[Any], tolerate: frozenset[str]) -> None:
        env = {p.name: a for p, a in zip(self.params, args)}
        env["#tolerate"] = tolerate
        for s in self.body:
            s.run(env)

    def exprs(self):
        def walk(e):
            yield e
            for c in e.children():
                yield from walk(c)

        def stmts(body):
            for s in body:
                if isinstance(s, Loop):
                    yield from stmts(s.body)
                else:
                    yield from walk(s.value)

        return stmts(self.body)


# ------------------------------------------------------------------------------------------------
# Orchestration statements


@dataclass
class Rng:
    """A slice ``start:start + size`` of one dim; ``var`` is a loop variable added to ``start``."""

    var: str | None
    start: int
    size: int

    def render(self) -> str:
        lo = (
            self.var
            if self.var and self.start == 0
            else (f"{self.var} + {self.start}" if self.var else str(self.start))
        )
        return f"{lo}:{lo} + {self.size}" if self.var else f"{self.start}:{self.start + self.size}"

    def bounds(self, env) -> tuple[int, int]:
        lo = self.start + (env[self.var] if self.var else 0)
        return lo, lo + self.size


@dataclass
class TArg:
    """A tensor argument: ``tensor[rows, cols]``, or ``tensor[lead, rows, cols]`` (an integer
    index that drops the leading dim of a 3-D tensor)."""

    tensor: str
    rows: Rng | None = None
    cols: Rng | None = None
    lead: int | None = None

    def render(self) -> str:
        if self.rows is None and self.cols is None and self.lead is None:
            return self.tensor
        r = self.rows.render() if self.rows else ":"
        c = self.cols.render() if self.cols else ":"
        lead = "" if self.lead is None else f"{self.lead}, "
        return f"{self.tensor}[{lead}{r}, {c}]"

    def view(self, env):
        v, e = env[self.tensor]
        if self.lead is not None:
            v, e = v[self.lead], e[self.lead]
        if self.rows:
            a, b = self.rows.bounds(env)
            v, e = v[a:b], e[a:b]
        if self.cols:
            a, b = self.cols.bounds(env)
            v, e = v[:, a:b], e[:, a:b]
        return v, e


@dataclass
class SArg:
    name: str

    def render(self) -> str:
        return self.name

    def view(self, env):
        return env[self.name]


@dataclass
class Call:
    kernel: Kernel
    args: list
    handle: str | None = None  # `h = k(...)` / `h = ts.submit(...)`
    deps: list[str] = field(default_factory=list)
    name: str | None = None  # ts.submit(..., name=)

    def lines(self, ind: str) -> list[str]:
        args = ", ".join(a.render() for a in self.args)
        lhs = f"{self.handle} = " if self.handle else ""
        if self.deps or self.name:
            extra = ""
            if self.name:
                extra += f", name={self.name!r}"
            if self.deps:
                extra += f", deps=[{', '.join(self.deps)}]"
            return [f"{ind}{lhs}ts.submit({self.kernel.name}, {args}{extra})"]
        return [f"{ind}{lhs}{self.kernel.name}({args})"]

    def run(self, env):
        task = env["#tasks"]
        env["#tasks"] = task + 1
        for d in self.deps:
            env["#explicit"].append((env[d], task))
        self.kernel.run([a.view(env) for a in self.args], env["#tolerate"])
        if self.handle:
            env[self.handle] = task


@dataclass
class Create:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def lines(self, ind: str) -> list[str]:
        return [f"{ind}{self.name} = ts.create_tensor({list(self.shape)}, ts.{self.dtype})"]

    def run(self, env):
        v = torch.zeros(self.shape, dtype=TORCH[self.dtype])
        env[self.name] = (v, _zero_err(v))


@dataclass
class Rebind:
    """``a, b = x, y`` of tensor variables (a ping-pong swap is ``src, dst = dst, src``)."""

    targets: tuple[str, ...]
    values: tuple[str, ...]

    def lines(self, ind: str) -> list[str]:
        return [f"{ind}{', '.join(self.targets)} = {', '.join(self.values)}"]

    def run(self, env):
        vals = [env[v] for v in self.values]
        for t, v in zip(self.targets, vals):
            env[t] = v


@dataclass
class OLoop(Loop):
    pass


@dataclass
class OIf:
    """``if var % 2 == 0: ... else: ...``, a run-time branch on a loop index."""

    var: str
    then: list
    orelse: list

    def lines(self, ind: str) -> list[str]:
        out = [f"{ind}if {self.var} % 2 == 0:"]
        for s in self.then:
            out += s.lines(ind + "    ")
        out.append(f"{ind}else:")
        for s in self.orelse:
            out += s.lines(ind + "    ")
        return out

    def run(self, env):
        for s in self.then if env[self.var] % 2 == 0 else self.orelse:
            s.run(env)


# ------------------------------------------------------------------------------------------------
# A whole program


@dataclass
class FuzzProgram:
    name: str
    params: list[Param]
    kernels: list[Kernel]
    body: list
    data_seed: int
    scalar_value: float
    features: set[str] = field(default_factory=set)
    count_value: int = 0  # the i32 scalar ``n`` (run-time valid= counts)

    def __repr__(self) -> str:  # what hypothesis prints as the falsifying example
        return (
            f"<FuzzProgram (data seed {self.data_seed}, s={self.scalar_value!r}, n={self.count_value}):"
            f"\n{self.source()}>"
        )

    def source(self) -> str:
        parts = ["import tilescope as ts", ""]
        for k in self.kernels:
            parts += ["", k.source(), ""]
        sig = ", ".join(f"{p.name}: {p.annotation()}" for p in self.params)
        lines = ["@ts.jit", f"def {self.name}({sig}):"]
        for s in self.body:
            lines += s.lines("    ")
        parts += ["", "\n".join(lines), ""]
        return "\n".join(parts)

    def evaluate(
        self, args: list[Any], tolerate: frozenset[str] = frozenset()
    ) -> tuple[list[Any], list[torch.Tensor | None], dict]:
        """Run the model on copies of ``args``: (outputs, error bounds, info) where outputs and
        bounds follow ``params`` (None for scalars) and info has ``tasks`` and ``explicit``
        (pairs (dep task, task) of every ``deps=``). ``tolerate``: known bugs (KNOWN_BUGS) the
        bounds allow for."""
        env: dict[str, Any] = {"#tasks": 0, "#explicit": [], "#tolerate": tolerate}
        vals: list[Any] = []
        for p, a in zip(self.params, args):
            if p.kind == "scalar":
                v = int(a) if p.dtype == I32 else float(torch.tensor(a, dtype=TORCH[p.dtype]).item())
                env[p.name] = Val(v, _zero_err(v))
                vals.append(None)
            else:
                v = a.clone()
                env[p.name] = (v, _zero_err(v))
                vals.append(env[p.name])
        for s in self.body:
            s.run(env)
        outs = [None if x is None else x[0] for x in vals]
        errs = [None if x is None else x[1] for x in vals]
        return outs, errs, {"tasks": env["#tasks"], "explicit": env["#explicit"]}


def stores(body):
    for s in body:
        if isinstance(s, Loop):
            yield from stores(s.body)
        elif isinstance(s, Store):
            yield s
