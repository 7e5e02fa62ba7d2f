"""How the interpreter computes each unary op of the registry: torch's function, routed through
f32 or float64 where torch's own rounds differently from the tile library, or a function of the
interpreter's own (``OpDef.interp``).

Invariants: each op rounds as the tile library's does on every CPU (AVX2 and AVX-512 alike); a
bf16/f16 op is computed in f32 and rounded once.
"""

from __future__ import annotations

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


_OWN = {"sqrt": _sqrt, "rsqrt": _rsqrt, "gelu": _through_f64(_gelu)}  # the registry's interp="own" ops
_ROUTES = {"torch": lambda fn: fn, "f32": _through_f32, "f64": _through_f64}


def unary_fn(op: str) -> Any:
    """The torch function the interpreter computes the registry unary op ``op`` with."""
    d = OPS[op]
    if d.interp == "own":
        return _OWN[op]
    return _ROUTES[d.interp](torch_reference(d))
