"""Where a tile is among the golden's values: every window of every golden value (of the trace
``golden_trace`` records) that holds the tile's values, within the tile's error bound and the
data's tolerances, through the layouts a kernel sees a tensor in.

A golden value of shape ``[..., M]`` is searched as the matrix ``[numel / M, M]`` (row after
row of its leading dims; a 1-D value also as a column, a value of 3 or more dims also with its
last two dims as one), and a tile is searched as itself, transposed, and, when all its columns
(rows) are equal, as one column (row): a broadcast of a row (column) statistic. A window may
run past the value's last row or column when the tile's part outside is one constant (a masked
load's fill), provided at least half the tile is inside.

The search is anchored: the golden value's elements are sorted once, the tile's largest finite
element is looked up in them (a range of the sorted values, by its tolerance), and only the
windows that place that element on a hit are compared in full.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

_MAX_HITS = 128  # windows compared in full for the anchor


@dataclass(frozen=True)
class Window:
    """A golden value's window a tile matches: the value, how it is laid out (``cols``: its
    matrix's row length), the window's origin in that matrix, and whether the tile matched
    transposed or as one broadcast column/row."""

    value: int  # the golden value's index in its trace
    cols: int
    row: int
    col: int
    rows_n: int
    cols_n: int
    transposed: bool = False

    def text(self, shape: tuple[int, ...]) -> str:
        """``[32:64, 0:128]`` in the golden value's own index space when the layout is its own."""
        if len(shape) >= 1 and shape[-1] == self.cols:
            lead = self.row
            idx = []
            for n in reversed(shape[:-1]):
                lead, r = divmod(lead, n)
                idx.append(r)
            starts = list(reversed(idx)) + [self.col]
            ext = [1] * (len(shape) - 2) + [self.rows_n, self.cols_n] if len(shape) >= 2 else [self.cols_n]
            return "[" + ", ".join(f"{s}:{s + n}" if n > 1 else f"{s}" for s, n in zip(starts, ext)) + "]"
        return f"[rows {self.row}:{self.row + self.rows_n}, cols {self.col}:{self.col + self.cols_n}]"


