"""The access forms run the same on sim and interp: a tile over any two dims of an N-d tensor,
strided loads and stores, padded loads, a 1-D tensor as a column, 0-dim tensors, tensors of 5
to 8 dims, and ts.rand; checked builds name a strided access's span."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilescope as ts
from tilescope.runtime.philox import philox, philox_uniform

pytestmark = pytest.mark.slow  # g++ builds

PLATFORMS = ["sim", "interp"]


@pytest.fixture(scope="module")
def _module_builds(tmp_path_factory):
    return tmp_path_factory.mktemp("access_runs")


@pytest.fixture(autouse=True)
def _isolated_build_dir(_module_builds, monkeypatch):
    """One build directory for the module: its @ts.jit programs compile once and are called by
    several tests (conftest's own fixture gives each test a directory removed when it passes)."""
    monkeypatch.setenv("TILESCOPE_BUILD_DIR", str(_module_builds / "build_output"))
N, C, H, W = 2, 3, 5, 6


@ts.kernel
def nchw_to_nhcw(x: ts.Tensor[[N, C, H, W], ts.f32], y: ts.Out[[N, H, C, W], ts.f32]):
    for n in ts.range(0, N, 1):
        for h in ts.range(0, H, 1):
            ts.store(y, [n, h, 0, 0], ts.load(x, [n, 0, h, 0], [1, C, 1, W]))


@ts.jit
def permute(x: ts.Tensor[[N, C, H, W], ts.f32], y: ts.Out[[N, H, C, W], ts.f32]):
    nchw_to_nhcw(x, y)


@ts.kernel
def col_of(x: ts.Tensor[[N, C, H, W], ts.f32], y: ts.Out[[N, W, C, H], ts.f32]):
    for n in ts.range(0, N, 1):
        for w in ts.range(0, W, 1):
            t = ts.load(x, [n, 0, 0, w], [1, C, H, 1], dims=[1, 2])  # x[n, :, :, w]
            ts.store(y, [n, w, 0, 0], t, dims=[2, 3])


@ts.jit
def channels_by_rows(x: ts.Tensor[[N, C, H, W], ts.f32], y: ts.Out[[N, W, C, H], ts.f32]):
    col_of(x, y)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_tile_over_any_two_dims(platform):
    x = torch.randn(N, C, H, W)
    y = torch.empty(N, H, C, W)
    permute(x, y, platform=platform)
    assert torch.equal(y, x.permute(0, 2, 1, 3))
    y2 = torch.empty(N, W, C, H)
    channels_by_rows(x, y2, platform=platform)
    assert torch.equal(y2, x.permute(0, 3, 1, 2))


@ts.kernel
def pool3(x: ts.Tensor[[9, 11], ts.f32], mx: ts.Out[[5, 6], ts.f32], av: ts.Out[[5, 6], ts.f32]):
    m = ts.full([5, 6], float("-inf"), ts.f32)
    s = ts.zeros([5, 6], ts.f32)
    for i in ts.range(0, 3, 1):
        for j in ts.range(0, 3, 1):
            m = ts.maximum(m, ts.load(x, [i - 1, j - 1], [5, 6], pad=float("-inf"), strides=[2, 2]))
            s = s + ts.load(x, [i - 1, j - 1], [5, 6], pad=0.0, strides=[2, 2])
    ts.store(mx, [0, 0], m)
    ts.store(av, [0, 0], s * (1.0 / 9.0))


@ts.jit
def pools(x: ts.Tensor[[9, 11], ts.f32], mx: ts.Out[[5, 6], ts.f32], av: ts.Out[[5, 6], ts.f32]):
    pool3(x, mx, av)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_padded_strided_loads_are_a_pool(platform):
    x = torch.randn(9, 11)
    mx, av = torch.empty(5, 6), torch.empty(5, 6)
    pools(x, mx, av, platform=platform)
    assert torch.equal(mx, F.max_pool2d(x[None, None], 3, stride=2, padding=1)[0, 0])
    assert torch.allclose(av, F.avg_pool2d(x[None, None], 3, stride=2, padding=1)[0, 0], rtol=1e-6, atol=1e-6)


@ts.kernel
def spread(x: ts.Tensor[[3, 4], ts.f32], y: ts.InOut[[7, 8], ts.f32]):
    ts.store(y, [1, 1], ts.load(x, [0, 0], [3, 4]), strides=[2, 2])


@ts.jit
def upsample(x: ts.Tensor[[3, 4], ts.f32], y: ts.InOut[[7, 8], ts.f32]):
    spread(x, y)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_strided_store_writes_only_its_elements(platform):
    x = torch.randn(3, 4)
    y = torch.full((7, 8), 5.0)
    upsample(x, y, platform=platform)
    want = torch.full((7, 8), 5.0)
    want[1::2, 1::2] = x
    assert torch.equal(y, want)


@ts.kernel
def far(x: ts.Tensor[[4, 4], ts.f32], y: ts.Out[[4, 4], ts.f32], r: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [r, 0], [4, 4], pad=-1.0))


