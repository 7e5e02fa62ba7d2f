"""Seeded wrong-answer programs for ``tilescope localize``: each has one defect of a known class,
at a known line (tests/analysis/test_localize.py asserts what localize names)."""

import torch

import tilescope as ts
from tilescope.harness import TensorSpec

# -- precision, innocent: a long f32 row sum checked at rtol=1e-7 -------------------------------


@ts.kernel
def row_total(x: ts.Tensor[[8, 4096], ts.f32], y: ts.Out[[8, 1], ts.f32]):
    t = ts.load(x, [0, 0], [8, 4096])
    ts.store(y, [0, 0], ts.row_sum(t))


@ts.jit
def long_sum(x: ts.Tensor[[32, 4096], ts.f32], y: ts.Out[[32, 1], ts.f32]):
    for r in ts.range(0, 32, 8):
        row_total(x[r : r + 8, :], y[r : r + 8, :])


LONG_SUM = [TensorSpec("x", [32, 4096], torch.float32), TensorSpec("y", [32, 1], torch.float32, is_output=True)]


def long_sum_golden(t):
    t["y"][:] = t["x"].sum(dim=-1, keepdim=True)


# -- precision, guilty: a bf16 cast that truncates where the golden rounds ----------------------


@ts.kernel
def to_bf16(x: ts.Tensor[[32, 64], ts.f32], y: ts.Out[[32, 64], ts.bf16]):
    t = ts.load(x, [0, 0], [32, 64])
    h = ts.cast(t * 3.0, ts.bf16, mode="trunc")  # the defect: the golden rounds to nearest
    ts.store(y, [0, 0], h)


@ts.jit
def scale_bf16(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.bf16]):
    for r in ts.range(0, 64, 32):
        to_bf16(x[r : r + 32, :], y[r : r + 32, :])


SCALE_BF16 = [TensorSpec("x", [64, 64], torch.float32), TensorSpec("y", [64, 64], torch.bfloat16, is_output=True)]


def scale_bf16_golden(t):
    t["y"][:] = (t["x"] * 3.0).to(torch.bfloat16)


# -- precision, guilty: softmax without the row max: exp overflows f32 -------------------------


@ts.kernel
def softmax_nomax_rows(x: ts.Tensor[[16, 128], ts.f32], y: ts.Out[[16, 128], ts.f32]):
    t = ts.load(x, [0, 0], [16, 128])
    e = ts.exp(t)  # the defect: exp(t - row_max(t)) keeps it in range
    s = ts.row_sum(e)
    ts.store(y, [0, 0], e / s)


@ts.jit
def softmax_nomax(x: ts.Tensor[[64, 128], ts.f32], y: ts.Out[[64, 128], ts.f32]):
    for r in ts.range(0, 64, 16):
        softmax_nomax_rows(x[r : r + 16, :], y[r : r + 16, :])


SOFTMAX_NOMAX = [
    TensorSpec("x", [64, 128], torch.float32, init_value=lambda shape, dtype: 40 * torch.randn(shape, dtype=dtype)),
    TensorSpec("y", [64, 128], torch.float32, is_output=True),
]


def softmax_golden(t):
    t["y"][:] = torch.softmax(t["x"], dim=-1)


# -- algorithm: an orchestration slice with the wrong loop variable ----------------------------


@ts.kernel
def double_block(x: ts.Tensor[[16, 16], ts.f32], y: ts.Out[[16, 16], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [16, 16]) * 2.0)


@ts.jit
def blocks(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32]):
    for i in ts.range(0, 4):
        for j in ts.range(0, 4):
            double_block(x[i * 16 : i * 16 + 16, i * 16 : i * 16 + 16], y[i * 16 : i * 16 + 16, j * 16 : j * 16 + 16])


BLOCKS = [TensorSpec("x", [64, 64], torch.float32), TensorSpec("y", [64, 64], torch.float32, is_output=True)]


def blocks_golden(t):
    t["y"][:] = t["x"] * 2.0