class GoldenIndex:
    """The golden values of a trace, sorted once, for finding where tiles are among them."""

    def __init__(self, values: dict[int, torch.Tensor], rtol: float, atol: float):
        self.rtol, self.atol = max(rtol, 1e-5), atol
        self.values: dict[int, torch.Tensor] = {}
        self.flat: dict[int, torch.Tensor] = {}  # each value flattened, in float64 (converted once)
        self.flat_np: dict[int, np.ndarray] = {}  # the same memory, for the anchored search's small steps
        self.sorted: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.sorted_np: dict[int, np.ndarray] = {}
        self.scale: dict[int, float] = {}
        for i, v in values.items():
            if v is None or v.numel() == 0 or v.dtype == torch.bool or v.is_complex():
                continue
            flat = v.detach().reshape(-1).to(torch.float64)
            self.values[i], self.flat[i] = v, flat
            self.flat_np[i] = flat.numpy()
            s, order = torch.sort(flat.nan_to_num(nan=float("inf")))
            self.sorted[i] = (s, order)
            self.sorted_np[i] = s.numpy()
            finite = flat[torch.isfinite(flat)]
            self.scale[i] = float(finite.abs().max()) if finite.numel() else 0.0

    def find(self, v: torch.Tensor, e: torch.Tensor, only: set[int] | None = None, first: bool = False) -> list[Window]:
        """Every window of the golden values (``only``: of these) holding the tile ``v`` (within
        its bound ``e``); with ``first``, stop at the first value that holds it."""
        if v.dtype == torch.bool or v.numel() == 0:
            return []
        v2 = v.reshape(1, -1) if v.dim() <= 1 else v.reshape(-1, v.shape[-1])
        e2 = e.reshape(v2.shape) if e.numel() == v2.numel() else e.expand(v2.shape) if e.dim() == 0 else e.reshape(v2.shape)
        if v2.numel() > 1 and bool((v2 == v2.reshape(-1)[0]).all()):
            return []  # one value repeated: no evidence of where it is
        forms = [(v2, e2, False)]
        if v2.shape != v2.t().shape or v2.shape[0] > 1:
            forms.append((v2.t(), e2.t(), True))
        if v2.shape[1] > 1 and v2.shape[0] > 1 and bool((v2 == v2[:, :1]).all()):
            forms.append((v2[:, :1], e2[:, :1], False))
        if v2.shape[0] > 1 and v2.shape[1] > 1 and bool((v2 == v2[:1, :]).all()):
            forms.append((v2[:1, :], e2[:1, :], False))
        out: list[Window] = []
        for i in self.values:
            if only is not None and i not in only:
                continue
            for tv, te, transposed in forms:
                w = self._in(i, tv, te, transposed)
                if w is not None:
                    out.append(w)
                    break
            if first and out:
                break
        return out

    def _layouts(self, i: int) -> list[int]:
        shape = self.values[i].shape
        if len(shape) == 0:
            return [1]
        out = [shape[-1]]
        if len(shape) == 1:
            out.append(1)
        if len(shape) >= 3:
            out.append(shape[-1] * shape[-2])
        return out

    def _in(self, i: int, tv: torch.Tensor, te: torch.Tensor, transposed: bool) -> Window | None:
        r, c = tv.shape
        vals = tv.to(torch.float64)
        finite = torch.isfinite(vals)
        if not bool(finite.any()):
            return None
        _, order = self.sorted[i]
        s = self.sorted_np[i]
        best = None
        anchors = _anchor_candidates(vals, finite)
        # NOTE: numpy for the per-anchor scalar steps (float64 as torch's: the same bounds), at a
        # tenth of torch's dispatch cost: a tile is searched in every value of the trace
        v_np, e_np = vals.numpy(), te.to(torch.float64).numpy()
        for p in anchors:
            pi, pj = divmod(p, c)
            a = float(v_np[pi, pj])
            tol = float(e_np[pi, pj]) + self._tol(i, abs(a))
            lo = int(np.searchsorted(s, a - tol, side="left"))
            hi = int(np.searchsorted(s, a + tol, side="right"))
            if hi <= lo:
                return None  # an element the value does not hold anywhere
            if best is None or hi - lo < best[0]:
                best = (hi - lo, lo, hi, pi, pj)
        _, lo, hi, pi, pj = best
        if r * c == 1 and hi - lo > 4:
            return None  # one common value: no evidence of where it is
        hits = order[lo : min(hi, lo + _MAX_HITS)]
        flat = self.flat[i]
        for cols in self._layouts(i):
            rows = flat.numel() // cols
            g = flat.reshape(rows, cols)
            tried: set[tuple[int, int]] = set()
            for k in self._plausible(i, flat, hits, cols, (pi, pj), anchors, vals, te):
                hr, hc = divmod(k, cols)
                r0, c0 = hr - pi, hc - pj
                if (r0, c0) in tried:
                    continue
                tried.add((r0, c0))
                rr, cc = min(r, rows - r0), min(c, cols - c0)
                if rr <= 0 or cc <= 0 or 2 * rr * cc < r * c:
                    continue
                if (rr, cc) != (r, c) and not _constant_outside(vals, rr, cc):
                    continue
                window = g[r0 : r0 + rr, c0 : c0 + cc]
                if _close(vals[:rr, :cc], te[:rr, :cc], window, self._tol_t(i, window)):
                    return Window(i, cols, r0, c0, rr, cc, transposed)
        return None

    def _plausible(self, i: int, flat: torch.Tensor, hits: torch.Tensor, cols: int, at: tuple[int, int],
                   anchors: list[int], vals: torch.Tensor, te: torch.Tensor) -> list[int]:  # fmt: skip
        """The hits (flat golden positions of the tile's element ``at``) whose window also holds the
        tile's other anchor elements where it covers them: all of them at once, so that a value
        held many times (bf16's few values) is not compared window by window."""
        c = vals.shape[1]
        g = self.flat_np[i]
        h = hits.numpy()
        v_np, e_np = vals.numpy(), te.to(torch.float64).numpy()
        r0, c0 = h // cols - at[0], h % cols - at[1]
        keep = (r0 >= 0) & (c0 >= 0)
        rows = g.size // cols
        floor = self.atol, self.rtol, 1e-6 * self.scale[i]
        for p in anchors:
            qi, qj = divmod(p, c)
            inside = keep & (r0 + qi < rows) & (c0 + qj < cols)
            got = g[np.clip((r0 + qi) * cols + c0 + qj, 0, g.size - 1)]
            a, e = float(v_np[qi, qj]), float(e_np[qi, qj])
            if not math.isfinite(e):
                near = np.zeros_like(keep)
            else:
                tol = floor[0] + floor[1] * np.nan_to_num(np.abs(got), posinf=0.0, neginf=0.0) + floor[2]
                near = np.abs(got - a) <= e * (1 + 1e-9) + tol
            keep &= ~inside | (got == a) | near
        return h[keep].tolist()

    def _tol(self, i: int, mag: float) -> float:
        return self.atol + self.rtol * mag + 1e-6 * self.scale[i]

    def _tol_t(self, i: int, g: torch.Tensor) -> torch.Tensor:
        return self.atol + self.rtol * g.abs().nan_to_num(posinf=0.0, neginf=0.0) + 1e-6 * self.scale[i]


def _anchor_candidates(vals: torch.Tensor, finite: torch.Tensor) -> list[int]:
    """Flat positions of a few finite elements to anchor on: the largest in magnitude and those
    at a few high ranks of magnitude (a value's largest elements are its rarest; the one a golden
    value holds fewest times is used), and the smallest."""
    flat = torch.where(finite, vals.abs(), torch.full_like(vals, -1.0)).reshape(-1)
    order = flat.argsort(descending=True)
    n = int(finite.sum())
    ranks = sorted({0, *(int(n * q) for q in (0.01, 0.05, 0.2, 0.5)), n - 1})
    return list(dict.fromkeys(int(order[k]) for k in ranks if k < n))


def _constant_outside(v: torch.Tensor, rr: int, cc: int) -> bool:
    outside = torch.ones_like(v, dtype=torch.bool)
    outside[:rr, :cc] = False
    rest = v[outside]
    return rest.numel() == 0 or bool((rest == rest[0]).all()) or bool(torch.isnan(rest).all())


def _close(v: torch.Tensor, e: torch.Tensor, g: torch.Tensor, tol: torch.Tensor) -> bool:
    same = (v == g) | (torch.isnan(v) & torch.isnan(g))
    # NOTE: an infinite bound (an overflow, a division by what the dtypes cannot tell from 0) holds anything: no evidence
    near = ((v - g).abs() <= e * (1 + 1e-9) + tol) & torch.isfinite(e)
    return bool((same | near).all())


def tile_close(v: torch.Tensor, e: torch.Tensor, g: torch.Tensor, rtol: float, atol: float) -> bool:
    """Whether the tile ``v`` (bound ``e``) holds ``g``'s values, within the tolerances."""
    g = g.to(torch.float64).reshape(v.shape)
    return _close(v.to(torch.float64), e.expand(v.shape), g, atol + max(rtol, 1e-5) * g.abs().nan_to_num(posinf=0.0, neginf=0.0))


__all__ = ["GoldenIndex", "Window", "tile_close"]
