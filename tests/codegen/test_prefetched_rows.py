"""Prefetched rows: inside a loop that reads a view per pass at offsets moving with the loop
variable, the first statement that computes a costly elementwise expression into a tile asks for
the view's rows of the next pass while it computes (``prefetching(..., {next_rows<...>(...)})``);
the tile's bits are those of the plain expression, and a box past the tensor is not asked for."""

import re
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import generated_and_edited

import tilescope as ts
from tilescope.toolchain import BASE_FLAGS, march_flag

pytestmark = pytest.mark.slow  # g++ builds

ROWS, C, STEP = 12, 300, 3  # 300 columns: a chunk of 256 and a short one
F = ts.f32
INCLUDE = Path(ts.__file__).parent / "runtime" / "include"


def kernel_line(prog: ts.CompiledProgram, target: str) -> str:
    (k,) = prog.kernels
    src = (prog.work_dir / k["source"]).read_text()
    (line,) = [x for x in src.splitlines() if re.match(rf"\s+(\w+<[^>]*> )?{target} = ", x)]
    return line.split("  // @")[0].strip()


def _one_kernel(kernel):
    @ts.jit
    def program(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
        kernel(x, y)

    return program


@ts.kernel
def softmax_steps(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(x, [s, 0], [STEP, C])
        e = ts.exp(t - ts.row_max(t))
        ts.store(y, [s, 0], e * (1.0 / ts.row_sum(e)))


@ts.kernel
def cheap_steps(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(x, [s, 0], [STEP, C])
        e = ts.sqrt(ts.abs(t - ts.row_max(t)))  # nothing costly: no prefetch
        ts.store(y, [s, 0], e * (1.0 / ts.row_sum(e)))


@ts.kernel
def same_rows(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(x, [0, 0], [STEP, C])  # the same box on every pass: nothing to ask for
        e = ts.exp(t - ts.row_max(t))
        ts.store(y, [s, 0], e * (1.0 / ts.row_sum(e)))


@ts.kernel
def no_loop(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    t = ts.load(x, [0, 0], [ROWS, C])
    e = ts.exp(t - ts.row_max(t))
    ts.store(y, [0, 0], e * (1.0 / ts.row_sum(e)))


@ts.kernel
def two_views(a: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(a, [s, 0], [STEP, C])
        u = ts.load(a, [ROWS - STEP - s, 0], [STEP, C])  # read backwards: its next pass is s + 3 too
        e = ts.sigmoid(t * u - ts.row_mean(u))
        ts.store(y, [s, 0], e + t)


@ts.kernel
def online_stats(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(x, [s, 0], [STEP, C])
        e = ts.exp(ts.row_max(t) - ts.row_mean(t))  # a [3, 1] tile: would ask for every line at once
        ts.store(y, [s, 0], t * e)


@ts.kernel
def stats_then_rows(x: ts.Tensor[[ROWS, C], F], y: ts.Out[[ROWS, C], F]):
    for s in ts.range(0, ROWS, STEP):
        t = ts.load(x, [s, 0], [STEP, C])
        m = ts.sigmoid(ts.row_max(t))  # too small: the next costly statement asks instead
        e = ts.tanh(t - ts.row_mean(t))
        ts.store(y, [s, 0], e * m)


@pytest.mark.parametrize(
    "program, expected",
    [
        (_one_kernel(softmax_steps),
         "Tile<float, 3, 300> e = prefetching(exp(fuse(t) - row_max(t)), {next_rows<3, 300>(x, {s + 3, 0})});"),
        (_one_kernel(cheap_steps), "Tile<float, 3, 300> e = sqrt(abs(fuse(t) - row_max(t)));"),
        (_one_kernel(same_rows), "Tile<float, 3, 300> e = exp(fuse(t) - row_max(t));"),
        (_one_kernel(no_loop), "Tile<float, 12, 300> e = exp(fuse(t) - row_max(t));"),
        (_one_kernel(two_views),
         "Tile<float, 3, 300> e = prefetching(sigmoid(fuse(t) * u - row_mean(u)), "
         "{next_rows<3, 300>(a, {s + 3, 0}), next_rows<3, 300>(a, {9 - (s + 3), 0})});"),
        (_one_kernel(online_stats), "Tile<float, 3, 1> e = exp(fuse(row_max(t)) - row_mean(t));"),
        (_one_kernel(stats_then_rows),
         "Tile<float, 3, 300> e = prefetching(tanh(fuse(t) - row_mean(t)), {next_rows<3, 300>(x, {s + 3, 0})});"),
    ],
    ids=["softmax", "nothing costly", "the same box", "no loop", "two views", "a small tile", "the next costly tile"],
)
def test_which_statements_prefetch(tmp_path, program, expected):
    prog = program.compile(build_dir=str(tmp_path))  # g++ builds it
    assert kernel_line(prog, "e") == expected
    x = torch.randn(ROWS, C) * 4
    got, want = torch.zeros(ROWS, C), torch.zeros(ROWS, C)
    prog.run(x, got)
    prog.run(x, want, platform="interp")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", [softmax_steps, two_views], ids=["softmax", "two views"])
def test_a_prefetching_tile_has_the_bits_of_the_plain_one(tmp_path, kernel):
    def plain(text: str) -> str:
        edited = re.sub(r"prefetching\((.*), \{next_rows<.*\}\);", r"\1;", text)
        assert "prefetching" not in edited
        return edited

    prog, plain_prog = generated_and_edited(_one_kernel(kernel), tmp_path, plain)
    torch.manual_seed(0)
    x = torch.randn(ROWS, C) * 30
    a, b = torch.zeros(ROWS, C), torch.zeros(ROWS, C)
    prog.run(x, a)
    plain_prog.run(x, b)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


NEXT_ROWS_CHECK = r"""
#include <tilescope/tile.hpp>
#include <cstdio>
using namespace ts;
int main() {
    alignas(64) static float data[8 * 40];
    ts_tensor t{};
    t.data = data; t.ndim = 2; t.shape[0] = 8; t.shape[1] = 40; t.strides[0] = 40; t.strides[1] = 1;
    TensorView<float> x(t);
    const NextRows in = next_rows<2, 16>(x, {6, 24});     // the last two rows, columns 24..39
    const NextRows past = next_rows<2, 16>(x, {7, 0});    // a row past the tensor
    const NextRows wide = next_rows<2, 16>(x, {0, 25});   // a column past it
    const NextRows neg = next_rows<2, 16>(x, {-2, 0});
    std::printf("%lld %lld %lld %lld | %lld %lld %lld\n", (long long)(in.base - (const char *)data),
                (long long)in.stride, (long long)in.rows, (long long)in.row_bytes, (long long)past.rows,
                (long long)wide.rows, (long long)neg.rows);
    // every line of a misaligned box is asked for, and the tile is the expression's
    Tile<float, 2, 300> a;
    for (int i = 0; i < 600; ++i) a.data[i] = static_cast<float>(i);
    const Tile<float, 2, 300> b = prefetching(fuse(a) * 2.0f, {in, past, next_rows<1, 3>(x, {0, 5})});
    for (int i = 0; i < 600; ++i) if (b.data[i] != 2.0f * i) return 1;
    return 0;
}
"""


def test_next_rows_names_a_box_inside_the_tensor_only(tmp_path):
    src = tmp_path / "next_rows.cpp"
    src.write_text(NEXT_ROWS_CHECK)
    exe = tmp_path / "next_rows"
    flags = [f for f in BASE_FLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run(["g++", *flags, march_flag(), "-I", str(INCLUDE), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    # (6 * 40 + 24) floats in, rows 160 bytes apart, 2 rows of 64 bytes; the others: none
    assert out.split() == [str((6 * 40 + 24) * 4), "160", "2", "64", "|", "0", "0", "0"]


@ts.kernel
def nine_views(x: ts.Tensor[[ROWS, 72], F], y: ts.Out[[ROWS, 8], F]):
    for s in ts.range(0, ROWS, STEP):
        a, b, c = ts.load(x, [s, 0], [STEP, 8]), ts.load(x, [s, 8], [STEP, 8]), ts.load(x, [s, 16], [STEP, 8])
        d, f, g = ts.load(x, [s, 24], [STEP, 8]), ts.load(x, [s, 32], [STEP, 8]), ts.load(x, [s, 40], [STEP, 8])
        h, i, j = ts.load(x, [s, 48], [STEP, 8]), ts.load(x, [s, 56], [STEP, 8]), ts.load(x, [s, 64], [STEP, 8])
        e = ts.exp(a + b + c + d + f + g + h + i + j)
        ts.store(y, [s, 0], e * 0.5)


def test_one_statement_asks_for_at_most_eight_views(tmp_path):
    @ts.jit
    def program(x: ts.Tensor[[ROWS, 72], F], y: ts.Out[[ROWS, 8], F]):
        nine_views(x, y)

    prog = program.compile(build_dir=str(tmp_path), build_cpp=False)
    line = kernel_line(prog, "e")
    assert line.startswith("Tile<float, 3, 8> e = prefetching(exp(")
    assert line.count("next_rows<3, 8>(x, {s + 3, ") == 8
