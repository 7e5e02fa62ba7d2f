"""Normalization kernels: RMS norm, layer norm (whole-row and column-chunked), f16 RMS norm."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# RMS norm over a batch with padding rows (all-zero rows of padded sequences), f32.

RN_ROWS, RN_COLS, RN_BLOCK = 256, 512, 32


@ts.kernel
def rms_norm_rows(
    x: ts.Tensor[[RN_BLOCK, RN_COLS], ts.f32],
    gamma: ts.Tensor[[1, RN_COLS], ts.f32],
    y: ts.Out[[RN_BLOCK, RN_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [RN_BLOCK, RN_COLS])
    ms = ts.row_mean(t * t)
    inv = ts.rsqrt(ms)
    g = ts.load(gamma, [0, 0], [1, RN_COLS])
    ts.store(y, [0, 0], t * inv * g)


@ts.jit
def rms_norm_padded(
    x: ts.Tensor[[RN_ROWS, RN_COLS], ts.f32],
    gamma: ts.Tensor[[1, RN_COLS], ts.f32],
    y: ts.Out[[RN_ROWS, RN_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, RN_ROWS, RN_BLOCK):
        rms_norm_rows(x[r : r + RN_BLOCK, :], gamma, y[r : r + RN_BLOCK, :], eps)


def padded_batch(shape, dtype):
    """Token activations where the last rows of each 64-row sequence are padding (zeros)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    lens = [64, 50, 37, 64]
    for s, n in enumerate(lens):
        x[s * 64 + n : (s + 1) * 64, :] = 0.0
    return x.to(dtype)


def rms_norm_golden(t):
    x = t["x"].double()
    ms = (x * x).mean(dim=-1, keepdim=True)
    y = x / torch.sqrt(ms + t["eps"]) * t["gamma"].double()
    t["y"][:] = y.float()


RMS_SPECS = [
    TensorSpec("x", [RN_ROWS, RN_COLS], torch.float32, init_value=padded_batch),
    TensorSpec("gamma", [1, RN_COLS], torch.float32, init_value=lambda s, dtype: 1.0 + 0.1 * torch.randn(s, dtype=dtype)),
    TensorSpec("y", [RN_ROWS, RN_COLS], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-6),
]

# --------------------------------------------------------------------------------------------
# Layer norm, bf16 activations, rows read in column chunks (three passes), statistics in f32.

LN_ROWS, LN_COLS, LN_BLOCK, LN_CHUNK = 128, 1024, 16, 256


@ts.kernel
def layernorm_chunked_bf16(
    x: ts.Tensor[[LN_BLOCK, LN_COLS], ts.bf16],
    gamma: ts.Tensor[[1, LN_COLS], ts.f32],
    beta: ts.Tensor[[1, LN_COLS], ts.f32],
    y: ts.Out[[LN_BLOCK, LN_COLS], ts.bf16],
    eps: ts.Scalar[ts.f32],
):
    total = ts.zeros([LN_BLOCK, 1], ts.f32)
    for h in ts.range(0, LN_COLS, LN_CHUNK):
        total = total + ts.row_sum(ts.cast(ts.load(x, [0, h], [LN_BLOCK, LN_CHUNK]), ts.f32))
    mean = total * (1.0 / LN_CHUNK)
    sq = ts.zeros([LN_BLOCK, 1], ts.f32)
    for h in ts.range(0, LN_COLS, LN_CHUNK):
        d = ts.cast(ts.load(x, [0, h], [LN_BLOCK, LN_CHUNK]), ts.f32) - mean
        sq = sq + ts.row_sum(d * d)
    inv = ts.rsqrt(sq * (1.0 / LN_COLS) + eps)
    for h in ts.range(0, LN_COLS, LN_CHUNK):
        d = ts.cast(ts.load(x, [0, h], [LN_BLOCK, LN_CHUNK]), ts.f32) - mean
        g = ts.load(gamma, [0, h], [1, LN_CHUNK])
        b = ts.load(beta, [0, h], [1, LN_CHUNK])
        ts.store(y, [0, h], ts.cast(d * inv * g + b, ts.bf16))


@ts.jit
def layernorm_bf16(
    x: ts.Tensor[[LN_ROWS, LN_COLS], ts.bf16],
    gamma: ts.Tensor[[1, LN_COLS], ts.f32],
    beta: ts.Tensor[[1, LN_COLS], ts.f32],
    y: ts.Out[[LN_ROWS, LN_COLS], ts.bf16],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, LN_ROWS, LN_BLOCK):
        layernorm_chunked_bf16(x[r : r + LN_BLOCK, :], gamma, beta, y[r : r + LN_BLOCK, :], eps)


def layernorm_golden(t):
    x = t["x"].float()
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + t["eps"]) * t["gamma"] + t["beta"]
    t["y"][:] = y.to(t["y"].dtype)


def shifted_randn(shape, dtype):
    return (torch.randn(shape, dtype=torch.float32) * 2.0 + 0.5).to(dtype)


