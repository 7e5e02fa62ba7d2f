"""Float conversions that round as the tile library's casts do (tile_cast.hpp): narrowing a
float with an IEEE rounding direction, and float -> integer with a rounding mode and saturation.
The interpreter and the precision bounds use them; sim and interp agree on them bit for bit.
"""

from __future__ import annotations

import math

import torch

from tilescope.ir import dtypes as dt

_PAST_MAX = {torch.bfloat16: 2.0**128, torch.float16: 2.0**16, torch.float32: 2.0**128}
_EXACT_IN = {  # the float dtypes every value of which ``to`` holds exactly: nothing to round
    torch.float64: (torch.float32, torch.float16, torch.bfloat16),
    torch.float32: (torch.float16, torch.bfloat16),
}


def narrow_float(x: torch.Tensor, to: torch.dtype, mode: str) -> torch.Tensor:
    """Float tensor ``x`` as float dtype ``to``, rounded with ``mode`` as the tile library's cast
    does (IEEE 754's rounding directions; ``round`` is to nearest, ties away from zero).

    The nearest-even conversion gives one of x's two neighbours in ``to``; the other is one
    step away (on the bits of bf16/f16). Distances are exact in float64.
    """
    r = x.to(to)
    if mode == "rint" or x.dtype == to or x.dtype in _EXACT_IN.get(to, ()):
        return r
    xd, rd = x.to(torch.float64), r.to(torch.float64)
    down = torch.where(rd > xd, _step(r, up=False), r)
    up = torch.where(rd < xd, _step(r, up=True), r)
    if mode == "floor":
        return down
    if mode == "ceil":
        return up
    if mode == "trunc":
        return torch.where(xd < 0, up, down)
    finite = torch.isfinite(xd)
    lo, hi = down.to(torch.float64), up.to(torch.float64)
    lo = torch.where(finite & torch.isinf(lo), -_PAST_MAX[to], lo)
    hi = torch.where(finite & torch.isinf(hi), _PAST_MAX[to], hi)
    below, above = xd - lo, hi - xd
    tie = torch.where(xd > 0, up, down)  # NOTE: NaN lands here too, with down == up == r
    return torch.where(below < above, down, torch.where(above < below, up, tie))


def _step(r: torch.Tensor, up: bool) -> torch.Tensor:
    """Each value's neighbour toward +Inf (``up``) or -Inf; +-0 steps to the smallest subnormal."""
    if r.dtype in (torch.bfloat16, torch.float16):
        b = r.view(torch.int16).to(torch.int32) & 0xFFFF
        negative = (b & 0x8000) != 0
        stepped = torch.where(negative != up, b + 1, b - 1)  # +1: the magnitude grows
        stepped = torch.where((b & 0x7FFF) == 0, 0x0001 if up else 0x8001, stepped)
        return torch.where(stepped >= 0x8000, stepped - 0x10000, stepped).to(torch.int16).view(r.dtype)
    return torch.nextafter(r, torch.full_like(r, math.inf if up else -math.inf))


def float_to_int(x: torch.Tensor, to: dt.DType, mode: str) -> torch.Tensor:
    """Round with ``mode`` and saturate to ``to``'s range, as the tile library's cast does.

    NOTE: done in float64, where every float32/bf16/f16 value, ``x + 0.5`` and the integer
    bounds up to 2**53 are exact: in the input dtype ``0.49999997 + 0.5`` rounds up to 1 and
    int32's max rounds to 2**31, which then overflows.
    """
    v = x.to(torch.float64)
    v = {
        "rint": torch.round,
        "round": lambda t: torch.sign(t) * torch.floor(torch.abs(t) + 0.5),
        "floor": torch.floor,
        "ceil": torch.ceil,
        "trunc": torch.trunc,
    }[mode](v)
    info = torch.iinfo(to.torch)
    limit = float(info.max) + 1.0  # 2**(bits-1) or 2**bits: exact in float64
    v = torch.nan_to_num(v, nan=0.0, posinf=limit, neginf=float(info.min))
    too_big = v >= limit
    # the largest float64 below ``limit`` truncates to info.max (2**63 - 1 is not a float64)
    out = v.clamp(float(info.min), math.nextafter(limit, 0.0)).to(to.torch)
    return torch.where(too_big, torch.tensor(info.max, dtype=to.torch), out)
