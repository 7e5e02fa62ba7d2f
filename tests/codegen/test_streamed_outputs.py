"""Streamed outputs: a kernel stores past the caches (non-temporal stores) into a large program
output that nothing reads; every other output is stored as before; a streamed store writes the
same values in the same places, whatever the row's alignment and the element type."""

import subprocess

import pytest
import torch
from helpers import header_program

import tilescope as ts
from tilescope.analysis.localize.source_map import edited_lines
from tilescope.codegen.kernel_fusion import STREAM_MIN_BYTES

F = ts.f32
ROWS, COLS, BLOCK = 4096, 2048, 8  # a [ROWS, COLS] f32 tensor is STREAM_MIN_BYTES exactly
STREAMED = "y.stream = true;"

assert ROWS * COLS * 4 == STREAM_MIN_BYTES


@ts.kernel
def scale_rows(x: ts.Tensor[[BLOCK, COLS], F], y: ts.Out[[BLOCK, COLS], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [BLOCK, COLS]) * 2.0)


@ts.kernel
def add_rows(a: ts.Tensor[[BLOCK, COLS], F], b: ts.Tensor[[BLOCK, COLS], F], y: ts.Out[[BLOCK, COLS], F]):
    ts.store(y, [0, 0], ts.load(a, [0, 0], [BLOCK, COLS]) + ts.load(b, [0, 0], [BLOCK, COLS]))


@ts.jit
def scaled(x: ts.Tensor[[ROWS, COLS], F], y: ts.Out[[ROWS, COLS], F]):
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])


@ts.jit
def scaled_then_read(x: ts.Tensor[[ROWS, COLS], F], y: ts.Out[[ROWS, COLS], F], z: ts.Out[[ROWS, COLS], F]):
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])
        add_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :], z[r : r + BLOCK, :])  # reads y back


@ts.jit
def small(x: ts.Tensor[[ROWS // 2, COLS], F], y: ts.Out[[ROWS // 2, COLS], F]):
    for r in ts.range(0, ROWS // 2, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])


@ts.jit
def through_intermediate(x: ts.Tensor[[ROWS, COLS], F], y: ts.Out[[ROWS, COLS], F]):
    t = ts.create_tensor([ROWS, COLS], F)
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], t[r : r + BLOCK, :])  # the same kernel, into an intermediate
        scale_rows(t[r : r + BLOCK, :], y[r : r + BLOCK, :])


def _source(prog: ts.CompiledProgram, kernel: str) -> str:
    (k,) = [k for k in prog.kernels if k["name"] == kernel]
    return (prog.work_dir / k["source"]).read_text()


@pytest.mark.parametrize(
    "program, expected",
    [
        (scaled, {"scale_rows": True}),
        (scaled_then_read, {"scale_rows": False, "add_rows": True}),
        (small, {"scale_rows": False}),
        (through_intermediate, {"scale_rows": False}),
    ],
    ids=["large output", "an output read again", "below the size", "one task writes an intermediate"],
)
def test_only_a_large_program_output_that_nothing_reads_is_streamed(tmp_path, program, expected):
    prog = program.compile(build_dir=str(tmp_path), build_cpp=False)
    assert {k: STREAMED in _source(prog, k) for k in expected} == expected
    for k in prog.program().kernels:  # the generated text is what localize regenerates: no edit
        assert edited_lines(prog, k) == []


# rows of 2050 f32 (8200 bytes) start at every alignment; a ragged head and tail on each
WIDE, TALL = 2050, 4096


@ts.kernel
def doubled_rows(x: ts.Tensor[[8, WIDE], F], y: ts.Out[[8, WIDE], F]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, WIDE]) * 2.0)  # a fused expression's store


@ts.kernel
def padded_rows(x: ts.Tensor[[8, WIDE], F], y: ts.Out[[8, WIDE], F]):
    t = ts.load(x, [0, 0], [8, WIDE], pad=0.0)  # a tile (a load with pad= is copied)
    ts.store(y, [0, 0], t)


@ts.jit
def misaligned(x: ts.Tensor[[TALL, WIDE], F], y: ts.Out[[TALL, WIDE], F], z: ts.Out[[TALL, WIDE], F]):
    for r in ts.range(0, TALL, 8):
        doubled_rows(x[r : r + 8, :], y[r : r + 8, :])
        padded_rows(x[r : r + 8, :], z[r : r + 8, :])


@ts.kernel
def copy_rows(x: ts.Tensor[[8, 4096], ts.bf16], y: ts.Out[[8, 4096], ts.bf16]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 4096]))  # a view's store


@ts.jit
def copied(x: ts.Tensor[[4096, 4096], ts.bf16], y: ts.Out[[4096, 4096], ts.bf16]):
    for r in ts.range(0, 4096, 8):
        copy_rows(x[r : r + 8, :], y[r : r + 8, :])