# -- a correct program, to break by hand (codegen) ---------------------------------------------


@ts.kernel
def affine_rows(x: ts.Tensor[[16, 64], ts.f32], y: ts.Out[[16, 64], ts.f32]):
    t = ts.load(x, [0, 0], [16, 64])
    h = t * 0.5 + 1.0
    ts.store(y, [0, 0], h)


@ts.jit
def affine(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32]):
    for r in ts.range(0, 64, 16):
        affine_rows(x[r : r + 16, :], y[r : r + 16, :])


AFFINE = [TensorSpec("x", [64, 64], torch.float32), TensorSpec("y", [64, 64], torch.float32, is_output=True)]


def affine_golden(t):
    t["y"][:] = t["x"] * 0.5 + 1.0


# -- algorithm, found by a probe and its reference: row_max where row_sum was meant -------------


@ts.kernel
def normalize_rows(x: ts.Tensor[[8, 32], ts.f32], y: ts.Out[[8, 32], ts.f32]):
    t = ts.load(x, [0, 0], [8, 32])
    total = ts.row_max(t)  # the defect: the rows are to be divided by their sums
    ts.probe(total, "total")
    ts.store(y, [0, 0], t / total)


@ts.jit
def normalize(x: ts.Tensor[[32, 32], ts.f32], y: ts.Out[[32, 32], ts.f32]):
    for r in ts.range(0, 32, 8):
        normalize_rows(x[r : r + 8, :], y[r : r + 8, :])


NORMALIZE = [
    TensorSpec("x", [32, 32], torch.float32, init_value=lambda shape, dtype: torch.rand(shape, dtype=dtype) + 0.5),
    TensorSpec("y", [32, 32], torch.float32, is_output=True),
]


def normalize_golden(t):
    t["total"] = t["x"].sum(dim=-1, keepdim=True)  # the probe's reference: one row of 8 per task, stacked
    t["y"][:] = t["x"] / t["total"]


# -- algorithm: a loop that stops short, so part of each task's output is never stored -----------


@ts.kernel
def copy_cols(x: ts.Tensor[[16, 128], ts.f32], y: ts.Out[[16, 128], ts.f32]):
    for c in ts.range(0, 96, 32):  # the defect: the columns run to 128
        ts.store(y, [0, c], ts.load(x, [0, c], [16, 32]))


@ts.jit
def copy(x: ts.Tensor[[64, 128], ts.f32], y: ts.Out[[64, 128], ts.f32]):
    for r in ts.range(0, 64, 16):
        copy_cols(x[r : r + 16, :], y[r : r + 16, :])


COPY = [TensorSpec("x", [64, 128], torch.float32), TensorSpec("y", [64, 128], torch.float32, is_output=True)]


def copy_golden(t):
    t["y"][:] = t["x"]


# -- precision, guilty, with no ulp pattern at the output: a truncating cast inside the kernel ----


@ts.kernel
def trunc_scale_rows(x: ts.Tensor[[32, 64], ts.f32], y: ts.Out[[32, 64], ts.f32]):
    t = ts.load(x, [0, 0], [32, 64])
    h = ts.cast(t * 3.0, ts.bf16, mode="trunc")  # the defect: rounding toward zero, not to nearest
    ts.store(y, [0, 0], ts.cast(h, ts.f32) * 1.7)


@ts.jit
def trunc_scale(x: ts.Tensor[[64, 64], ts.f32], y: ts.Out[[64, 64], ts.f32]):
    for r in ts.range(0, 64, 32):
        trunc_scale_rows(x[r : r + 32, :], y[r : r + 32, :])


TRUNC_SCALE = [TensorSpec("x", [64, 64], torch.float32), TensorSpec("y", [64, 64], torch.float32, is_output=True)]


def trunc_scale_golden(t):
    t["y"][:] = (t["x"] * 3.0).to(torch.bfloat16).to(torch.float32) * 1.7