@ts.jit
def shifted(x: ts.Tensor[[4, 4], ts.f32], y: ts.Out[[4, 4], ts.f32], r: ts.Scalar[ts.i32]):
    far(x, y, r)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("r", [-9, -2, 0, 3, 100])
def test_a_padded_load_touches_nothing_outside(platform, r):
    x = torch.randn(4, 4)
    y = torch.empty(4, 4)
    shifted(x, y, r, platform=platform)
    want = torch.full((4, 4), -1.0)
    for i in range(4):
        if 0 <= r + i < 4:
            want[i] = x[r + i]
    assert torch.equal(y, want)


@ts.kernel
def every_other(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[4, 4], ts.f32], c: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(x, [0, c], [4, 4], strides=[2, 2]))


@ts.jit
def decimate(x: ts.Tensor[[8, 8], ts.f32], y: ts.Out[[4, 4], ts.f32], c: ts.Scalar[ts.i32]):
    every_other(x, y, c)


def test_a_checked_strided_load_names_the_span_it_covers():
    x, y = torch.randn(8, 8), torch.empty(4, 4)
    decimate(x, y, 1)
    assert torch.equal(y, x[0::2, 1::2])
    with pytest.raises(ts.RuntimeFailure) as info:
        decimate(x, y, 2)  # columns 2, 4, 6, 8: the span 2 + 7 passes the end
    assert "offset [0, 2] + tile [7, 7] is outside x's shape [8, 8] (dim 1: 2 + 7 > 8)" in str(info.value)
    with pytest.raises(ts.RuntimeFailure) as info:
        decimate(x, y, 2, platform="interp")
    assert "load of x at tests/runtime/test_access_runs.py:" in str(info.value)
    assert "offset [0, 2] + tile [7, 7] is outside x's shape [8, 8] (dim 1: 2 + 7 > 8)" in str(info.value)


@ts.kernel
def bias_rows(
    x: ts.Tensor[[12, 5], ts.f32], b: ts.Tensor[[12], ts.f32], y: ts.Out[[12, 5], ts.f32], s: ts.Out[[12], ts.f32],
    shift: ts.Scalar[ts.i32],
):
    for r in ts.range(0, 12, 8):
        n = ts.minimum(12 - r, 8)
        t = ts.load(x, [r, 0], [8, 5], valid=(n, 5)) + ts.load(b, [r + shift], [8], pad=0.5, dims=[0, None])
        ts.store(y, [r, 0], t, valid=(n, 5))
        ts.store(s, [r], ts.row_sum(t), valid=(n, 1), dims=[0, None])


@ts.jit
def biased(
    x: ts.Tensor[[12, 5], ts.f32], b: ts.Tensor[[12], ts.f32], y: ts.Out[[12, 5], ts.f32], s: ts.Out[[12], ts.f32],
    shift: ts.Scalar[ts.i32],
):
    bias_rows(x, b, y, s, shift)


@ts.kernel
def col_at(b: ts.Tensor[[12], ts.f32], y: ts.Out[[8, 1], ts.f32], r: ts.Scalar[ts.i32]):
    ts.store(y, [0, 0], ts.load(b, [r], [8], dims=[0, None]))