@pytest.mark.slow
def test_streamed_stores_write_every_element_at_any_alignment_and_element_size(tmp_path):
    prog = misaligned.compile(build_dir=str(tmp_path / "f32"))
    assert STREAMED in _source(prog, "doubled_rows") and STREAMED in _source(prog, "padded_rows")
    x = torch.randn(TALL, WIDE)
    y, z = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    prog.run(x, y, z)
    assert torch.equal(y, x * 2) and torch.equal(z, x)
    wide = copied.compile(build_dir=str(tmp_path / "bf16"))
    assert STREAMED in _source(wide, "copy_rows")
    a = torch.randn(4096, 4096).to(torch.bfloat16)
    b = torch.zeros_like(a)
    wide.run(a, b)
    assert torch.equal(b, a)


STREAM_MAIN = r"""
#include <cstdio>
#include <cstring>
#include <tilescope/kernel.hpp>

template <class T>
int check(const char *name) {
    alignas(64) static T out[700 + 64];
    int bad = 0, cases = 0;
    for (int shift = 0; shift < 40; ++shift) {
        for (int n : {0, 1, 7, 63, 64, 65, 300, 640}) {
            std::memset(out, 0x5a, sizeof(out));
            T *dst = reinterpret_cast<T *>(reinterpret_cast<char *>(out) + shift * sizeof(T));
            ts::detail::stream_row(dst, n, [](int c) { return static_cast<T>(c % 100 + 1); });
            ts::detail::stream_fence();
            unsigned char guard[sizeof(T)];
            std::memset(guard, 0x5a, sizeof(T));
            for (int c = 0; c < n; ++c) bad += dst[c] != static_cast<T>(c % 100 + 1);
            bad += std::memcmp(dst + n, guard, sizeof(T)) != 0;  // nothing past the row
            if (shift > 0) bad += std::memcmp(dst - 1, guard, sizeof(T)) != 0;  // nor before it
            ++cases;
        }
    }
    std::printf("%s %d cases, %d wrong\n", name, cases, bad);
    return bad;
}

int main() {
    return check<float>("f32") + check<double>("f64") + check<int8_t>("i8") + check<int16_t>("i16");
}
"""


def test_a_streamed_row_is_the_plain_row_at_every_shift_and_length(tmp_path):
    exe = header_program(STREAM_MAIN, tmp_path)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [f"{name} 320 cases, 0 wrong" for name in ("f32", "f64", "i8", "i16")]


@ts.kernel
def bump_rows(y: ts.InOut[[BLOCK, COLS], F]):
    ts.store(y, [0, 0], ts.load(y, [0, 0], [BLOCK, COLS]) + 1.0)  # reads y back


@ts.jit
def one_kernel_reads_back(x: ts.Tensor[[ROWS, COLS], F], y: ts.Out[[ROWS, COLS], F]):
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])
        bump_rows(y[r : r + BLOCK, :])


@ts.jit
def into_an_inout(x: ts.Tensor[[ROWS, COLS], F], y: ts.InOut[[ROWS, COLS], F]):
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])


@ts.jit
def scaled_twice(x: ts.Tensor[[ROWS, COLS], F], y: ts.Out[[ROWS, COLS], F], z: ts.Out[[ROWS, COLS], F]):
    for r in ts.range(0, ROWS, BLOCK):
        scale_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])
        add_rows(x[r : r + BLOCK, :], x[r : r + BLOCK, :], z[r : r + BLOCK, :])


@pytest.mark.parametrize(
    "program, expected",
    [(one_kernel_reads_back, {"scale_rows": False, "bump_rows": False}), (into_an_inout, {"scale_rows": False})],
    ids=["another kernel reads it as InOut", "a program InOut"],
)
def test_an_output_read_back_or_given_as_inout_is_not_streamed(tmp_path, program, expected):
    prog = program.compile(build_dir=str(tmp_path), build_cpp=False)
    assert {k: STREAMED in _source(prog, k) for k in expected} == expected


def test_an_ir_edit_that_makes_an_output_read_rewrites_the_kernel_that_streamed_it(tmp_path):
    from tilescope.build.state import refresh

    prog = scaled_twice.compile(build_dir=str(tmp_path), build_cpp=False)
    assert STREAMED in _source(prog, "scale_rows") and STREAMED in _source(prog, "add_rows")
    ir = prog.work_dir / "ir" / "scaled_twice.py"
    text = ir.read_text()
    assert "add_rows(x[r:r + 8, :]" in text
    ir.write_text(text.replace("add_rows(x[r:r + 8, :]", "add_rows(y[r:r + 8, :]"))  # y is read now
    report = refresh(prog.work_dir, prog.config)
    assert sorted(report.relowered) == ["kernels/vec/scale_rows.cpp", "orchestration/scaled_twice.cpp"]
    again = ts.CompiledProgram.from_dir(prog.work_dir)
    assert STREAMED not in _source(again, "scale_rows") and STREAMED in _source(again, "add_rows")
    for k in again.program().kernels:
        assert edited_lines(again, k) == []
