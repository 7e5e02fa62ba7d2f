"""Elementwise and row-wise kernels: bias + SiLU, int8 / uint8 quantization, rotary embedding,
tanh-approximate GELU, SwiGLU gating, an Adam step."""

from __future__ import annotations

import math

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Bias + SiLU on a bf16 activation, 2-D tiling (row block x column block).

BA_ROWS, BA_COLS, BA_BR, BA_BC = 256, 512, 64, 128


@ts.kernel
def bias_silu_tile(
    x: ts.Tensor[[BA_BR, BA_BC], ts.bf16],
    bias: ts.Tensor[[1, BA_BC], ts.bf16],
    y: ts.Out[[BA_BR, BA_BC], ts.bf16],
):
    t = ts.cast(ts.load(x, [0, 0], [BA_BR, BA_BC]), ts.f32) + ts.cast(ts.load(bias, [0, 0], [1, BA_BC]), ts.f32)
    ts.store(y, [0, 0], ts.cast(ts.silu(t), ts.bf16))


@ts.jit
def bias_silu(
    x: ts.Tensor[[BA_ROWS, BA_COLS], ts.bf16],
    bias: ts.Tensor[[1, BA_COLS], ts.bf16],
    y: ts.Out[[BA_ROWS, BA_COLS], ts.bf16],
):
    for r in ts.range(0, BA_ROWS, BA_BR):
        for c in ts.range(0, BA_COLS, BA_BC):
            bias_silu_tile(x[r : r + BA_BR, c : c + BA_BC], bias[:, r : r + BA_BC], y[r : r + BA_BR, c : c + BA_BC])


def bias_silu_golden(t):
    h = t["x"].float() + t["bias"].float()
    t["y"][:] = torch.nn.functional.silu(h).to(torch.bfloat16)