@ts.jit
def column(b: ts.Tensor[[12], ts.f32], y: ts.Out[[8, 1], ts.f32], r: ts.Scalar[ts.i32]):
    col_at(b, y, r)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("shift", [-3, 0, 2])
def test_a_1d_tensor_read_and_written_as_a_column(platform, shift):
    x, b = torch.randn(12, 5), torch.randn(12)
    y, s = torch.empty(12, 5), torch.empty(12)
    biased(x, b, y, s, shift, platform=platform)
    shifted = torch.full((12,), 0.5)  # b[i + shift], 0.5 outside b
    lo, hi = max(0, -shift), min(12, 12 - shift)
    shifted[lo:hi] = b[lo + shift : hi + shift]
    # rows 8..11 read b in the second block: the pad covers what lies past b's end there too
    want = x + shifted[:, None]
    assert torch.equal(y, want)
    assert torch.allclose(s, want.sum(1))


def test_the_access_audit_sees_a_column_inside_its_region(tmp_path):
    from tilescope.analysis.audit import audit_run

    prog = biased.compile(build_dir=str(tmp_path))
    x, b = torch.randn(12, 5), torch.randn(12)
    audit = audit_run(prog, {"x": x, "b": b, "y": torch.zeros(12, 5), "s": torch.zeros(12), "shift": -3})
    assert audit.failure is None and audit.strays == [] and audit.hazards == []
    # two blocks of two loads and two stores; the padded column records only its rows inside b
    assert len(audit.audited) == 8


def test_a_column_out_of_bounds_names_its_offset_on_sim_and_interp():
    b, y = torch.randn(12), torch.empty(8, 1)
    column(b, y, 4)
    assert torch.equal(y[:, 0], b[4:])
    for platform in PLATFORMS:
        with pytest.raises(ts.RuntimeFailure) as info:
            column(b, y, 5, platform=platform)
        assert "offset [5] + tile [8] is outside b's shape [12] (dim 0: 5 + 8 > 12)" in str(info.value)


@ts.kernel
def total(x: ts.Tensor[[4, 5], ts.f32], loss: ts.Out[[], ts.f32]):
    ts.store(loss, [], ts.row_sum(ts.col_sum(ts.load(x, [0, 0], [4, 5]))))


@ts.kernel
def twice(loss: ts.Tensor[[], ts.f32], out: ts.Out[[], ts.f32]):
    ts.store(out, [], ts.load(loss, [], []) * 2.0)


@ts.jit
def summed(x: ts.Tensor[[4, 5], ts.f32], loss: ts.Out[[], ts.f32], doubled: ts.Out[[], ts.f32]):
    total(x, loss)
    twice(loss, doubled)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_zero_dim_outputs_come_back_zero_dim(platform):
    x = torch.randn(4, 5)
    loss, doubled = torch.empty(()), torch.empty(())
    summed(x, loss, doubled, platform=platform)
    assert loss.shape == () and doubled.shape == ()
    assert torch.allclose(loss, x.sum(), rtol=1e-6, atol=1e-6)
    assert float(doubled) == 2 * float(loss)


@ts.kernel
def copy8(x: ts.Tensor[[1, 1, 2, 1, 2, 1, 3, 4], ts.f32], y: ts.Out[[1, 2, 2, 3, 4], ts.f32]):
    for b in ts.range(0, 2, 1):
        for c in ts.range(0, 2, 1):
            t = ts.load(x, [0, 0, b, 0, c, 0, 0, 0], [1, 1, 1, 1, 1, 1, 3, 4])
            ts.store(y, [0, b, c, 0, 0], t)


@ts.jit
def squeeze8(x: ts.Tensor[[2, 1, 2, 1, 2, 1, 3, 4], ts.f32], y: ts.Out[[2, 2, 2, 3, 4], ts.f32]):
    for a in ts.range(0, 2, 1):  # one task per leading index: 8-D regions, tracked as any other
        copy8(x[a : a + 1, :, :, :, :, :, :, :], y[a : a + 1, :, :, :, :])


@pytest.mark.parametrize("platform", PLATFORMS)
def test_tensors_of_eight_dims(platform):
    x = torch.randn(2, 1, 2, 1, 2, 1, 3, 4)
    y = torch.empty(2, 2, 2, 3, 4)
    squeeze8(x, y, platform=platform)
    assert torch.equal(y, x.reshape(2, 2, 2, 3, 4))


