"""Tile views: a loaded tile that is only read by fused expressions, row reductions and stores is
emitted as a view of its tensor (read in place), every other one as a load (a copy); a view
gives the bits a load would, also when its box is strided or overlaps a tensor the kernel writes
(it copies then)."""

import re
import subprocess

import pytest
import torch
from helpers import header_program

import tilescope as ts
from tilescope.runtime.run_config import RunConfig

R, C = 8, 16


def kernel_source(prog: ts.CompiledProgram, name: str) -> str:
    (k,) = [k for k in prog.kernels if k["name"] == name]
    return (prog.work_dir / k["source"]).read_text()


def declaration(src: str, name: str) -> str:
    """The C++ declaration of tile ``name`` (its type and initializer, without the line marker)."""
    (line,) = [x for x in src.splitlines() if re.match(rf"\s+(const )?\w+<[^>]*> {name} = ", x)]
    return line.split("  // @")[0].strip()


@ts.kernel
def normalize(x: ts.Tensor[[R, C], ts.f32], g: ts.Tensor[[1, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    t = ts.load(x, [0, 0], [R, C])
    w = ts.load(g, [0, 0], [1, C])
    m = ts.row_max(t)
    s = ts.row_sum(ts.exp(t - m))
    ts.store(y, [0, 0], (t - m) / s * w)


@ts.jit
def normalized(x: ts.Tensor[[R, C], ts.f32], g: ts.Tensor[[1, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    normalize(x, g, y)


def _normalize_reference(x, g):
    m = x.max(-1, keepdim=True).values
    return (x - m) / torch.exp(x - m).sum(-1, keepdim=True) * g


def test_tiles_only_read_by_fused_ops_reductions_and_stores_are_views():
    src = kernel_source(normalized.compile(check_bounds=False), "normalize")
    assert declaration(src, "t") == "TileView<float, 8, 16> t = view<8, 16>(x, {0, 0}, {extent(y)});"
    assert declaration(src, "w") == "TileView<float, 1, 16> w = view<1, 16>(g, {0, 0}, {extent(y)});"
    assert "load<" not in src


@ts.kernel
def scaled_by_one_plus(
    x: ts.Tensor[[R, C], ts.f32],
    g: ts.Tensor[[1, C], ts.f32],
    col: ts.Tensor[[R, 1], ts.f32],
    y: ts.Out[[R, C], ts.f32],
    s: ts.Out[[R, 1], ts.f32],
):
    t = ts.load(x, [0, 0], [R, C])
    w = ts.load(g, [0, 0], [1, C])
    c = ts.load(col, [0, 0], [R, 1])
    ts.store(y, [0, 0], (w + 1.0) * t * 2.0 - ts.exp(c))  # ops on views of other shapes than the store's
    ts.store(s, [0, 0], ts.row_sum((w + 1.0) * t) + (2.0 - c))


@ts.jit
def one_plus(
    x: ts.Tensor[[R, C], ts.f32],
    g: ts.Tensor[[1, C], ts.f32],
    col: ts.Tensor[[R, 1], ts.f32],
    y: ts.Out[[R, C], ts.f32],
    s: ts.Out[[R, 1], ts.f32],
):
    scaled_by_one_plus(x, g, col, y, s)


def test_ops_on_views_of_a_smaller_shape_inside_a_larger_expression():
    src = kernel_source(one_plus.compile(), "scaled_by_one_plus")
    for name in "twc":
        assert declaration(src, name).startswith("TileView<"), name
    x, g, col = torch.randn(R, C), torch.randn(1, C), torch.randn(R, 1)
    y, s = torch.empty(R, C), torch.empty(R, 1)
    one_plus(x, g, col, y, s)
    torch.testing.assert_close(y, (g + 1.0) * x * 2.0 - torch.exp(col))
    torch.testing.assert_close(s, ((g + 1.0) * x).sum(-1, keepdim=True) + (2.0 - col))


@ts.kernel
def mixed(
    x: ts.Tensor[[R, C], ts.f32],
    w: ts.Tensor[[C, C], ts.f32],
    z: ts.InOut[[R, C], ts.f32],
    y: ts.Out[[R, C], ts.f32],
):
    a = ts.load(x, [0, 0], [R, C])  # read by a matmul: a tile
    b = ts.load(w, [0, 0], [C, C])  # read by the same matmul: a tile
    c = ts.load(z, [0, 0], [R, C])  # z is stored into below: a tile
    d = ts.load(x, [0, 0], [R, C])  # copied to another tile: a tile
    e = d
    f = ts.load(x, [0, 0], [R, C])  # compared: a tile
    h = ts.load(x, [0, 0], [R, C])  # assigned twice: a tile
    h = h * 2.0
    k = ts.load(x, [0, 0], [R, C])  # read by the where below: a tile (where takes tiles)
    ts.store(z, [0, 0], c + 1.0)
    ts.store(y, [0, 0], ts.matmul(a, b) + e + ts.where(f > 0.0, h, k))


@ts.jit
def mixed_prog(
    x: ts.Tensor[[R, C], ts.f32],
    w: ts.Tensor[[C, C], ts.f32],
    z: ts.InOut[[R, C], ts.f32],
    y: ts.Out[[R, C], ts.f32],
):
    mixed(x, w, z, y)


def test_tiles_read_by_anything_else_are_loaded():
    prog = mixed_prog.compile(check_bounds=False)
    src = kernel_source(prog, "mixed")
    for name in "abcdfhk":
        assert " = load<" in declaration(src, name), name
    x, w, z = torch.randn(R, C), torch.randn(C, C), torch.randn(R, C)
    y, z0 = torch.empty(R, C), z.clone()
    prog(x, w, z, y)
    torch.testing.assert_close(z, z0 + 1.0)
    torch.testing.assert_close(y, x @ w + x + torch.where(x > 0, x * 2.0, x))


@pytest.mark.parametrize("checked", [False, True])
def test_a_view_gives_the_bits_of_the_load_it_stands_for(checked):
    prog = normalized.compile(check_bounds=checked)
    x, g = torch.randn(R, C), torch.rand(1, C)
    y_view = torch.empty(R, C)
    prog(x, g, y_view)
    torch.testing.assert_close(y_view, _normalize_reference(x, g))
    # the same build with its views edited back into loads: the same bits
    (k,) = prog.kernels
    cpp = prog.work_dir / k["source"]
    loads = re.sub(
        r"TileView<(\w+), (\d+), (\d+)> (\w+) = view<\d+, \d+>\((\w+), (\{[^}]*\}), \{[^}]*\}",
        r"Tile<\1, \2, \3> \4 = load<\2, \3>(\5, \6",
        cpp.read_text(),
    )
    assert loads.count(" = load<") == 2 and "view<" not in loads
    cpp.write_text(loads)
    y_load = torch.empty(R, C)
    assert ts.replay_compiled(prog.work_dir, x, g, y_load, log_level="error").passed
    assert torch.equal(y_view, y_load)


@ts.kernel
def affine_rows(
    x: ts.Tensor[[R, C], ts.f32],
    g: ts.Tensor[[1, C], ts.f32],
    b: ts.Tensor[[1, C], ts.f32],
    w: ts.Tensor[[C, C], ts.f32],
    y: ts.Out[[R, C], ts.f32],
    s: ts.Out[[R, 1], ts.f32],
):
    t = ts.load(x, [0, 0], [R, C])
    inv = 1.0 / ts.row_sum(ts.load(x, [0, 0], [R, C]) * ts.load(x, [0, 0], [R, C]))
    peak = ts.row_max(ts.load(x, [0, 0], [R, C]))
    ts.store(y, [0, 0], t * inv * ts.load(g, [0, 0], [1, C]) + ts.load(b, [0, 0], [1, C]))
    ts.store(s, [0, 0], peak + ts.row_sum(ts.matmul(ts.load(x, [0, 0], [R, C]), ts.load(w, [0, 0], [C, C]))))


@ts.jit
def affine(
    x: ts.Tensor[[R, C], ts.f32],
    g: ts.Tensor[[1, C], ts.f32],
    b: ts.Tensor[[1, C], ts.f32],
    w: ts.Tensor[[C, C], ts.f32],
    y: ts.Out[[R, C], ts.f32],
    s: ts.Out[[R, 1], ts.f32],
):
    affine_rows(x, g, b, w, y, s)


def test_loads_read_only_by_a_fused_expression_are_views_where_they_stand():
    """A load with no name read by a fused op or a row reduction is a view in that expression
    (gamma/beta rows, the reductions' operands); one read by a matmul stays a load; the results
    are the bits of the same build with those views edited back into loads."""
    prog = affine.compile(check_bounds=False)
    src = kernel_source(prog, "affine_rows")
    assert "fuse(t) * inv * view<1, 16>(g, {0, 0}, {extent(y), extent(s)}) + view<1, 16>(b, {0, 0}, " in src
    assert "row_sum(fuse(view<8, 16>(x, {0, 0}, {extent(y), extent(s)})) * view<8, 16>(x, " in src
    assert "row_max(view<8, 16>(x, {0, 0}, {extent(y), extent(s)}))" in src
    assert "matmul(load<8, 16>(x, {0, 0}), load<16, 16>(w, {0, 0}))" in src
    assert src.count("load<") == 2
    x, g, b, w = torch.randn(R, C), torch.rand(1, C), torch.randn(1, C), torch.randn(C, C)
    y, s = torch.empty(R, C), torch.empty(R, 1)
    prog(x, g, b, w, y, s)
    torch.testing.assert_close(y, x / (x * x).sum(-1, keepdim=True) * g + b)
    torch.testing.assert_close(s, x.max(-1, keepdim=True).values + (x @ w).sum(-1, keepdim=True))
    (k,) = prog.kernels
    cpp = prog.work_dir / k["source"]
    loads = re.sub(r"view<(\d+), (\d+)>\((\w+), (\{[^}]*\}), \{[^}]*\}\)", r"load<\1, \2>(\3, \4)", cpp.read_text())
    loads = loads.replace("TileView<", "Tile<")
    assert "view<" not in loads
    cpp.write_text(loads)
    y_load, s_load = torch.empty(R, C), torch.empty(R, 1)
    assert ts.replay_compiled(prog.work_dir, x, g, b, w, y_load, s_load, log_level="error").passed
    assert torch.equal(y, y_load) and torch.equal(s, s_load)


@ts.inline
def centred(a):
    return a - ts.col_mean(a)


@ts.inline
def times_its_sum(a):
    return a * ts.row_sum(a)


@ts.kernel
def shared_operands(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32], z: ts.Out[[R, C], ts.f32]):
    t = ts.load(x, [0, 0], [R, C])
    # the helper's argument is one node, read by the fused tree and by col_mean, which takes tiles
    ts.store(y, [0, 0], centred(ts.load(x, [0, 0], [R, C]) * 2.0))
    # and by the tree and by a row reduction inside it, which reads it fused again
    ts.store(z, [0, 0], times_its_sum(t * 2.0))


@ts.jit
def shared(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32], z: ts.Out[[R, C], ts.f32]):
    shared_operands(x, y, z)


def test_a_shared_operand_is_a_view_only_where_the_fused_tree_reads_it():
    src = kernel_source(shared.compile(check_bounds=False), "shared_operands")
    store_y = next(line for line in src.splitlines() if line.strip().startswith("store(y,"))
    assert "fuse(view<8, 16>(x, {0, 0}, {extent(y), extent(z)})) * 2.0f - col_mean(load<8, 16>(x, {0, 0}) * 2.0f)" in store_y
    store_z = next(line for line in src.splitlines() if line.strip().startswith("store(z,"))
    assert "row_sum(fuse(t) * 2.0f)" in store_z  # wrapped inside the reduction too: no tile of t * 2
    x = torch.randn(R, C)
    y, z = torch.empty(R, C), torch.empty(R, C)
    shared(x, y, z)
    torch.testing.assert_close(y, x * 2.0 - (x * 2.0).mean(0, keepdim=True))
    torch.testing.assert_close(z, x * 2.0 * (x * 2.0).sum(-1, keepdim=True))


@ts.kernel
def scale_by_first_row_unnamed(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [R, C]) * ts.load(x, [0, 0], [1, C]) + 1.0)


@ts.jit
def scale_in_place_unnamed(z: ts.InOut[[R, C], ts.f32]):
    scale_by_first_row_unnamed(z, z)


def test_a_view_with_no_name_of_the_tensor_being_stored_reads_it_as_it_was_before():
    # read in place, row 0 would be overwritten while rows 1..7 still read it: both views see
    # the overlap with y and copy their boxes, as loads would
    src = kernel_source(scale_in_place_unnamed.compile(), "scale_by_first_row_unnamed")
    assert "fuse(view<8, 16>(x, {0, 0}, {extent(y)}" in src and "view<1, 16>(x, {0, 0}, {extent(y)}" in src
    z = torch.randn(R, C)
    want = z * z[0:1] + 1.0
    scale_in_place_unnamed(z)
    torch.testing.assert_close(z, want)


@ts.jit
def normalized_strided(x: ts.Tensor[[R, C, 2], ts.f32], g: ts.Tensor[[1, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    normalize(x[:, :, 1], g, y)


def test_a_view_of_strided_columns_reads_what_a_load_would():
    # the kernel's x is x[:, :, 1]: its columns are 2 elements apart, so the view copies its box
    # as load does
    x, g = torch.randn(R, C, 2), torch.rand(1, C)
    y = torch.empty(R, C)
    normalized_strided(x, g, y)
    y_contiguous = torch.empty(R, C)
    normalized(x[:, :, 1].contiguous(), g, y_contiguous)
    assert torch.equal(y, y_contiguous)
    torch.testing.assert_close(y, _normalize_reference(x[:, :, 1], g))


@ts.kernel
def scale_by_first_row(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    t = ts.load(x, [0, 0], [R, C])
    first = ts.load(x, [0, 0], [1, C])
    ts.store(y, [0, 0], t * first + 1.0)


@ts.jit
def scale_in_place(z: ts.InOut[[R, C], ts.f32]):
    scale_by_first_row(z, z)


@ts.jit
def scale_apart(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    scale_by_first_row(x, y)


def test_a_view_of_a_tensor_the_kernel_writes_reads_it_as_it_was_before():
    # the task's input is its output: read in place, row 0 would be overwritten before rows 1..7
    # read it; the view sees the overlap and copies, so every row is scaled by the old first row
    src = kernel_source(scale_in_place.compile(), "scale_by_first_row")
    assert declaration(src, "first").startswith("TileView<float, 1, 16> first = view<1, 16>(x, {0, 0}, {extent(y)}")
    z = torch.randn(R, C)
    want = z * z[0:1] + 1.0
    scale_in_place(z)
    torch.testing.assert_close(z, want)
    x, y = torch.randn(R, C), torch.empty(R, C)
    scale_apart(x, y)
    torch.testing.assert_close(y, x * x[0:1] + 1.0)


@pytest.mark.parametrize("seed", [None, 3])
def test_a_view_out_of_bounds_is_a_checked_load_of_its_tensor(seed):
    @ts.kernel
    def rows_from(x: ts.Tensor[[32, C], ts.f32], y: ts.Out[[R, C], ts.f32], at: ts.Scalar[ts.i32]):
        t = ts.load(x, [at, 0], [R, C])
        ts.store(y, [0, 0], t * 2.0)

    @ts.jit
    def take(x: ts.Tensor[[32, C], ts.f32], y: ts.Out[[R, C], ts.f32], at: ts.Scalar[ts.i32]):
        rows_from(x, y, at)

    prog = take.compile(check_bounds=True)
    assert declaration(kernel_source(prog, "rows_from"), "t").startswith("TileView<float, 8, 16> t = view<8, 16>(")
    x = torch.randn(32, C)
    with pytest.raises(ts.RuntimeFailure) as info:
        prog.run_with(RunConfig(num_workers=2, shuffle_seed=seed), x, torch.empty(R, C), 30)
    f = info.value.failure
    assert (f.kind, f.cause, f.op, f.tensor, f.task_id) == ("kernel_error", "bounds", "load", "x", 0)
    assert "offset [30, 0] + tile [8, 16] is outside x's shape [32, 16] (dim 0: 30 + 8 > 32)" in str(info.value)
    y = torch.empty(R, C)
    prog(x, y, 24)
    assert torch.equal(y, x[24:] * 2.0)


@ts.kernel
def named_like_the_library(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    view = ts.load(x, [0, 0], [R, C])
    extent = ts.row_sum(view)
    fuse = view * 2.0
    ts.store(y, [0, 0], fuse / extent)


@ts.jit
def library_names(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[R, C], ts.f32]):
    named_like_the_library(x, y)


def test_tiles_named_like_the_view_functions_are_renamed():
    src = kernel_source(library_names.compile(), "named_like_the_library")
    assert declaration(src, "view_").startswith("TileView<float, 8, 16> view_ = view<8, 16>(x, {0, 0}, {extent(y)}")
    x, y = torch.rand(R, C) + 0.5, torch.empty(R, C)
    library_names(x, y)
    torch.testing.assert_close(y, x * 2.0 / x.sum(-1, keepdim=True))


UNARY = ('abs', 'elu', 'erf', 'exp', 'exp2', 'expm1', 'gelu', 'gelu_tanh', 'hardsigmoid', 'hardswish', 'log', 'log1p', 'log2', 'logsigmoid', 'mish', 'neg', 'reciprocal', 'rsqrt', 'selu', 'sigmoid', 'silu', 'softplus', 'softsign', 'sqrt', 'tanh')



@ts.kernel
def every_unary(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[25 * R, C], ts.f32]):
    t = ts.load(x, [0, 0], [R, C])
    ts.store(y, [0 * R, 0], ts.abs(t))
    ts.store(y, [1 * R, 0], ts.elu(t))
    ts.store(y, [2 * R, 0], ts.erf(t))
    ts.store(y, [3 * R, 0], ts.exp(t))
    ts.store(y, [4 * R, 0], ts.exp2(t))
    ts.store(y, [5 * R, 0], ts.expm1(t))
    ts.store(y, [6 * R, 0], ts.gelu(t))
    ts.store(y, [7 * R, 0], ts.gelu(t, approximate="tanh"))
    ts.store(y, [8 * R, 0], ts.hardsigmoid(t))
    ts.store(y, [9 * R, 0], ts.hardswish(t))
    ts.store(y, [10 * R, 0], ts.log(t))
    ts.store(y, [11 * R, 0], ts.log1p(t))
    ts.store(y, [12 * R, 0], ts.log2(t))
    ts.store(y, [13 * R, 0], ts.logsigmoid(t))
    ts.store(y, [14 * R, 0], ts.mish(t))
    ts.store(y, [15 * R, 0], -t)
    ts.store(y, [16 * R, 0], ts.reciprocal(t))
    ts.store(y, [17 * R, 0], ts.rsqrt(t))
    ts.store(y, [18 * R, 0], ts.selu(t))
    ts.store(y, [19 * R, 0], ts.sigmoid(t))
    ts.store(y, [20 * R, 0], ts.silu(t))
    ts.store(y, [21 * R, 0], ts.softplus(t))
    ts.store(y, [22 * R, 0], ts.softsign(t))
    ts.store(y, [23 * R, 0], ts.sqrt(t))
    ts.store(y, [24 * R, 0], ts.tanh(t))


@ts.jit
def every_unary_prog(x: ts.Tensor[[R, C], ts.f32], y: ts.Out[[25 * R, C], ts.f32]):
    every_unary(x, y)


def test_every_elementwise_math_op_reads_a_view():
    src = kernel_source(every_unary_prog.compile(), "every_unary")
    assert declaration(src, "t").startswith("TileView<float, 8, 16> t = view<8, 16>(x, {0, 0}, {extent(y)}")
    x = torch.rand(R, C) + 0.5
    y_sim, y_interp = torch.empty(len(UNARY) * R, C), torch.empty(len(UNARY) * R, C)
    every_unary_prog(x, y_sim)
    every_unary_prog(x, y_interp, platform="interp")
    for i, op in enumerate(UNARY):
        torch.testing.assert_close(y_sim[i * R : (i + 1) * R], y_interp[i * R : (i + 1) * R], msg=op)


VIEW_MAIN = r"""
#include <tilescope/kernel.hpp>
#include <tilescope/check.hpp>
#include <tilescope/probe.hpp>

#include <cstdio>
#include <vector>

using namespace ts;

template <class T>
static ts_tensor tensor(T *buf, int32_t dtype, int64_t rows, int64_t cols) {
    ts_tensor t{};
    t.data = buf;
    t.dtype = dtype;
    t.ndim = 2;
    t.shape[0] = rows, t.shape[1] = cols;
    t.strides[0] = cols, t.strides[1] = 1;
    return t;
}

static void print_sink(int32_t id, const void *data, int32_t dtype, int64_t rows, int64_t cols) {
    std::printf("probe %d %lldx%lld:", id, static_cast<long long>(rows), static_cast<long long>(cols));
    for (int64_t i = 0; i < rows * cols; ++i) {
        if (dtype == TS_BOOL) std::printf(" %d", static_cast<const bool *>(data)[i] ? 1 : 0);
        else std::printf(" %g", static_cast<const float *>(data)[i]);
    }
    std::printf("\n");
}

int main() {
    std::vector<float> buf(4 * 8);
    for (int i = 0; i < 32; ++i) buf[i] = static_cast<float>(i);
    const TensorView<float> x(tensor(buf.data(), TS_F32, 4, 8));
    const TensorView<float> y(tensor(buf.data() + 16, TS_F32, 2, 8));  // rows 2..3 of the same memory
    std::vector<float> other(16);
    const TensorView<float> z(tensor(other.data(), TS_F32, 2, 8));
    // rows 0..1, columns 2..4: read in place (rows 8 apart), unless y (which overlaps rows 2..3) is written
    TileView<float, 2, 3> apart = view<2, 3>(x, {0, 2}, {extent(z)});
    TileView<float, 2, 3> under = view<2, 3>(x, {2, 2}, {extent(z), extent(y)});
    std::printf("apart %s stride %lld; under %s stride %lld\n", apart.data == buf.data() + 2 ? "in place" : "copied",
                static_cast<long long>(apart.stride), under.data == under.copy.data ? "copied" : "in place",
                static_cast<long long>(under.stride));
    probe(print_sink, 1, apart);
    Tile<float, 2, 1> sums = row_sum(fuse(apart) * 2.0f);
    std::printf("sums %g %g\n", sums(0, 0), sums(1, 0));
    std::vector<uint8_t> flags{1, 0, 0, 1, 1, 1};
    const TensorView<bool> b(tensor(reinterpret_cast<bool *>(flags.data()), TS_BOOL, 2, 3));
    TileView<bool, 2, 2> bv = view<2, 2>(b, {0, 1});
    probe(print_sink, 2, bv);
    const CheckSite at{"k", "load", "x", 0, "model.py:3"};
    try {
        TileView<float, 2, 8> past = view<2, 8>(x, {3, 0}, {extent(z)}, at);
        std::printf("no error %p\n", static_cast<const void *>(past.data));
    } catch (const BoundsError &e) {
        std::printf("%s\n", e.what());
    }
    return 0;
}
"""


def test_the_view_header_reads_in_place_copies_on_overlap_and_probes_any_view(tmp_path):
    exe = header_program(VIEW_MAIN, tmp_path)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "apart in place stride 8; under copied stride 3",
        "probe 1 2x3: 2 3 4 10 11 12",  # rows 8 apart, handed over as one 2 x 3 block
        "sums 18 66",
        "probe 2 2x2: 0 0 1 1",
        "kernel k: load of x (arg 0) at model.py:3: offset [3, 0] + tile [2, 8] is outside x's shape [4, 8] "
        "(dim 0: 3 + 2 > 4)",
    ]
