"""Casts between floats honour ``mode``: f32 -> bf16/f16 with rint, round, floor, ceil and trunc,
bit-exact on sim and interp against an independent reference, on every tie pattern.

The reference knows nothing of the implementations: it sorts every finite value of the target
dtype and takes, for each input's magnitude, the values at or below and at or above it (float64
holds every f32 and every midpoint exactly), then applies IEEE 754's rule for each direction
(ties to even for rint, away from zero for round; past the largest finite value, the next power
of two stands in for Inf). The inputs are every f32 whose bits sit next to a rounding boundary of
the target: for bf16, every upper half with the lower halves 0, 1, 0x7FFF, 0x8000, 0x8001 and
0xFFFF; for f16, every f16 value, the midpoint to its successor and the f32 values just around
both; and their negatives.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilescope as ts
from tilescope.runtime.casts import narrow_float

MODES = ("rint", "round", "floor", "ceil", "trunc")
COLS = 512
ROWS = 8
PAST_MAX = {"bf16": 2.0**128, "f16": 2.0**16}
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16}


def positive_grid(target: str) -> tuple[np.ndarray, np.ndarray]:
    """Every finite non-negative value of ``target`` as float64, ascending, and its bits."""
    bits = np.arange(0, 0x7C00 if target == "f16" else 0x7F80, dtype=np.int32)  # below +Inf
    values = torch.from_numpy(bits.astype(np.int16)).view(TORCH[target]).to(torch.float64).numpy()
    return values, bits


def reference_bits(x: np.ndarray, target: str, mode: str) -> np.ndarray:
    """The bits of ``x`` (finite float32) rounded to ``target`` with ``mode``, by IEEE 754."""
    grid, grid_bits = positive_grid(target)
    a = np.abs(x.astype(np.float64))
    negative = np.signbit(x)
    i = np.searchsorted(grid, a, side="right") - 1  # grid[i] <= a
    exact = grid[i] == a
    j = np.where(exact, i, i + 1)  # grid[j] >= a, or past the end (Inf)
    beyond = j >= len(grid)
    inf_bits = 0x7C00 if target == "f16" else 0x7F80
    down_bits, up_bits = grid_bits[i], np.where(beyond, inf_bits, grid_bits[np.minimum(j, len(grid) - 1)])
    below = a - grid[i]
    above = np.where(beyond, PAST_MAX[target], grid[np.minimum(j, len(grid) - 1)]) - a
    if mode in ("rint", "round"):  # to nearest; a tie to the even one, or away from zero
        tie_pick = up_bits if mode == "round" else np.where(down_bits % 2 == 0, down_bits, up_bits)
        mag = np.where(below < above, down_bits, np.where(above < below, up_bits, tie_pick))
    elif mode == "trunc":
        mag = down_bits
    else:  # floor and ceil: the magnitude away from zero for negatives (floor) or positives (ceil)
        away = negative if mode == "floor" else ~negative
        mag = np.where(away, up_bits, down_bits)
    return (mag | np.where(negative, 0x8000, 0)).astype(np.int32)


def inputs(target: str) -> np.ndarray:
    """f32 values at and around every rounding boundary of ``target``, both signs (finite)."""
    if target == "bf16":
        highs = np.arange(0, 0x7F80, dtype=np.uint32)
        lows = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
        u = (highs[:, None] << 16 | lows[None, :]).ravel()
        u = u[u < 0x7F800000]
    else:
        grid, _ = positive_grid("f16")
        nxt = np.append(grid[1:], PAST_MAX["f16"])
        mids = ((grid + nxt) / 2).astype(np.float32)  # exact: 12 significant bits
        points = np.concatenate([grid.astype(np.float32), mids, [70000.0, 1e30, 2.0**-26, 2.0**-30]])
        points = points.astype(np.float32)
        u = np.concatenate([points.view(np.uint32).astype(np.int64) + d for d in (0, 1, -1)])
        u = u[(u >= 0) & (u < 0x7F800000)].astype(np.uint32)
    both = np.concatenate([u, u | 0x80000000]).astype(np.uint32)
    return both.view(np.float32)


def as_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().astype(np.int32) & 0xFFFF


@pytest.mark.parametrize("target", ["bf16", "f16"])
def test_interp_rounds_every_tie_pattern_as_ieee_says(target):
    x = inputs(target)
    for mode in MODES:
        got = as_bits(narrow_float(torch.from_numpy(x), TORCH[target], mode))
        want = reference_bits(x, target, mode)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (mode, [(float(x[k]), hex(got[k]), hex(want[k])) for k in bad[:5]])


TOTAL = 800  # rows of COLS: room for either input set
X = ts.Tensor[[TOTAL, COLS], ts.f32]
XT = ts.Tensor[[ROWS, COLS], ts.f32]
B, BT = ts.Out[[TOTAL, COLS], ts.bf16], ts.Out[[ROWS, COLS], ts.bf16]
H, HT = ts.Out[[TOTAL, COLS], ts.f16], ts.Out[[ROWS, COLS], ts.f16]


@ts.kernel
def casts_bf16(x: XT, yr: BT, ya: BT, yf: BT, yc: BT, yt: BT):
    t = ts.load(x, [0, 0], [ROWS, COLS])
    ts.store(yr, [0, 0], ts.cast(t, ts.bf16))
    ts.store(ya, [0, 0], ts.cast(t, ts.bf16, mode="round"))
    ts.store(yf, [0, 0], ts.cast(t, ts.bf16, mode="floor"))
    ts.store(yc, [0, 0], ts.cast(t, ts.bf16, mode="ceil"))
    ts.store(yt, [0, 0], ts.cast(t, ts.bf16, mode="trunc"))


@ts.kernel
def casts_f16(x: XT, yr: HT, ya: HT, yf: HT, yc: HT, yt: HT):
    t = ts.load(x, [0, 0], [ROWS, COLS])
    ts.store(yr, [0, 0], ts.cast(t, ts.f16))
    ts.store(ya, [0, 0], ts.cast(t, ts.f16, mode="round"))
    ts.store(yf, [0, 0], ts.cast(t, ts.f16, mode="floor"))
    ts.store(yc, [0, 0], ts.cast(t, ts.f16, mode="ceil"))
    ts.store(yt, [0, 0], ts.cast(t, ts.f16, mode="trunc"))


@ts.jit
def to_bf16(x: X, yr: B, ya: B, yf: B, yc: B, yt: B):
    for r in ts.range(0, TOTAL, ROWS):
        casts_bf16(x[r : r + ROWS, :], yr[r : r + ROWS, :], ya[r : r + ROWS, :], yf[r : r + ROWS, :],
                   yc[r : r + ROWS, :], yt[r : r + ROWS, :])  # fmt: skip


@ts.jit
def to_f16(x: X, yr: H, ya: H, yf: H, yc: H, yt: H):
    for r in ts.range(0, TOTAL, ROWS):
        casts_f16(x[r : r + ROWS, :], yr[r : r + ROWS, :], ya[r : r + ROWS, :], yf[r : r + ROWS, :],
                  yc[r : r + ROWS, :], yt[r : r + ROWS, :])  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("target", ["bf16", "f16"])
def test_sim_and_interp_round_every_tie_pattern_alike(target):
    x = inputs(target)
    assert len(x) <= TOTAL * COLS
    padded = np.zeros(TOTAL * COLS, dtype=np.float32)
    padded[: len(x)] = x
    prog = (to_bf16 if target == "bf16" else to_f16).compile()
    for platform in ("sim", "interp"):
        outs = [torch.zeros(TOTAL, COLS, dtype=TORCH[target]) for _ in MODES]
        prog.run(torch.from_numpy(padded.reshape(TOTAL, COLS)), *outs, platform=platform)
        for mode, out in zip(MODES, outs):
            got = as_bits(out).ravel()[: len(x)]
            want = reference_bits(x, target, mode)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (platform, mode, [(float(x[k]), hex(got[k]), hex(want[k])) for k in bad[:5]])


def test_infinities_and_nan_pass_through_every_mode():
    x = torch.tensor([float("inf"), -float("inf"), float("nan")])
    for target in TORCH.values():
        for mode in MODES:
            y = narrow_float(x, target, mode).float()
            assert y[0] == float("inf") and y[1] == -float("inf") and torch.isnan(y[2]), (target, mode)


def test_a_mode_on_a_cast_with_nothing_to_round_is_refused():
    @ts.kernel
    def k(x: ts.Tensor[[1, 8], ts.i32], y: ts.Out[[1, 8], ts.f32]):
        ts.store(y, [0, 0], ts.cast(ts.load(x, [0, 0], [1, 8]), ts.f32, mode="floor"))

    @ts.jit
    def p(x: ts.Tensor[[1, 8], ts.i32], y: ts.Out[[1, 8], ts.f32]):
        k(x, y)

    with pytest.raises(ts.VerifyError) as info:
        p.compile()
    message = str(info.value)
    assert (
        "ts.cast: mode='floor' rounds a float to an integer or to a narrower float; a ts.i32 tile cast to ts.f32 "
        "has no such rounding (it converts as torch does)"
    ) in message
    assert "hint: drop mode=" in message


@ts.kernel
def casts_f64(x: ts.Tensor[[4, 256], ts.f64], yf: ts.Out[[4, 256], ts.f32], yb: ts.Out[[4, 256], ts.bf16]):
    t = ts.load(x, [0, 0], [4, 256])
    ts.store(yf, [0, 0], ts.cast(t, ts.f32, mode="floor"))
    ts.store(yb, [0, 0], ts.cast(t, ts.bf16, mode="round"))


@ts.jit
def from_f64(x: ts.Tensor[[4, 256], ts.f64], yf: ts.Out[[4, 256], ts.f32], yb: ts.Out[[4, 256], ts.bf16]):
    casts_f64(x, yf, yb)


@pytest.mark.slow
def test_f64_sources_round_alike_on_sim_and_interp():
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(256) * 10.0 ** rng.integers(-30, 30, 256)).astype(np.float32)
    mid = (a.astype(np.float64) + np.nextafter(a, np.float32(np.inf)).astype(np.float64)) / 2  # f32 ties
    x = np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), -mid]).reshape(4, 256)
    results = {}
    for platform in ("sim", "interp"):
        yf, yb = torch.zeros(4, 256), torch.zeros(4, 256, dtype=torch.bfloat16)
        from_f64(torch.from_numpy(x), yf, yb, platform=platform)
        results[platform] = (yf.view(torch.int32).clone(), yb.view(torch.int16).clone())
    assert torch.equal(results["sim"][0], results["interp"][0])
    assert torch.equal(results["sim"][1], results["interp"][1])
    floor = results["sim"][0].view(torch.float32).numpy().reshape(-1).astype(np.float64)
    xs = x.reshape(-1)
    assert (floor <= xs).all() and (np.nextafter(floor.astype(np.float32), np.float32(np.inf)) > xs).all()


@ts.kernel
def widen(x: ts.Tensor[[1, 8], ts.f32], y: ts.Out[[1, 8], ts.f64]):
    ts.store(y, [0, 0], ts.cast(ts.load(x, [0, 0], [1, 8]), ts.f64, mode="round"))


@ts.jit
def widening(x: ts.Tensor[[1, 8], ts.f32], y: ts.Out[[1, 8], ts.f64]):
    widen(x, y)


@pytest.mark.slow
def test_a_mode_on_a_widening_cast_changes_nothing_on_either_platform():
    x = torch.tensor([[1.5, -2.25, 3e38, -1e-45, 0.0, -0.0, 7.0, 1 / 3]])
    for platform in ("sim", "interp"):
        y = torch.zeros(1, 8, dtype=torch.float64)
        widening(x, y, platform=platform)
        assert torch.equal(y, x.double()) and torch.equal(y.signbit(), x.signbit()), platform