@ts.kernel
def draws(y: ts.Out[[8, 16], ts.f32], seed: ts.Scalar[ts.i64], base: ts.Scalar[ts.i64]):
    ts.store(y, [0, 0], ts.rand([8, 16], seed, base))


@ts.jit
def uniform(y: ts.Out[[32, 16], ts.f32], seed: ts.Scalar[ts.i64]):
    for r in ts.range(0, 32, 8):
        draws(y[r : r + 8, :], seed, r * 16)


def test_philox_matches_its_known_answers():
    def words(counter, key):
        return [int(w) for w in philox([torch.tensor([c], dtype=torch.int64) for c in counter], key)]

    # Random123's known-answer vectors for Philox4x32-10
    assert words([0, 0, 0, 0], (0, 0)) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert words([0xFFFFFFFF] * 4, (0xFFFFFFFF, 0xFFFFFFFF)) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert words([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], (0xA4093822, 0x299F31D0)) == [
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1,
    ]


def test_rand_is_the_same_bits_on_sim_and_interp_and_a_function_of_seed_and_index():
    ys = {}
    for platform in PLATFORMS:
        ys[platform] = torch.empty(32, 16)
        uniform(ys[platform], 2**40 + 7, platform=platform)
    assert torch.equal(ys["sim"], ys["interp"])
    # the whole tensor's draw is counter offset + i of one stream: independent of the tiling
    assert torch.equal(ys["sim"], philox_uniform(2**40 + 7, 0, (32, 16)))
    again = torch.empty(32, 16)
    uniform(again, 2**40 + 7)
    assert torch.equal(again, ys["sim"])
    other = torch.empty(32, 16)
    uniform(other, 2**40 + 8)
    assert not torch.equal(other, ys["sim"])
    y = ys["sim"]
    assert float(y.min()) >= 0.0 and float(y.max()) < 1.0
    assert abs(float(y.mean()) - 0.5) < 5 * (1 / 12 / y.numel()) ** 0.5  # 5 sigma of a uniform's mean


@ts.kernel
def halve(x: ts.Tensor[[4, 2, 6, 8], ts.f32], y: ts.InOut[[4, 3, 2, 4], ts.f32]):
    for c in ts.range(0, 2, 1):
        t = ts.load(x, [0, c, -1, 0], [4, 1, 3, 1], dims=[0, 2], strides=[1, 1, 2, 1], pad=0.0)
        u = ts.load(x, [0, c, 0, 1], [4, 1, 1, 4], dims=[0, 3], strides=[1, 1, 1, 2])
        ts.store(y, [0, 0, c, 0], t, dims=[0, 1])
        ts.store(y, [0, 1, c, 0], u, dims=[0, 3])


@ts.jit
def halves(x: ts.Tensor[[8, 2, 6, 8], ts.f32], y: ts.InOut[[8, 3, 2, 4], ts.f32]):
    for b in ts.range(0, 8, 4):
        halve(x[b : b + 4, :, :, :], y[b : b + 4, :, :, :])


def test_the_access_audit_sees_every_form_inside_its_region(tmp_path):
    from tilescope.analysis.audit import audit_run

    x = torch.randn(8, 2, 6, 8)
    y = torch.zeros(8, 3, 2, 4)
    prog = halves.compile(build_dir=str(tmp_path))
    prog(x, y)
    want = torch.zeros(8, 3, 2, 4)
    for c in range(2):
        rows = torch.zeros(8, 3)
        rows[:, 1:] = x[:, c, 1:5:2, 0]
        want[:, :, c, 0] = rows
        want[:, 1, c, :] = x[:, c, 0, 1::2]
    assert torch.equal(y, want)
    audit = audit_run(prog, {"x": x, "y": torch.zeros(8, 3, 2, 4)})
    assert audit.failure is None and audit.strays == [] and audit.hazards == []
    # per task: two loads (the padded one records only the rows inside) and two stores, per channel
    assert len(audit.audited) == 2 * 2 * 4 and {s.op for s in audit.audited} == {"load", "store"}
