"""How the interpreter computes each unary op of the registry: torch's function, routed through
f32 or float64 where torch's own rounds differently from the tile library, or a function of the
interpreter's own (``OpDef.interp``); and the ops it computes in float64 as the tile library
does (scans, logsumexp), which the localize bounds and the tests' fuzz model call too.

Invariants: each op rounds as the tile library's does on every CPU (AVX2 and AVX-512 alike); a
bf16/f16 op is computed in f32 and rounded once.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tilescope.ir.op_registry import OPS, torch_reference


def _sqrt(x: torch.Tensor) -> torch.Tensor:
    """sqrt correctly rounded, as the tile library's: torch's f32 CPU sqrt is up to 0.75 ulp off
    (for about 17% of inputs), so f32 goes through float64, where one rounding to f32 is exact."""
    return torch.sqrt(x.double()).float() if x.dtype == torch.float32 else torch.sqrt(x)


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    """1 / sqrt(x) in two correctly rounded steps, as the tile library computes it (torch's CPU
    rsqrt uses another approximation)."""
    return torch.div(1.0, _sqrt(x)) if x.dtype == torch.float32 else torch.rsqrt(x)


def _through_f32(fn):
    """``fn`` for bf16/f16 computed in f32 and rounded once, as the tile library computes it:
    torch's own bf16/f16 CPU erf is off by up to ~3e-7 absolute near 0 (erf(1e-7) = 0 in bf16,
    erf(1e-5) 2.5% high), and some of its bf16 functions flush results below 2^-126 to zero."""

    def op(x: torch.Tensor) -> torch.Tensor:
        return fn(x.float()).to(x.dtype) if x.dtype in (torch.bfloat16, torch.float16) else fn(x)

    return op


def _through_f64(fn):
    """``fn`` computed in float64 and rounded once to f32 (then to bf16/f16), as the tile library
    computes it. torch's own f32 functions round differently on each CPU (its AVX-512 and AVX2
    erf disagree in the last bit for ~3% of inputs, and oneDNN's AVX2 gelu gives +0 for -0); its
    float64 erf, erfc, softplus and log1p give the same bits on every CPU."""

    def op(x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            return fn(x)
        return fn(x.double()).float().to(x.dtype)

    return op


def _gelu(x: torch.Tensor) -> torch.Tensor:
    """x/2 erfc(-x / sqrt2): torch's exact GELU without its 1 + erf cancellation for x < 0 (the
    tile library's form). Clamped at -40, where the result is far below the float subnormals,
    so that gelu(-Inf) is -0 rather than -Inf * 0 = NaN."""
    xd = x.clamp(min=-40.0)
    return 0.5 * xd * torch.special.erfc(xd * -0.70710678118654752440)


_SELU_SCALE, _SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717


def _expm1(x: torch.Tensor) -> torch.Tensor:
    return torch.expm1(x)


def _elu(x: torch.Tensor) -> torch.Tensor:
    """x for x >= 0 (-0 kept), else expm1(x): torch's ELU takes exp(x) - 1, which cancels near 0."""
    return torch.where(x >= 0, x, torch.expm1(x))


def _selu(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, _SELU_SCALE * x, (_SELU_SCALE * _SELU_ALPHA) * torch.expm1(x))


def _hardsigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def _hardswish(x: torch.Tensor) -> torch.Tensor:
    """-0 for x <= -3 (the limit at -inf too, where torch's formula gives NaN)."""
    return torch.where(x <= -3.0, torch.tensor(-0.0, dtype=x.dtype), x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0)


def _softplus_wide(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): nothing cancels."""
    return torch.clamp(x, min=0.0) + torch.log1p(torch.exp(-x.abs()))


def _mish(x: torch.Tensor) -> torch.Tensor:
    """x tanh(softplus(x)), tanh(s) as m / (m + 2) with m = expm1(2s); mish(-inf) = -0, the limit
    (torch's formula gives NaN)."""
    m = torch.expm1(2.0 * _softplus_wide(x))
    r = x * torch.where(torch.isinf(m), torch.ones_like(m), m / (m + 2.0))
    return torch.where(x == -math.inf, torch.tensor(-0.0, dtype=x.dtype), r)


def _softsign(x: torch.Tensor) -> torch.Tensor:
    """x / (1 + |x|); +-1 at +-inf (the limits, where torch's formula gives NaN)."""
    return torch.where(torch.isinf(x), torch.sign(x), x / (1.0 + x.abs()))


def _logsigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, max=0.0) - torch.log1p(torch.exp(-x.abs()))


# the registry's interp="own" ops: those of the tile library's formulas not torch's own are
# computed in float64 and rounded once, as the tile library computes them
_OWN = {
    "sqrt": _sqrt, "rsqrt": _rsqrt, "gelu": _through_f64(_gelu), "expm1": _through_f64(_expm1),
    "elu": _through_f64(_elu), "selu": _through_f64(_selu), "hardsigmoid": _through_f64(_hardsigmoid),
    "hardswish": _through_f64(_hardswish), "mish": _through_f64(_mish), "softsign": _through_f64(_softsign),
    "logsigmoid": _through_f64(_logsigmoid),
}  # fmt: skip
_ROUTES = {"torch": lambda fn: fn, "f32": _through_f32, "f64": _through_f64}


def unary_fn(op: str) -> Any:
    """The torch function the interpreter computes the registry unary op ``op`` with."""
    d = OPS[op]
    if d.interp == "own":
        return _OWN[op]
    return _ROUTES[d.interp](torch_reference(d))


def _from_f64(run: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float64 (int64) result as the tile library rounds it: to f32 first for bf16/f16 tiles."""
    return run.to(torch.float32).to(dtype) if dtype in (torch.bfloat16, torch.float16) else run.to(dtype)


def logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``ts.row_logsumexp``/``col_logsumexp`` as the tile library computes it: in float64 around the
    maximum (torch's), rounded as ``_from_f64``."""
    return _from_f64(torch.logsumexp(x.double(), dim=dim, keepdim=True), x.dtype)


def scan(x: torch.Tensor, op: str, dim: int, reverse: bool, exclusive: bool) -> torch.Tensor:
    """``ts.cumsum``/``ts.cumprod`` of a tile as the tile library computes it: one running value
    along ``dim`` in float64 (floats; as torch's CPU f32 cumsum) or int64 (integers, wrapped to the
    tile's dtype), each output rounded to f32 and then to the tile's dtype; ``exclusive`` takes
    the value before the element (0 or 1 first), ``reverse`` runs from the end."""
    if reverse:
        x = x.flip(dim)
    run = getattr(torch, op)(x.to(torch.float64 if x.is_floating_point() else torch.int64), dim=dim)
    if exclusive:
        first = torch.zeros_like(run.narrow(dim, 0, 1)) + (1 if op == "cumprod" else 0)
        run = torch.cat([first, run.narrow(dim, 0, run.shape[dim] - 1)], dim=dim)
    out = _from_f64(run, x.dtype)
    return out.flip(dim) if reverse else out
