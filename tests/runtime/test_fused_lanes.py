"""Lane forms of fused expressions (tile_lanes.hpp): where the CPU has AVX-512, an expression with
exp is computed 16 elements at a time, and every path that computes one (a tile, a store, a
streamed store, a strided store, a row reduction, prefetching(), a unary op on a whole tile), on
five shapes (a row under one vector, exactly one, whole vectors, and vectors with columns left
over), takes the lanes where it should (static asserts) and gives the bits of the elementwise
build (the same program compiled with TS_FUSED_LANES 0), every NaN counted as one: which NaN an op
on two NaNs gives is not fixed in either. The lane exp equals fmath::exp over every 256th float
and the special values, and each lane op equals its elementwise op on special operands (NaN,
signed zeros, infinities, subnormals). A build for a CPU without AVX-512 has no lane forms and
the same results."""

import re
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import generated_and_edited

import tilescope as ts
from tilescope.toolchain import BASE_FLAGS, march_flag

pytestmark = pytest.mark.slow  # g++ builds

INCLUDE = Path(ts.__file__).parent / "runtime" / "include"
FLAGS = [f for f in BASE_FLAGS if f not in ("-shared", "-fPIC")] + ["-Werror"]  # not one warning

CHECK = r"""
#include <tilescope/tile.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
using namespace ts;

// FNV-1a of n floats, every NaN counted as one (which NaN an op on two NaNs gives is not fixed:
// see tile_lanes.hpp)
static uint64_t hash_floats(const float *p, size_t n, uint64_t h = 1469598103934665603ull) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &p[i], 4);
        if (p[i] != p[i]) u = 0x7fc00000u;
        for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFFu)) * 1099511628211ull;
    }
    return h;
}

static TensorView<float> view_of(float *data, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
    ts_tensor t{};
    t.data = data; t.dtype = TS_F32; t.ndim = 2;
    t.shape[0] = rows; t.shape[1] = cols; t.strides[0] = row_stride; t.strides[1] = col_stride;
    return TensorView<float>(t);
}

// Where the lanes are taken (C >= 16 and an exp in the tree), asserts that the expression has
// cheaper lanes: the path runs them, not the element code.
template <int C, class E>
static void lanes_taken(const E &) {
#if TS_FUSED_LANES
    if constexpr (C >= detail::kLanes) static_assert(detail::lanes_cheaper_v<decltype(E::f)>, "the path takes lanes");
#endif
}

// Every path that computes a fused expression, on R x C tiles whose values run from -120 to 120
// with the special ones, a NaN of each sign in one reduction lane, row and column broadcasts
// (tiles, a fused column, a 1 x 1 tile, a scalar) and a view whose rows are C + 7 apart; prints
// one hash per path.
template <int R, int C>
static void paths() {
    static Tile<float, R, C> t;
    static Tile<float, 1, C> b;
    static Tile<float, R, 1> m;
    static Tile<float, 1, 1> one;
    static float strided_rows[R * (C + 7)];
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float special[] = {0.0f, -0.0f, inf, -inf, nan, -nan, 88.72f, 88.73f, -87.33f, -103.97f, -104.0f, 1e-40f};
    for (int i = 0; i < R * C; ++i) t.data[i] = -120.0f + 240.0f * static_cast<float>((i * 7919) % (R * C)) / (R * C);
    for (int i = 0; i < 12 && i < R * C; ++i) t.data[i * 131 % (R * C)] = special[i];
    if (C > 67) t.data[3] = nan, t.data[67] = -nan;  // columns 3 and 67: the same lane of a row reduction
    for (int c = 0; c < C; ++c) b.data[c] = 0.01f * static_cast<float>(c % 37) - 0.2f;
    for (int r = 0; r < R; ++r) m.data[r] = static_cast<float>(r) - 2.5f;
    one.data[0] = 0.75f;
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) strided_rows[r * (C + 7) + c] = t.data[r * C + c] * 0.5f;
    ts_tensor src{};
    src.data = strided_rows; src.dtype = TS_F32; src.ndim = 2;
    src.shape[0] = R; src.shape[1] = C; src.strides[0] = C + 7; src.strides[1] = 1;
    const TensorView<float> sv(src);
    const TileView<float, R, C> v = view<R, C>(sv, {0, 0});

    auto tile_expr = [&] { return exp(fuse(t) * 0.5f - m + b) * one - fuse(fuse(m) * 2.0f); };
    lanes_taken<C>(tile_expr());
    const Tile<float, R, C> e = tile_expr();
    const Tile<float, R, C> from_view = exp(v - 1.0f);
    lanes_taken<C>(exp(v - 1.0f));
    uint64_t h = hash_floats(e.data, R * C);
    std::printf("tile %016llx\n", (unsigned long long)hash_floats(from_view.data, R * C, h));
    const Tile<float, R, C> whole = exp(t);
    std::printf("map %016llx\n", (unsigned long long)hash_floats(whole.data, R * C));
    lanes_taken<C>(exp(fuse(t) - row_max(t)));
    lanes_taken<C>(maximum(exp(fuse(t) * 0.1f), fuse(b)));
    const Tile<float, R, 1> s = row_sum(exp(fuse(t) - row_max(t)));
    const Tile<float, R, 1> mx = row_max(maximum(exp(fuse(t) * 0.1f), fuse(b)));
    const Tile<float, R, 1> mn = row_min(minimum(-exp(fuse(t) * 0.1f), fuse(b)));
    const Tile<float, R, 1> mean = row_mean(abs(exp(fuse(t) * 0.2f)));
    const Tile<float, R, 1> sum_all = row_sum(exp(fuse(t)));  // the two NaNs meet in one lane
    h = hash_floats(s.data, R);
    h = hash_floats(mx.data, R, h);
    h = hash_floats(mn.data, R, h);
    h = hash_floats(sum_all.data, R, h);
    std::printf("reduce %016llx\n", (unsigned long long)hash_floats(mean.data, R, h));
    // stores: contiguous, streamed (past the caches) from a misaligned head, strided columns
    static float out[R * C + 64], strided[R * C * 2];
    float *head = out + (16 - (reinterpret_cast<uintptr_t>(out) / 4) % 16) % 16 + 3;
    TensorView<float> plain = view_of(head, R, C, C, 1);
    lanes_taken<C>(sqrt(exp(fuse(t) * 0.25f)) / (fuse(t) + 1.0f));
    store(plain, {0, 0}, sqrt(exp(fuse(t) * 0.25f)) / (fuse(t) + 1.0f));
    h = hash_floats(head, R * C);
    TensorView<float> streamed = view_of(head, R, C, C, 1);
    streamed.stream = true;
    store(streamed, {0, 0}, rsqrt(exp(fuse(t) * 0.25f)) - fuse(t));
    h = hash_floats(head, R * C, h);
    TensorView<float> every_other = view_of(strided, R, C, 2 * C, 2);
    store(every_other, {0, 0}, exp(fuse(t) * -0.5f));
    std::printf("store %016llx\n", (unsigned long long)hash_floats(strided, R * C * 2, h));
    // prefetching() while computing (nothing to ask for: the tile alone)
    const Tile<float, R, C> p = prefetching(exp(fuse(t) - 3.0f), {});
    std::printf("prefetching %016llx\n", (unsigned long long)hash_floats(p.data, R * C));
}

int main() {
    paths<6, 300>();  // 18 whole vectors a row and 12 columns left over
    paths<1, 16>();   // one row, one vector, nothing left over
    paths<3, 8>();    // under one vector: elementwise
    paths<2, 64>();
    paths<4, 33>();

#if TS_FUSED_LANES
    using detail::lanes_cheaper_v;
    static Tile<float, 6, 300> t;
    static Tile<float, 6, 1> m;
    static Tile<bf16, 6, 300> tb;
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    static_assert(lanes_cheaper_v<decltype(exp(fuse(t) - m).f)>, "an exp tree has cheaper lanes");
    static_assert(!lanes_cheaper_v<decltype((fuse(t) - m).f)>, "a tree of + - * / has none cheaper");
    static_assert(!lanes_cheaper_v<decltype(exp(tanh(fuse(t))).f)>, "tanh has no lane form");
    static_assert(!lanes_cheaper_v<decltype(exp(fuse(tb)).f)>, "bf16 has no lane form");
    std::printf("lanes 1\n");
    // exp: every 256th float (all exponents and signs), against fmath::exp
    uint64_t differ = 0, tested = 0;
    alignas(64) float x[16], want[16], got[16];
    for (uint64_t base = 0; base < (1ull << 32); base += 256 * 16) {
        for (int j = 0; j < 16; ++j) {
            const uint32_t u = static_cast<uint32_t>(base + 256 * j + (base >> 12) % 256);
            std::memcpy(&x[j], &u, 4);
            want[j] = fmath::exp(x[j]);
        }
        detail::store_lanes(got, detail::exp_lanes(detail::load_lanes(x)));
        for (int j = 0; j < 16; ++j) differ += std::memcmp(&want[j], &got[j], 4) != 0;
        tested += 16;
    }
    std::printf("exp %llu of %llu differ\n", (unsigned long long)differ, (unsigned long long)tested);
    // each op against its elementwise form, on every pair of special operands
    // read at run time (volatile): g++ folds constant operands, and its NaNs need not be the CPU's
    static volatile float ops_src[16] = {0.0f, -0.0f, inf, -inf, nan, -nan, 1.0f, -1.0f, 1e-45f, -1e-45f, 3.4e38f,
                                         -3.4e38f, 2.0f, 0.5f, -7.25f, 104.5f};
    alignas(64) float ops_in[16];
    for (int j = 0; j < 16; ++j) ops_in[j] = ops_src[j];
    const detail::Lanes a = detail::load_lanes(ops_in);
    differ = 0;
    // For a + b and a * b of two NaNs, either NaN is the result: g++ may swap the operands of a
    // commutative op, in the elementwise loops as in the lane forms (`nan_pair`: only a NaN is asked).
    auto same = [&](detail::Lanes lanes, auto element, float nan_pair = 0.0f) {
        alignas(64) float v[16];
        detail::store_lanes(v, lanes);
        for (int j = 0; j < 16; ++j) {
            const float w = element(j);
            if (nan_pair != nan_pair && ops_in[j] != ops_in[j]) differ += v[j] == v[j];
            else differ += std::memcmp(&v[j], &w, 4) != 0;
        }
    };
    using namespace detail;
    for (int k = 0; k < 16; ++k) {
        const Lanes bk = splat(ops_in[k]);
        const float y = ops_in[k];
        same(LaneOp<add_op>::apply(a, bk), [&](int j) { return add_op{}(ops_in[j], y); }, y);
        same(LaneOp<sub_op>::apply(a, bk), [&](int j) { return sub_op{}(ops_in[j], y); });
        same(LaneOp<mul_op>::apply(a, bk), [&](int j) { return mul_op{}(ops_in[j], y); }, y);
        same(LaneOp<div_op>::apply(a, bk), [&](int j) { return div_op{}(ops_in[j], y); });
        same(LaneOp<maximum_op>::apply(a, bk), [&](int j) { return maximum_op{}(ops_in[j], y); });
        same(LaneOp<minimum_op>::apply(a, bk), [&](int j) { return minimum_op{}(ops_in[j], y); });
        same(LaneOp<maximum_op>::apply(bk, a), [&](int j) { return maximum_op{}(y, ops_in[j]); });
        same(LaneOp<minimum_op>::apply(bk, a), [&](int j) { return minimum_op{}(y, ops_in[j]); });
    }
    same(LaneOp<neg_op>::apply(a), [&](int j) { return neg_op{}(ops_in[j]); });
    same(LaneOp<abs_op>::apply(a), [&](int j) { return abs_op{}(ops_in[j]); });
    same(LaneOp<sqrt_op>::apply(a), [&](int j) { return sqrt_op{}(ops_in[j]); });
    same(LaneOp<rsqrt_op>::apply(a), [&](int j) { return rsqrt_op{}(ops_in[j]); });
    same(LaneOp<exp_op>::apply(a), [&](int j) { return exp_op{}(ops_in[j]); });
    std::printf("ops %llu differ\n", (unsigned long long)differ);
#else
    std::printf("lanes 0\n");
#endif
    return 0;
}
"""


