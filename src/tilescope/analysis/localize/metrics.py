"""How far one tensor is from another: what the harness's comparison and localize's fingerprint
and evidence count (one definition of a match and of the abs and rel diffs)."""

from __future__ import annotations

import math

import torch


def close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """``torch.isclose`` in float64 with NaN equal to NaN (what the harness's comparison counts as a match)."""
    return torch.isclose(a.to(torch.float64), b.to(torch.float64), rtol=rtol, atol=atol, equal_nan=True)


def diffs(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise abs and rel diff of ``a`` against ``b`` (float64; equal values, equal infinities
    and NaN against NaN differ by 0; a NaN or an infinity against anything else by inf)."""
    x, y = a.to(torch.float64), b.to(torch.float64)
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    diff = torch.where(same, torch.zeros_like(x), (x - y).abs().nan_to_num(nan=math.inf, posinf=math.inf))
    rel = torch.where(same, torch.zeros_like(x), diff / y.abs().clamp_min(torch.finfo(torch.float64).tiny))
    return diff, rel.nan_to_num(nan=math.inf, posinf=math.inf)


def summary(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> tuple[int, float, float]:
    """(elements outside rtol/atol, max abs diff, max rel diff) of ``a`` against ``b``."""
    if a.numel() == 0:
        return 0, 0.0, 0.0
    diff, rel = diffs(a, b)
    return int((~close(a, b, rtol, atol)).sum()), float(diff.max()), float(rel.max())


def coords(flat: int, shape: torch.Size) -> tuple[int, ...]:
    """The N-d index of flat index ``flat`` in ``shape``."""
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)) if len(shape) else ()


def number(x: float) -> str:
    """A number as the evidence quotes it: 4 significant digits."""
    return f"{x:.4g}"


__all__ = ["close", "coords", "diffs", "number", "summary"]