BA_SPECS = [
    TensorSpec("x", [BA_ROWS, BA_COLS], torch.bfloat16, init_value=torch.randn),
    TensorSpec("bias", [1, BA_COLS], torch.bfloat16, init_value=torch.randn),
    TensorSpec("y", [BA_ROWS, BA_COLS], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Per-token symmetric int8 quantization of activations (scale = amax / 127).

QI_ROWS, QI_COLS, QI_BLOCK = 128, 512, 32


@ts.kernel
def quantize_rows_i8(
    x: ts.Tensor[[QI_BLOCK, QI_COLS], ts.f32],
    q: ts.Out[[QI_BLOCK, QI_COLS], ts.i8],
    scale: ts.Out[[QI_BLOCK, 1], ts.f32],
):
    t = ts.load(x, [0, 0], [QI_BLOCK, QI_COLS])
    amax = ts.maximum(ts.row_max(ts.abs(t)), 1e-8)
    inv = 127.0 / amax
    ts.store(q, [0, 0], ts.cast(t * inv, ts.i8, mode="trunc"))
    ts.store(scale, [0, 0], amax / 127.0)


@ts.jit
def quantize_i8(x: ts.Tensor[[QI_ROWS, QI_COLS], ts.f32], q: ts.Out[[QI_ROWS, QI_COLS], ts.i8], scale: ts.Out[[QI_ROWS, 1], ts.f32]):
    for r in ts.range(0, QI_ROWS, QI_BLOCK):
        quantize_rows_i8(x[r : r + QI_BLOCK, :], q[r : r + QI_BLOCK, :], scale[r : r + QI_BLOCK, :])


def quantize_i8_golden(t):
    x = t["x"]
    amax = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-8)
    inv = 127.0 / amax
    t["q"][:] = torch.round(x * inv).clamp(-128, 127).to(torch.int8)
    t["scale"][:] = amax / 127.0


QI_SPECS = [
    TensorSpec("x", [QI_ROWS, QI_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("q", [QI_ROWS, QI_COLS], torch.int8, is_output=True),
    TensorSpec("scale", [QI_ROWS, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Asymmetric uint8 quantization of a KV-cache block with a per-head scale and zero point
# (precomputed by the caller): q = clamp(round(x / scale) + zp, 0, 255).

QU_HEADS, QU_TOK, QU_D = 8, 128, 64


@ts.kernel
def quantize_head_u8(
    x: ts.Tensor[[QU_TOK, QU_D], ts.f32],
    inv_scale: ts.Tensor[[1, 1], ts.f32],
    zero_point: ts.Tensor[[1, 1], ts.f32],
    q: ts.Out[[QU_TOK, QU_D], ts.u8],
):
    t = ts.load(x, [0, 0], [QU_TOK, QU_D])
    z = t * ts.load(inv_scale, [0, 0], [1, 1]) + ts.load(zero_point, [0, 0], [1, 1])
    ts.store(q, [0, 0], ts.cast(z, ts.u8, mode="floor"))


@ts.jit
def quantize_kv_u8(
    x: ts.Tensor[[QU_HEADS, QU_TOK, QU_D], ts.f32],
    inv_scale: ts.Tensor[[QU_HEADS, 1], ts.f32],
    zero_point: ts.Tensor[[QU_HEADS, 1], ts.f32],
    q: ts.Out[[QU_HEADS, QU_TOK, QU_D], ts.u8],
):
    for h in ts.range(0, QU_HEADS):
        quantize_head_u8(x[h, :, :], inv_scale[h : h + 1, :], zero_point[h : h + 1, :], q[h, :, :])


def kv_u8_inputs():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(QU_HEADS, QU_TOK, QU_D, generator=g) * torch.linspace(0.5, 2.0, QU_HEADS)[:, None, None] + 0.3
    lo, hi = x.amin(dim=(1, 2)), x.amax(dim=(1, 2))
    scale = (hi - lo) / 255.0
    zp = torch.round(-lo / scale)
    return x, (1.0 / scale)[:, None], zp[:, None]


_KV_X, _KV_INV, _KV_ZP = kv_u8_inputs()


def quantize_kv_golden(t):
    z = t["x"] * t["inv_scale"][:, :, None] + t["zero_point"][:, :, None]
    t["q"][:] = torch.round(z).clamp(0, 255).to(torch.uint8)


QU_SPECS = [
    TensorSpec("x", [QU_HEADS, QU_TOK, QU_D], torch.float32, init_value=_KV_X),
    TensorSpec("inv_scale", [QU_HEADS, 1], torch.float32, init_value=_KV_INV),
    TensorSpec("zero_point", [QU_HEADS, 1], torch.float32, init_value=_KV_ZP),
    TensorSpec("q", [QU_HEADS, QU_TOK, QU_D], torch.uint8, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Rotary embedding (half-split, rotate_half), bf16 activations, f32 tables, 32 tokens a task.

RP_TOK, RP_HEADS, RP_DIM, RP_BLOCK = 256, 8, 64, 32
RP_HALF = RP_DIM // 2


@ts.kernel
def rope_tokens(
    x: ts.Tensor[[RP_BLOCK, RP_HEADS, RP_DIM], ts.bf16],
    cos: ts.Tensor[[RP_BLOCK, RP_HALF], ts.f32],
    sin: ts.Tensor[[RP_BLOCK, RP_HALF], ts.f32],
    y: ts.Out[[RP_BLOCK, RP_HEADS, RP_DIM], ts.bf16],
):
    for i in ts.range(0, RP_BLOCK):
        t = ts.cast(ts.load(x, [i, 0, 0], [1, RP_HEADS, RP_DIM]), ts.f32)
        x1 = t[:, 0:RP_HALF]
        x2 = t[:, RP_HALF:RP_DIM]
        c = ts.load(cos, [i, 0], [1, RP_HALF])
        s = ts.load(sin, [i, 0], [1, RP_HALF])
        ts.store(y, [i, 0, 0], ts.cast(x1 * c - x2 * s, ts.bf16))
        ts.store(y, [i, 0, RP_HALF], ts.cast(x2 * c + x1 * s, ts.bf16))


@ts.jit
def rope(
    x: ts.Tensor[[RP_TOK, RP_HEADS, RP_DIM], ts.bf16],
    cos: ts.Tensor[[RP_TOK, RP_HALF], ts.f32],
    sin: ts.Tensor[[RP_TOK, RP_HALF], ts.f32],
    y: ts.Out[[RP_TOK, RP_HEADS, RP_DIM], ts.bf16],
):
    for p in ts.range(0, RP_TOK, RP_BLOCK):
        rope_tokens(x[p : p + RP_BLOCK, :, :], cos[p : p + RP_BLOCK, :], sin[0:RP_BLOCK, :], y[p : p + RP_BLOCK, :, :])


def rope_tables(tokens, dim, base=10000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    ang = torch.arange(tokens, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return ang.cos().float(), ang.sin().float()


def rope_golden(t):
    x = t["x"].float()
    x1, x2 = x[..., :RP_HALF], x[..., RP_HALF:]
    cos, sin = t["cos"][:, None, :], t["sin"][:, None, :]
    rotated = torch.cat([-x2, x1], dim=-1)
    y = x * torch.cat([cos, cos], dim=-1) + rotated * torch.cat([sin, sin], dim=-1)
    t["y"][:] = y.to(torch.bfloat16)


_COS, _SIN = rope_tables(RP_TOK, RP_DIM)
RP_SPECS = [
    TensorSpec("x", [RP_TOK, RP_HEADS, RP_DIM], torch.bfloat16, init_value=torch.randn),
    TensorSpec("cos", [RP_TOK, RP_HALF], torch.float32, init_value=_COS),
    TensorSpec("sin", [RP_TOK, RP_HALF], torch.float32, init_value=_SIN),
    TensorSpec("y", [RP_TOK, RP_HEADS, RP_DIM], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Hand-written tanh-approximate GELU, f32.

GL_ROWS, GL_COLS, GL_BLOCK = 256, 512, 8
GL_K = math.sqrt(2.0 / math.pi)


@ts.kernel
def gelu_tanh_rows(x: ts.Tensor[[GL_BLOCK, GL_COLS], ts.f32], y: ts.Out[[GL_BLOCK, GL_COLS], ts.f32]):
    t = ts.load(x, [0, 0], [GL_BLOCK, GL_COLS])
    inner = GL_K * (t + 0.044715 * t * t)
    ts.store(y, [0, 0], 0.5 * t * (1.0 + ts.tanh(inner)))


@ts.jit
def gelu_tanh(x: ts.Tensor[[GL_ROWS, GL_COLS], ts.f32], y: ts.Out[[GL_ROWS, GL_COLS], ts.f32]):
    for r in ts.range(0, GL_ROWS, GL_BLOCK):
        gelu_tanh_rows(x[r : r + GL_BLOCK, :], y[r : r + GL_BLOCK, :])


def gelu_golden(t):
    t["y"][:] = torch.nn.functional.gelu(t["x"].double(), approximate="tanh").float()


GL_SPECS = [
    TensorSpec("x", [GL_ROWS, GL_COLS], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 2.0),
    TensorSpec("y", [GL_ROWS, GL_COLS], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# SwiGLU: silu(gate) * up, bf16 in and out, f32 math.

SG_ROWS, SG_COLS, SG_BLOCK = 128, 1024, 16


@ts.kernel
def swiglu_rows(
    gate: ts.Tensor[[SG_BLOCK, SG_COLS], ts.bf16],
    up: ts.Tensor[[SG_BLOCK, SG_COLS], ts.bf16],
    h: ts.Out[[SG_BLOCK, SG_COLS], ts.bf16],
):
    g = ts.cast(ts.load(gate, [0, 0], [SG_BLOCK, SG_COLS]), ts.f32)
    u = ts.cast(ts.load(up, [0, 0], [SG_BLOCK, SG_COLS]), ts.f32)
    ts.store(h, [0, 0], ts.cast(ts.silu(u) * g, ts.bf16))


@ts.jit
def swiglu(
    gate: ts.Tensor[[SG_ROWS, SG_COLS], ts.bf16],
    up: ts.Tensor[[SG_ROWS, SG_COLS], ts.bf16],
    h: ts.Out[[SG_ROWS, SG_COLS], ts.bf16],
):
    for r in ts.range(0, SG_ROWS, SG_BLOCK):
        swiglu_rows(gate[r : r + SG_BLOCK, :], up[r : r + SG_BLOCK, :], h[r : r + SG_BLOCK, :])


def swiglu_golden(t):
    t["h"][:] = (torch.nn.functional.silu(t["gate"].float()) * t["up"].float()).to(torch.bfloat16)


SG_SPECS = [
    TensorSpec("gate", [SG_ROWS, SG_COLS], torch.bfloat16, init_value=torch.randn),
    TensorSpec("up", [SG_ROWS, SG_COLS], torch.bfloat16, init_value=torch.randn),
    TensorSpec("h", [SG_ROWS, SG_COLS], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# One Adam step on a flat parameter (viewed [rows, cols]), f32, bias-corrected moments.

AD_ROWS, AD_COLS, AD_BLOCK = 128, 512, 8
AD_LR, AD_B1, AD_B2, AD_EPS, AD_STEP = 1e-3, 0.9, 0.999, 1e-8, 10


@ts.kernel
def adam_rows(
    p: ts.Tensor[[AD_BLOCK, AD_COLS], ts.f32],
    g: ts.Tensor[[AD_BLOCK, AD_COLS], ts.f32],
    m: ts.Tensor[[AD_BLOCK, AD_COLS], ts.f32],
    v: ts.Tensor[[AD_BLOCK, AD_COLS], ts.f32],
    p_out: ts.Out[[AD_BLOCK, AD_COLS], ts.f32],
    m_out: ts.Out[[AD_BLOCK, AD_COLS], ts.f32],
    v_out: ts.Out[[AD_BLOCK, AD_COLS], ts.f32],
    lr: ts.Scalar[ts.f32],
    bc1: ts.Scalar[ts.f32],
    bc2: ts.Scalar[ts.f32],
):
    gt = ts.load(g, [0, 0], [AD_BLOCK, AD_COLS])
    m_new = ts.load(m, [0, 0], [AD_BLOCK, AD_COLS]) * AD_B1 + gt * (1.0 - AD_B1)
    v_new = ts.load(v, [0, 0], [AD_BLOCK, AD_COLS]) * AD_B2 + gt * gt * (1.0 - AD_B2)
    m_hat = m_new * bc1
    v_hat = v_new / bc2
    p_new = ts.load(p, [0, 0], [AD_BLOCK, AD_COLS]) - lr * m_hat / (ts.sqrt(v_hat) + AD_EPS)
    ts.store(p_out, [0, 0], p_new)
    ts.store(m_out, [0, 0], m_new)
    ts.store(v_out, [0, 0], v_new)


@ts.jit
def adam_step(
    p: ts.Tensor[[AD_ROWS, AD_COLS], ts.f32],
    g: ts.Tensor[[AD_ROWS, AD_COLS], ts.f32],
    m: ts.Tensor[[AD_ROWS, AD_COLS], ts.f32],
    v: ts.Tensor[[AD_ROWS, AD_COLS], ts.f32],
    p_out: ts.Out[[AD_ROWS, AD_COLS], ts.f32],
    m_out: ts.Out[[AD_ROWS, AD_COLS], ts.f32],
    v_out: ts.Out[[AD_ROWS, AD_COLS], ts.f32],
    lr: ts.Scalar[ts.f32],
    bc1: ts.Scalar[ts.f32],
    bc2: ts.Scalar[ts.f32],
):
    for r in ts.range(0, AD_ROWS, AD_BLOCK):
        adam_rows(p[r : r + AD_BLOCK, :], g[r : r + AD_BLOCK, :], m[r : r + AD_BLOCK, :], v[r : r + AD_BLOCK, :],
                  p_out[r : r + AD_BLOCK, :], m_out[r : r + AD_BLOCK, :], v_out[r : r + AD_BLOCK, :], lr, bc1, bc2)


def adam_golden(t):
    p, g, m, v = (t[n].double() for n in ("p", "g", "m", "v"))
    m = AD_B1 * m + (1 - AD_B1) * g
    v = AD_B2 * v + (1 - AD_B2) * g * g
    m_hat = m / (1 - AD_B1**AD_STEP)
    v_hat = v / (1 - AD_B2**AD_STEP)
    t["p_out"][:] = (p - AD_LR * m_hat / (v_hat.sqrt() + AD_EPS)).float()
    t["m_out"][:] = m.float()
    t["v_out"][:] = v.float()


AD_SPECS = [
    TensorSpec("p", [AD_ROWS, AD_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("g", [AD_ROWS, AD_COLS], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.01),
    TensorSpec("m", [AD_ROWS, AD_COLS], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.005),
    TensorSpec("v", [AD_ROWS, AD_COLS], torch.float32, init_value=lambda s, dtype: torch.rand(s, dtype=dtype) * 1e-4),
    TensorSpec("p_out", [AD_ROWS, AD_COLS], torch.float32, is_output=True),
    TensorSpec("m_out", [AD_ROWS, AD_COLS], torch.float32, is_output=True),
    TensorSpec("v_out", [AD_ROWS, AD_COLS], torch.float32, is_output=True),
    ScalarSpec("lr", torch.float32, AD_LR),
    ScalarSpec("bc1", torch.float32, 1 - AD_B1**AD_STEP),
    ScalarSpec("bc2", torch.float32, 1 - AD_B2**AD_STEP),
]


BUGS = (
    BlindBug(
        name="bias_silu_bias_row_index",
        what="the bias is sliced with the row-block index r instead of the column-block index c",
        pattern="wrong_slice",
        program=bias_silu,
        specs=BA_SPECS,
        golden=bias_silu_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="bias_silu_tile",
        op="call",
        line=(bias_silu, "bias[:, r : r + BA_BC]"),
        fixed="bias_silu_tile(x[r : r + BA_BR, c : c + BA_BC], bias[:, c : c + BA_BC], y[r : r + BA_BR, c : c + BA_BC])",
    ),
    BlindBug(
        name="quantize_i8_trunc",
        what="the int8 quantization cast truncates toward zero instead of rounding to nearest",
        pattern="rounding_mode",
        program=quantize_i8,
        specs=QI_SPECS,
        golden=quantize_i8_golden,
        rtol=0.0,
        atol=0.0,
        category="precision",
        kernel="quantize_rows_i8",
        op="cast",
        line=(quantize_rows_i8, 'ts.store(q, [0, 0], ts.cast(t * inv, ts.i8, mode="trunc"))'),
        fixed='ts.store(q, [0, 0], ts.cast(t * inv, ts.i8, mode="rint"))',
        verdict="guilty",
    ),
    BlindBug(
        name="quantize_kv_u8_floor",
        what="the uint8 KV-cache quantization floors instead of rounding to nearest",
        pattern="rounding_mode",
        program=quantize_kv_u8,
        specs=QU_SPECS,
        golden=quantize_kv_golden,
        rtol=0.0,
        atol=0.0,
        category="precision",
        kernel="quantize_head_u8",
        op="cast",
        line=(quantize_head_u8, 'ts.store(q, [0, 0], ts.cast(z, ts.u8, mode="floor"))'),
        fixed="ts.store(q, [0, 0], ts.cast(z, ts.u8))",
        verdict="guilty",
    ),
    BlindBug(
        name="rope_sin_table_no_offset",
        what="the sin table is sliced at rows 0:32 for every block instead of at the block's positions",
        pattern="wrong_slice",
        program=rope,
        specs=RP_SPECS,
        golden=rope_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="rope_tokens",
        op="call",
        line=(rope, "sin[0:RP_BLOCK, :]"),
        fixed="rope_tokens(x[p : p + RP_BLOCK, :, :], cos[p : p + RP_BLOCK, :], sin[p : p + RP_BLOCK, :], y[p : p + RP_BLOCK, :, :])",
    ),
    BlindBug(
        name="gelu_tanh_square_not_cube",
        what="the tanh-GELU inner term uses 0.044715 * x^2 instead of 0.044715 * x^3",
        pattern="missing_term",
        program=gelu_tanh,
        specs=GL_SPECS,
        golden=gelu_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="gelu_tanh_rows",
        op="mul",
        line=(gelu_tanh_rows, "inner = GL_K * (t + 0.044715 * t * t)"),
        fixed="inner = GL_K * (t + 0.044715 * t * t * t)",
    ),
    BlindBug(
        name="swiglu_gate_up_swapped",
        what="SiLU is applied to the up projection and multiplied by the gate, instead of silu(gate) * up",
        pattern="swapped_operands",
        program=swiglu,
        specs=SG_SPECS,
        golden=swiglu_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="swiglu_rows",
        op="silu",
        line=(swiglu_rows, "ts.silu(u) * g"),
        fixed="ts.store(h, [0, 0], ts.cast(ts.silu(g) * u, ts.bf16))",
    ),
    BlindBug(
        name="adam_bias_correction_mul",
        what="the first moment is multiplied by the bias correction 1 - beta1^t instead of divided by it",
        pattern="swapped_operands",
        program=adam_step,
        specs=AD_SPECS,
        golden=adam_golden,
        rtol=1e-5,
        atol=1e-6,
        category="algorithm",
        kernel="adam_rows",
        op="mul",
        line=(adam_rows, "m_hat = m_new * bc1"),
        fixed="m_hat = m_new / bc1",
    ),
)