LN_BF16_SPECS = [
    TensorSpec("x", [LN_ROWS, LN_COLS], torch.bfloat16, init_value=shifted_randn),
    TensorSpec("gamma", [1, LN_COLS], torch.float32, init_value=torch.rand),
    TensorSpec("beta", [1, LN_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("y", [LN_ROWS, LN_COLS], torch.bfloat16, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# Layer norm, f32, column chunks, with the variance pass's loop bound wrong.

LF_ROWS, LF_COLS, LF_BLOCK, LF_CHUNK = 128, 768, 16, 128


@ts.kernel
def layernorm_chunked_f32(
    x: ts.Tensor[[LF_BLOCK, LF_COLS], ts.f32],
    gamma: ts.Tensor[[1, LF_COLS], ts.f32],
    beta: ts.Tensor[[1, LF_COLS], ts.f32],
    y: ts.Out[[LF_BLOCK, LF_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    total = ts.zeros([LF_BLOCK, 1], ts.f32)
    for h in ts.range(0, LF_COLS, LF_CHUNK):
        total = total + ts.row_sum(ts.load(x, [0, h], [LF_BLOCK, LF_CHUNK]))
    mean = total / LF_COLS
    sq = ts.zeros([LF_BLOCK, 1], ts.f32)
    for h in ts.range(0, LF_COLS - LF_CHUNK, LF_CHUNK):
        d = ts.load(x, [0, h], [LF_BLOCK, LF_CHUNK]) - mean
        sq = sq + ts.row_sum(d * d)
    rstd = ts.rsqrt(sq / LF_COLS + eps)
    for h in ts.range(0, LF_COLS, LF_CHUNK):
        d = ts.load(x, [0, h], [LF_BLOCK, LF_CHUNK]) - mean
        ts.store(y, [0, h], d * rstd * ts.load(gamma, [0, h], [1, LF_CHUNK]) + ts.load(beta, [0, h], [1, LF_CHUNK]))


@ts.jit
def layernorm_f32(
    x: ts.Tensor[[LF_ROWS, LF_COLS], ts.f32],
    gamma: ts.Tensor[[1, LF_COLS], ts.f32],
    beta: ts.Tensor[[1, LF_COLS], ts.f32],
    y: ts.Out[[LF_ROWS, LF_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, LF_ROWS, LF_BLOCK):
        layernorm_chunked_f32(x[r : r + LF_BLOCK, :], gamma, beta, y[r : r + LF_BLOCK, :], eps)


LN_F32_SPECS = [
    TensorSpec("x", [LF_ROWS, LF_COLS], torch.float32, init_value=shifted_randn),
    TensorSpec("gamma", [1, LF_COLS], torch.float32, init_value=torch.rand),
    TensorSpec("beta", [1, LF_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("y", [LF_ROWS, LF_COLS], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# Layer norm, f32, whole rows; the orchestration passes the affine parameters.

LA_ROWS, LA_COLS, LA_BLOCK = 256, 384, 32


@ts.kernel
def layernorm_affine(
    x: ts.Tensor[[LA_BLOCK, LA_COLS], ts.f32],
    weight: ts.Tensor[[1, LA_COLS], ts.f32],
    bias: ts.Tensor[[1, LA_COLS], ts.f32],
    y: ts.Out[[LA_BLOCK, LA_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [LA_BLOCK, LA_COLS])
    d = t - ts.row_mean(t)
    rstd = ts.rsqrt(ts.row_mean(d * d) + eps)
    ts.store(y, [0, 0], d * rstd * ts.load(weight, [0, 0], [1, LA_COLS]) + ts.load(bias, [0, 0], [1, LA_COLS]))


@ts.jit
def layernorm_affine_rows(
    x: ts.Tensor[[LA_ROWS, LA_COLS], ts.f32],
    weight: ts.Tensor[[1, LA_COLS], ts.f32],
    bias: ts.Tensor[[1, LA_COLS], ts.f32],
    y: ts.Out[[LA_ROWS, LA_COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, LA_ROWS, LA_BLOCK):
        layernorm_affine(x[r : r + LA_BLOCK, :], bias, weight, y[r : r + LA_BLOCK, :], eps)


def layernorm_affine_golden(t):
    x = t["x"].double()
    y = torch.nn.functional.layer_norm(x, (LA_COLS,), t["weight"][0].double(), t["bias"][0].double(), t["eps"])
    t["y"][:] = y.float()


LA_SPECS = [
    TensorSpec("x", [LA_ROWS, LA_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("weight", [1, LA_COLS], torch.float32, init_value=lambda s, dtype: 1.0 + 0.2 * torch.randn(s, dtype=dtype)),
    TensorSpec("bias", [1, LA_COLS], torch.float32, init_value=lambda s, dtype: 0.1 * torch.randn(s, dtype=dtype)),
    TensorSpec("y", [LA_ROWS, LA_COLS], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# RMS norm of f16 activations (LLaMA-style, hidden 2048), statistics meant to be f32.

RH_ROWS, RH_COLS, RH_BLOCK = 64, 2048, 8


@ts.kernel
def rms_norm_f16_rows(
    x: ts.Tensor[[RH_BLOCK, RH_COLS], ts.f16],
    w: ts.Tensor[[1, RH_COLS], ts.f16],
    y: ts.Out[[RH_BLOCK, RH_COLS], ts.f16],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [RH_BLOCK, RH_COLS])
    tf = ts.cast(t, ts.f32)
    ss = ts.cast(ts.row_sum(t * t), ts.f32)
    inv = ts.rsqrt(ss * (1.0 / RH_COLS) + eps)
    wf = ts.cast(ts.load(w, [0, 0], [1, RH_COLS]), ts.f32)
    ts.store(y, [0, 0], ts.cast(tf * inv * wf, ts.f16))


@ts.jit
def rms_norm_f16(
    x: ts.Tensor[[RH_ROWS, RH_COLS], ts.f16],
    w: ts.Tensor[[1, RH_COLS], ts.f16],
    y: ts.Out[[RH_ROWS, RH_COLS], ts.f16],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, RH_ROWS, RH_BLOCK):
        rms_norm_f16_rows(x[r : r + RH_BLOCK, :], w, y[r : r + RH_BLOCK, :], eps)


def rms_norm_f16_golden(t):
    x = t["x"].float()
    var = x.pow(2).mean(-1, keepdim=True)
    y = x * torch.rsqrt(var + t["eps"]) * t["w"].float()
    t["y"][:] = y.half()


RH_SPECS = [
    # residual-stream activations grow large in deep layers
    TensorSpec("x", [RH_ROWS, RH_COLS], torch.float16, init_value=lambda s, dtype: (torch.randn(s) * 6.0).to(dtype)),
    TensorSpec("w", [1, RH_COLS], torch.float16, init_value=lambda s, dtype: (1.0 + 0.1 * torch.randn(s)).to(dtype)),
    TensorSpec("y", [RH_ROWS, RH_COLS], torch.float16, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-6),
]


BUGS = (
    BlindBug(
        name="rmsnorm_missing_eps",
        what="the RMS is taken without eps, so the all-zero padding rows get rsqrt(0) = inf and 0 * inf = NaN",
        pattern="missing_guard",
        program=rms_norm_padded,
        specs=RMS_SPECS,
        golden=rms_norm_golden,
        rtol=1e-5,
        atol=1e-5,
        category="nan",
        kernel="rms_norm_rows",
        op="rsqrt",
        line=(rms_norm_rows, "inv = ts.rsqrt(ms)"),
        fixed="inv = ts.rsqrt(ms + eps)",
    ),
    BlindBug(
        name="layernorm_mean_divisor",
        what="the mean divides the row total by the chunk width instead of the row width",
        pattern="wrong_constant",
        program=layernorm_bf16,
        specs=LN_BF16_SPECS,
        golden=layernorm_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="layernorm_chunked_bf16",
        op="mul",
        line=(layernorm_chunked_bf16, "mean = total * (1.0 / LN_CHUNK)"),
        fixed="mean = total * (1.0 / LN_COLS)",
    ),
    BlindBug(
        name="layernorm_var_loop_short",
        what="the variance pass stops one chunk early, so the last 128 columns never enter the variance",
        pattern="off_by_one",
        program=layernorm_f32,
        specs=LN_F32_SPECS,
        golden=layernorm_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="layernorm_chunked_f32",
        op="range",
        line=(layernorm_chunked_f32, "for h in ts.range(0, LF_COLS - LF_CHUNK, LF_CHUNK):"),
        fixed="for h in ts.range(0, LF_COLS, LF_CHUNK):",
    ),
    BlindBug(
        name="layernorm_affine_swapped",
        what="the orchestration passes bias where the kernel takes the weight and weight where it takes the bias",
        pattern="swapped_operands",
        program=layernorm_affine_rows,
        specs=LA_SPECS,
        golden=layernorm_affine_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="layernorm_affine",
        op="call",
        line=(layernorm_affine_rows, "layernorm_affine(x[r : r + LA_BLOCK, :], bias, weight"),
        fixed="layernorm_affine(x[r : r + LA_BLOCK, :], weight, bias, y[r : r + LA_BLOCK, :], eps)",
    ),
    BlindBug(
        name="rmsnorm_f16_sumsq",
        what="the sum of squares is reduced in f16 and cast to f32 afterwards; it overflows to inf for large activations",
        pattern="narrow_accumulator",
        program=rms_norm_f16,
        specs=RH_SPECS,
        golden=rms_norm_f16_golden,
        rtol=1e-3,
        atol=1e-3,
        category="precision",
        kernel="rms_norm_f16_rows",
        op="row_sum",
        line=(rms_norm_f16_rows, "ss = ts.cast(ts.row_sum(t * t), ts.f32)"),
        fixed="ss = ts.row_sum(tf * tf)",
        verdict="guilty",
    ),
)