def _run_check(tmp_path: Path, name: str, *flags: str) -> list[str]:
    src = tmp_path / "lanes_check.cpp"
    src.write_text(CHECK)
    exe = tmp_path / name
    subprocess.run(["g++", *FLAGS, *flags, "-I", str(INCLUDE), str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()


def _host_has_lanes() -> bool:
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return march_flag() == "-march=native" and " avx512f " in cpu and " fma " in cpu


def test_every_path_gives_the_elementwise_bits(tmp_path):
    native = _run_check(tmp_path, "native", march_flag())
    plain = _run_check(tmp_path, "plain", march_flag(), "-DTS_FUSED_LANES=0")
    paths = ["tile", "map", "reduce", "store", "prefetching"] * 5  # five shapes
    assert [line.split()[0] for line in native[:25]] == paths
    assert native[:25] == plain[:25]
    assert plain[25] == "lanes 0"
    if not _host_has_lanes():
        assert native[25] == "lanes 0", "no AVX-512 here: the lane forms must be off"
        return
    assert native[25:] == ["lanes 1", f"exp 0 of {2**32 // 256} differ", "ops 0 differ"]


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads the CPU's flags from /proc/cpuinfo")
def test_a_build_without_avx512_has_no_lanes_and_the_same_results(tmp_path):
    cpu = Path("/proc/cpuinfo").read_text()
    if not all(f" {flag} " in cpu for flag in ("avx2", "fma", "bmi2")):
        pytest.skip("this CPU cannot run an x86-64-v3 build")
    v3 = _run_check(tmp_path, "v3", "-march=x86-64-v3")
    plain = _run_check(tmp_path, "plain", march_flag(), "-DTS_FUSED_LANES=0")
    assert v3[25] == "lanes 0"
    assert v3[:25] == plain[:25]


ROWS, COLS = 8, 300


@ts.kernel
def exp_paths(
    x: ts.Tensor[[ROWS, COLS], ts.f32], w: ts.Tensor[[1, COLS], ts.f32], y: ts.Out[[ROWS, COLS], ts.f32]
):
    for s in ts.range(0, ROWS, 4):
        t = ts.load(x, [s, 0], [4, COLS])
        g = ts.load(w, [0, 0], [1, COLS])
        e = ts.exp(t - ts.row_max(t))
        z = ts.row_sum(ts.exp(t * 0.5 + g))
        ts.store(y, [s, 0], e * (1.0 / ts.row_sum(e)) + ts.exp(t * 0.25) / z)


def test_a_kernel_with_lanes_has_the_bits_of_its_elementwise_build(tmp_path):
    @ts.jit
    def program(
        x: ts.Tensor[[ROWS, COLS], ts.f32], w: ts.Tensor[[1, COLS], ts.f32], y: ts.Out[[ROWS, COLS], ts.f32]
    ):
        exp_paths(x, w, y)

    prog, plain = generated_and_edited(program, tmp_path, lambda text: "#define TS_FUSED_LANES 0\n" + text)
    torch.manual_seed(0)
    x, w = torch.randn(ROWS, COLS) * 30, torch.randn(1, COLS)
    x[0, :5] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0])
    a, b, want = torch.zeros(ROWS, COLS), torch.zeros(ROWS, COLS), torch.zeros(ROWS, COLS)
    prog.run(x, w, a)
    plain.run(x, w, b)
    prog.run(x, w, want, platform="interp")
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))
    torch.testing.assert_close(a, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    if _host_has_lanes():  # the generated build takes the lane exp, the edited one does not
        (k,) = prog.kernels
        disasm = [
            subprocess.run(
                ["objdump", "-d", str(p.work_dir / k["binary"])], capture_output=True, text=True
            ).stdout
            for p in (prog, plain)
        ]
        assert re.search(r"\bvscalefps\b", disasm[0]) and not re.search(r"\bvscalefps\b", disasm[1])
