"""Block-by-block kernels of transformer and vision workloads: interleaved RoPE, W8A16 linear,
linear + bias + GELU, chunked-prefill causal attention, MQA decode over a left-padded cache, KV
cache append, Mamba's causal depthwise conv1d, squeeze-and-excitation, a bias gradient, SwiGLU's
gate/up projection, a blocked prefix sum, cross-entropy backward with ignored tokens, layer norm
over a packed batch, greedy argmax + embedding gather, masked mean pooling."""

from __future__ import annotations

import math

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Interleaved (GPT-J style) rotary embedding: the pairs are (x[2i], x[2i + 1]), so the
# orchestration views x as [T, H, D/2, 2] and hands the kernel the even and the odd lanes as two
# strided [BT, D/2] regions. bf16 activations, f32 tables.

RP_T, RP_H, RP_HALF, RP_BT = 256, 4, 32, 64


@ts.kernel
def rope_pairs_block(
    x_even: ts.Tensor[[RP_BT, RP_HALF], ts.bf16],
    x_odd: ts.Tensor[[RP_BT, RP_HALF], ts.bf16],
    cos: ts.Tensor[[RP_BT, RP_HALF], ts.f32],
    sin: ts.Tensor[[RP_BT, RP_HALF], ts.f32],
    y_even: ts.Out[[RP_BT, RP_HALF], ts.bf16],
    y_odd: ts.Out[[RP_BT, RP_HALF], ts.bf16],
):
    xe = ts.cast(ts.load(x_even, [0, 0], [RP_BT, RP_HALF]), ts.f32)
    xo = ts.cast(ts.load(x_odd, [0, 0], [RP_BT, RP_HALF]), ts.f32)
    c = ts.load(cos, [0, 0], [RP_BT, RP_HALF])
    s = ts.load(sin, [0, 0], [RP_BT, RP_HALF])
    ts.store(y_even, [0, 0], ts.cast(xe * c - xo * s, ts.bf16))
    ts.store(y_odd, [0, 0], ts.cast(xe * s + xo * c, ts.bf16))


@ts.jit
def rope_interleaved(
    x: ts.Tensor[[RP_T, RP_H, RP_HALF, 2], ts.bf16],
    cos: ts.Tensor[[RP_T, RP_HALF], ts.f32],
    sin: ts.Tensor[[RP_T, RP_HALF], ts.f32],
    y: ts.Out[[RP_T, RP_H, RP_HALF, 2], ts.bf16],
):
    for r in ts.range(0, RP_T, RP_BT):
        for h in ts.range(0, RP_H):
            rope_pairs_block(
                x[r : r + RP_BT, h, :, 0], x[r : r + RP_BT, h, :, 1],
                sin[r : r + RP_BT, :], cos[r : r + RP_BT, :],
                y[r : r + RP_BT, h, :, 0], y[r : r + RP_BT, h, :, 1],
            )


def rope_table(fn):
    def make(shape, dtype):
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, RP_HALF, dtype=torch.float64) / RP_HALF))
        ang = torch.arange(shape[0], dtype=torch.float64)[:, None] * inv_freq[None, :]
        return fn(ang).to(dtype)

    return make


def rope_interleaved_golden(t):
    x = t["x"].float()
    c, s = t["cos"][:, None, :], t["sin"][:, None, :]
    xe, xo = x[..., 0], x[..., 1]
    t["y"][..., 0] = (xe * c - xo * s).to(torch.bfloat16)
    t["y"][..., 1] = (xe * s + xo * c).to(torch.bfloat16)


RP_SPECS = [
    TensorSpec("x", [RP_T, RP_H, RP_HALF, 2], torch.bfloat16, init_value=torch.randn),
    TensorSpec("cos", [RP_T, RP_HALF], torch.float32, init_value=rope_table(torch.cos)),
    TensorSpec("sin", [RP_T, RP_HALF], torch.float32, init_value=rope_table(torch.sin)),
    TensorSpec("y", [RP_T, RP_H, RP_HALF, 2], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Weight-only int8 linear (W8A16): y = x @ (w * scale).T with w int8 in nn.Linear's [N, K] layout
# and one f32 scale per output channel, stored [N, 1]. Dequantized after the K loop.

W8_M, W8_K, W8_N, W8_BM, W8_BN, W8_BK = 128, 256, 128, 64, 64, 64


@ts.kernel
def w8a16_linear_tile(
    x: ts.Tensor[[W8_BM, W8_K], ts.bf16],
    w: ts.Tensor[[W8_BN, W8_K], ts.i8],
    scale: ts.Tensor[[W8_BN, 1], ts.f32],
    y: ts.Out[[W8_BM, W8_BN], ts.bf16],
):
    acc = ts.zeros([W8_BM, W8_BN], ts.f32)
    for k in ts.range(0, W8_K, W8_BK):
        a = ts.load(x, [0, k], [W8_BM, W8_BK])
        b = ts.cast(ts.load(w, [0, k], [W8_BN, W8_BK]), ts.bf16)
        acc = acc + ts.matmul(a, b, transpose_b=True)
    sc = ts.load(scale, [0, 0], [W8_BN, 1])
    ts.store(y, [0, 0], ts.cast(acc * sc, ts.bf16))


@ts.jit
def w8a16_linear(
    x: ts.Tensor[[W8_M, W8_K], ts.bf16],
    w: ts.Tensor[[W8_N, W8_K], ts.i8],
    scale: ts.Tensor[[W8_N, 1], ts.f32],
    y: ts.Out[[W8_M, W8_N], ts.bf16],
):
    for m in ts.range(0, W8_M, W8_BM):
        for n in ts.range(0, W8_N, W8_BN):
            w8a16_linear_tile(x[m : m + W8_BM, :], w[n : n + W8_BN, :], scale[n : n + W8_BN, :], y[m : m + W8_BM, n : n + W8_BN])


def w8a16_golden(t):
    w = t["w"].double() * t["scale"].double()
    t["y"][:] = (t["x"].double() @ w.T).to(torch.bfloat16)


W8_SPECS = [
    TensorSpec("x", [W8_M, W8_K], torch.bfloat16, init_value=torch.randn),
    TensorSpec("w", [W8_N, W8_K], torch.int8, init_value=lambda s, dtype: torch.randint(-127, 128, s, dtype=dtype)),
    TensorSpec("scale", [W8_N, 1], torch.float32, init_value=lambda s, dtype: (0.002 + 0.01 * torch.rand(s)).to(dtype)),
    TensorSpec("y", [W8_M, W8_N], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Linear layer with a fused bias + GELU epilogue (the first half of a BERT/ViT MLP), f32.

BG_M, BG_K, BG_N, BG_BM, BG_BN, BG_BK = 128, 256, 256, 64, 64, 64


@ts.kernel
def linear_bias_gelu_tile(
    x: ts.Tensor[[BG_BM, BG_K], ts.f32],
    w: ts.Tensor[[BG_K, BG_BN], ts.f32],
    b: ts.Tensor[[1, BG_BN], ts.f32],
    y: ts.Out[[BG_BM, BG_BN], ts.f32],
):
    acc = ts.zeros([BG_BM, BG_BN], ts.f32)
    for k in ts.range(0, BG_K, BG_BK):
        acc = acc + ts.matmul(ts.load(x, [0, k], [BG_BM, BG_BK]), ts.load(w, [k, 0], [BG_BK, BG_BN]))
    bias = ts.load(b, [0, 0], [1, BG_BN])
    ts.store(y, [0, 0], ts.gelu(acc) + bias)


@ts.jit
def linear_bias_gelu(
    x: ts.Tensor[[BG_M, BG_K], ts.f32],
    w: ts.Tensor[[BG_K, BG_N], ts.f32],
    b: ts.Tensor[[1, BG_N], ts.f32],
    y: ts.Out[[BG_M, BG_N], ts.f32],
):
    for m in ts.range(0, BG_M, BG_BM):
        for n in ts.range(0, BG_N, BG_BN):
            linear_bias_gelu_tile(x[m : m + BG_BM, :], w[:, n : n + BG_BN], b[:, n : n + BG_BN], y[m : m + BG_BM, n : n + BG_BN])


def linear_bias_gelu_golden(t):
    h = t["x"].double() @ t["w"].double() + t["b"].double()
    t["y"][:] = torch.nn.functional.gelu(h).float()


BG_SPECS = [
    TensorSpec("x", [BG_M, BG_K], torch.float32, init_value=torch.randn),
    TensorSpec("w", [BG_K, BG_N], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 16.0),
    TensorSpec("b", [1, BG_N], torch.float32, init_value=torch.randn),
    TensorSpec("y", [BG_M, BG_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Chunked prefill: 64 new tokens attend causally to a KV cache that already holds 64 earlier
# tokens (query i sits at position PAST + i and sees keys 0..PAST + i). Online softmax over key
# blocks up to the diagonal, bf16 q/k/v, f32 scores.

CP_H, CP_PAST, CP_T, CP_D, CP_BQ, CP_BK = 4, 64, 64, 64, 32, 32
CP_S = CP_PAST + CP_T
CP_SCALE = 1.0 / math.sqrt(CP_D)


@ts.kernel
def prefill_attention_block(
    q: ts.Tensor[[CP_BQ, CP_D], ts.bf16],
    k: ts.Tensor[[CP_S, CP_D], ts.bf16],
    v: ts.Tensor[[CP_S, CP_D], ts.bf16],
    o: ts.Out[[CP_BQ, CP_D], ts.bf16],
    q_pos: ts.Scalar[ts.i32],
):
    qt = ts.load(q, [0, 0], [CP_BQ, CP_D])
    m = ts.full([CP_BQ, 1], float("-inf"), ts.f32)
    l = ts.zeros([CP_BQ, 1], ts.f32)
    acc = ts.zeros([CP_BQ, CP_D], ts.f32)
    qpos = ts.iota([CP_BQ, 1], dim=0) + q_pos
    for j in ts.range(0, q_pos + CP_BQ, CP_BK):
        s = ts.matmul(qt, ts.load(k, [j, 0], [CP_BK, CP_D]), transpose_b=True) * CP_SCALE
        s = ts.where(ts.iota([1, CP_BK]) + j < qpos, s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        alpha = ts.exp(m - m_new)
        p = ts.exp(s - m_new)
        l = l * alpha + ts.row_sum(p)
        acc = acc * alpha + ts.matmul(ts.cast(p, ts.bf16), ts.load(v, [j, 0], [CP_BK, CP_D]))
        m = m_new
    ts.store(o, [0, 0], ts.cast(acc / l, ts.bf16))


@ts.jit
def chunked_prefill(
    q: ts.Tensor[[CP_H, CP_T, CP_D], ts.bf16],
    k: ts.Tensor[[CP_H, CP_S, CP_D], ts.bf16],
    v: ts.Tensor[[CP_H, CP_S, CP_D], ts.bf16],
    o: ts.Out[[CP_H, CP_T, CP_D], ts.bf16],
):
    for h in ts.range(0, CP_H):
        for r in ts.range(0, CP_T, CP_BQ):
            prefill_attention_block(q[h, r : r + CP_BQ, :], k[h, :, :], v[h, :, :], o[h, r : r + CP_BQ, :], CP_PAST + r)


def chunked_prefill_golden(t):
    q, k, v = (t[n].double() for n in ("q", "k", "v"))
    qpos = torch.arange(CP_T)[:, None] + CP_PAST
    allowed = torch.arange(CP_S)[None, :] <= qpos
    s = (q @ k.transpose(-1, -2)) * CP_SCALE
    s = s.masked_fill(~allowed, float("-inf"))
    t["o"][:] = (torch.softmax(s, dim=-1) @ v).to(torch.bfloat16)


CP_SPECS = [
    TensorSpec("q", [CP_H, CP_T, CP_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("k", [CP_H, CP_S, CP_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("v", [CP_H, CP_S, CP_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("o", [CP_H, CP_T, CP_D], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Multi-query decode attention for a batch generated with left padding (HF generate's layout):
# sequence b's cache holds pad[b] padding slots first, then its tokens. 8 query heads share one
# KV head; one task per sequence streams 32-key blocks with an online softmax, f32.

MQ_B, MQ_H, MQ_S, MQ_D, MQ_BK = 4, 8, 128, 64, 32
MQ_SCALE = 1.0 / math.sqrt(MQ_D)
MQ_PADS = [0, 13, 70, 100]


@ts.kernel
def mqa_decode_seq(
    q: ts.Tensor[[MQ_H, MQ_D], ts.f32],
    k: ts.Tensor[[MQ_S, MQ_D], ts.f32],
    v: ts.Tensor[[MQ_S, MQ_D], ts.f32],
    o: ts.Out[[MQ_H, MQ_D], ts.f32],
    pad: ts.Scalar[ts.i32],
):
    qt = ts.load(q, [0, 0], [MQ_H, MQ_D])
    m = ts.full([MQ_H, 1], float("-inf"), ts.f32)
    l = ts.zeros([MQ_H, 1], ts.f32)
    acc = ts.zeros([MQ_H, MQ_D], ts.f32)
    for j in ts.range(0, MQ_S, MQ_BK):
        s = ts.matmul(qt, ts.load(k, [j, 0], [MQ_BK, MQ_D]), transpose_b=True) * MQ_SCALE
        s = ts.where(ts.iota([1, MQ_BK]) + j >= pad, s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        alpha = ts.exp(m - m_new)
        p = ts.exp(s - m_new)
        l = l * alpha + ts.row_sum(p)
        acc = acc * alpha + ts.matmul(p, ts.load(v, [j, 0], [MQ_BK, MQ_D]))
        m = m_new
    ts.store(o, [0, 0], acc / l)


@ts.jit
def mqa_decode_left_pad(
    q: ts.Tensor[[MQ_B, MQ_H, MQ_D], ts.f32],
    k_cache: ts.Tensor[[MQ_B, MQ_S, MQ_D], ts.f32],
    v_cache: ts.Tensor[[MQ_B, MQ_S, MQ_D], ts.f32],
    pads: ts.Tensor[[MQ_B], ts.i32],
    o: ts.Out[[MQ_B, MQ_H, MQ_D], ts.f32],
):
    for b in ts.range(0, MQ_B):
        pad = pads[b]
        mqa_decode_seq(q[b, :, :], k_cache[b, :, :], v_cache[b, :, :], o[b, :, :], pad)


def mqa_decode_golden(t):
    q, k, v = (t[n].double() for n in ("q", "k_cache", "v_cache"))
    s = (q @ k.transpose(-1, -2)) * MQ_SCALE  # [B, H, S]
    keep = torch.arange(MQ_S)[None, :] >= t["pads"].long()[:, None]  # [B, S]
    s = s.masked_fill(~keep[:, None, :], float("-inf"))
    t["o"][:] = (torch.softmax(s, dim=-1) @ v).float()


MQ_SPECS = [
    TensorSpec("q", [MQ_B, MQ_H, MQ_D], torch.float32, init_value=torch.randn),
    TensorSpec("k_cache", [MQ_B, MQ_S, MQ_D], torch.float32, init_value=torch.randn),
    TensorSpec("v_cache", [MQ_B, MQ_S, MQ_D], torch.float32, init_value=torch.randn),
    TensorSpec("pads", [MQ_B], torch.int32, init_value=torch.tensor(MQ_PADS, dtype=torch.int32)),
    TensorSpec("o", [MQ_B, MQ_H, MQ_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# KV-cache append after a prefill chunk: the 16 new keys/values of each (sequence, head) are cast
# to the bf16 cache and written at the sequence's current length, read from cache_lens.

KV_B, KV_H, KV_S, KV_D, KV_NEW = 4, 2, 128, 64, 16
KV_LENS = [37, 5, 100, 64]


@ts.kernel
def kv_append(
    k_new: ts.Tensor[[KV_NEW, KV_D], ts.f32],
    v_new: ts.Tensor[[KV_NEW, KV_D], ts.f32],
    k_dst: ts.Out[[KV_NEW, KV_D], ts.bf16],
    v_dst: ts.Out[[KV_NEW, KV_D], ts.bf16],
):
    ts.store(k_dst, [0, 0], ts.cast(ts.load(k_new, [0, 0], [KV_NEW, KV_D]), ts.bf16))
    ts.store(v_dst, [0, 0], ts.cast(ts.load(v_new, [0, 0], [KV_NEW, KV_D]), ts.bf16))


@ts.jit
def kv_cache_append(
    k_new: ts.Tensor[[KV_B, KV_H, KV_NEW, KV_D], ts.f32],
    v_new: ts.Tensor[[KV_B, KV_H, KV_NEW, KV_D], ts.f32],
    cache_lens: ts.Tensor[[KV_B], ts.i32],
    k_cache: ts.InOut[[KV_B, KV_H, KV_S, KV_D], ts.bf16],
    v_cache: ts.InOut[[KV_B, KV_H, KV_S, KV_D], ts.bf16],
):
    for b in ts.range(0, KV_B):
        pos = cache_lens[b]
        for h in ts.range(0, KV_H):
            kv_append(k_new[b, h, :, :], v_new[b, h, :, :],
                      k_cache[b, h, pos - 1 : pos - 1 + KV_NEW, :], v_cache[b, h, pos - 1 : pos - 1 + KV_NEW, :])


def kv_append_golden(t):
    for b, n in enumerate(t["cache_lens"].tolist()):
        t["k_cache"][b, :, n : n + KV_NEW, :] = t["k_new"][b].to(torch.bfloat16)
        t["v_cache"][b, :, n : n + KV_NEW, :] = t["v_new"][b].to(torch.bfloat16)


def stale_cache(shape, dtype):
    return torch.randn(shape).to(dtype)


KV_SPECS = [
    TensorSpec("k_new", [KV_B, KV_H, KV_NEW, KV_D], torch.float32, init_value=torch.randn),
    TensorSpec("v_new", [KV_B, KV_H, KV_NEW, KV_D], torch.float32, init_value=torch.randn),
    TensorSpec("cache_lens", [KV_B], torch.int32, init_value=torch.tensor(KV_LENS, dtype=torch.int32)),
    TensorSpec("k_cache", [KV_B, KV_H, KV_S, KV_D], torch.bfloat16, init_value=stale_cache, is_output=True),
    TensorSpec("v_cache", [KV_B, KV_H, KV_S, KV_D], torch.bfloat16, init_value=stale_cache, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Mamba's causal depthwise conv1d (width 4) + SiLU, channels-last: the input comes left-padded by
# 3 zero rows, xp [T + 3, C], and y[t, c] = silu(b[c] + sum_k w[k, c] * xp[t + k, c]) (torch's
# conv1d is a cross-correlation: tap k meets input row t + k).

DW_T, DW_C, DW_K, DW_BT, DW_BC = 512, 128, 4, 64, 64


@ts.kernel
def causal_conv1d_block(
    xp: ts.Tensor[[DW_BT + DW_K - 1, DW_BC], ts.f32],
    w: ts.Tensor[[DW_K, DW_BC], ts.f32],
    bias: ts.Tensor[[1, DW_BC], ts.f32],
    y: ts.Out[[DW_BT, DW_BC], ts.f32],
):
    acc = ts.zeros([DW_BT, DW_BC], ts.f32)
    for k in ts.range(0, DW_K):
        xk = ts.load(xp, [k, 0], [DW_BT, DW_BC])
        wk = ts.load(w, [DW_K - 1 - k, 0], [1, DW_BC])
        acc = acc + xk * wk
    ts.store(y, [0, 0], ts.silu(acc + ts.load(bias, [0, 0], [1, DW_BC])))


@ts.jit
def causal_conv1d(
    xp: ts.Tensor[[DW_T + DW_K - 1, DW_C], ts.f32],
    w: ts.Tensor[[DW_K, DW_C], ts.f32],
    bias: ts.Tensor[[1, DW_C], ts.f32],
    y: ts.Out[[DW_T, DW_C], ts.f32],
):
    for t in ts.range(0, DW_T, DW_BT):
        for c in ts.range(0, DW_C, DW_BC):
            causal_conv1d_block(xp[t : t + DW_BT + DW_K - 1, c : c + DW_BC], w[:, c : c + DW_BC], bias[:, c : c + DW_BC],
                                y[t : t + DW_BT, c : c + DW_BC])


def left_padded(shape, dtype):
    x = torch.randn(shape[0] - (DW_K - 1), shape[1], dtype=dtype)
    return torch.nn.functional.pad(x, (0, 0, DW_K - 1, 0))


def causal_conv1d_golden(t):
    x = t["xp"].double().T[None]  # [1, C, T + 3]
    w = t["w"].double().T[:, None, :]  # [C, 1, K]
    y = torch.nn.functional.conv1d(x, w, t["bias"].double()[0], groups=DW_C)  # [1, C, T]
    t["y"][:] = torch.nn.functional.silu(y[0].T).float()


DW_SPECS = [
    TensorSpec("xp", [DW_T + DW_K - 1, DW_C], torch.float32, init_value=left_padded),
    TensorSpec("w", [DW_K, DW_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.5),
    TensorSpec("bias", [1, DW_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.1),
    TensorSpec("y", [DW_T, DW_C], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Squeeze-and-excitation block over channels-last feature maps [N, H*W, C]: global average pool
# (read 64 pixels at a time), FC -> ReLU -> FC -> sigmoid, then every pixel scaled by its
# channel's gate.

SE_N, SE_HW, SE_C, SE_R, SE_BP = 4, 256, 64, 16, 64


@ts.kernel
def se_squeeze_excite(
    x: ts.Tensor[[SE_HW, SE_C], ts.f32],
    w1: ts.Tensor[[SE_C, SE_R], ts.f32],
    b1: ts.Tensor[[1, SE_R], ts.f32],
    w2: ts.Tensor[[SE_R, SE_C], ts.f32],
    b2: ts.Tensor[[1, SE_C], ts.f32],
    gate: ts.Out[[1, SE_C], ts.f32],
):
    acc = ts.zeros([1, SE_C], ts.f32)
    for p in ts.range(0, SE_HW, SE_BP):
        t = ts.load(x, [p, 0], [SE_BP, SE_C])
        acc = acc + ts.col_mean(t)
    pooled = acc * (1.0 / SE_HW)
    h = ts.maximum(ts.matmul(pooled, ts.load(w1, [0, 0], [SE_C, SE_R])) + ts.load(b1, [0, 0], [1, SE_R]), 0.0)
    z = ts.matmul(h, ts.load(w2, [0, 0], [SE_R, SE_C])) + ts.load(b2, [0, 0], [1, SE_C])
    ts.store(gate, [0, 0], ts.sigmoid(z))


@ts.kernel
def se_scale(x: ts.Tensor[[SE_BP, SE_C], ts.f32], gate: ts.Tensor[[1, SE_C], ts.f32], y: ts.Out[[SE_BP, SE_C], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [SE_BP, SE_C]) * ts.load(gate, [0, 0], [1, SE_C]))


@ts.jit
def squeeze_excite(
    x: ts.Tensor[[SE_N, SE_HW, SE_C], ts.f32],
    w1: ts.Tensor[[SE_C, SE_R], ts.f32],
    b1: ts.Tensor[[1, SE_R], ts.f32],
    w2: ts.Tensor[[SE_R, SE_C], ts.f32],
    b2: ts.Tensor[[1, SE_C], ts.f32],
    y: ts.Out[[SE_N, SE_HW, SE_C], ts.f32],
):
    gates = ts.create_tensor([SE_N, 1, SE_C], ts.f32)
    for n in ts.range(0, SE_N):
        se_squeeze_excite(x[n, :, :], w1, b1, w2, b2, gates[n, :, :])
    for n in ts.range(0, SE_N):
        for p in ts.range(0, SE_HW, SE_BP):
            se_scale(x[n, p : p + SE_BP, :], gates[n, :, :], y[n, p : p + SE_BP, :])


def squeeze_excite_golden(t):
    x = t["x"].double()
    pooled = x.mean(dim=1, keepdim=True)  # [N, 1, C]
    h = torch.relu(pooled @ t["w1"].double() + t["b1"].double())
    g = torch.sigmoid(h @ t["w2"].double() + t["b2"].double())
    t["y"][:] = (x * g).float()


SE_SPECS = [
    TensorSpec("x", [SE_N, SE_HW, SE_C], torch.float32, init_value=lambda s, dtype: torch.relu(torch.randn(s, dtype=dtype) + 0.5)),
    TensorSpec("w1", [SE_C, SE_R], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.3),
    TensorSpec("b1", [1, SE_R], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.1),
    TensorSpec("w2", [SE_R, SE_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.3),
    TensorSpec("b2", [1, SE_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.1),
    TensorSpec("y", [SE_N, SE_HW, SE_C], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Bias gradient of a linear layer: db = dy.sum(0) over 512 tokens of a bf16 upstream gradient.
# Split over row blocks into f32 partials, then one task per column block adds the partials.

BGR_N, BGR_D, BGR_BR, BGR_BC, BGR_CH = 512, 128, 128, 64, 32
BGR_NB = BGR_N // BGR_BR


@ts.kernel
def bias_grad_partial(dy: ts.Tensor[[BGR_BR, BGR_BC], ts.bf16], part: ts.Out[[1, BGR_BC], ts.f32]):
    acc = ts.zeros([1, BGR_BC], ts.f32)
    for r in ts.range(0, BGR_BR, BGR_CH):
        t = ts.load(dy, [r, 0], [BGR_CH, BGR_BC])
        acc = acc + ts.cast(ts.col_sum(t), ts.f32)
    ts.store(part, [0, 0], acc)


@ts.kernel
def bias_grad_final(part: ts.Tensor[[BGR_NB, BGR_BC], ts.f32], db: ts.Out[[1, BGR_BC], ts.f32]):
    ts.store(db, [0, 0], ts.col_sum(ts.load(part, [0, 0], [BGR_NB, BGR_BC])))


@ts.jit
def bias_grad(dy: ts.Tensor[[BGR_N, BGR_D], ts.bf16], db: ts.Out[[1, BGR_D], ts.f32]):
    part = ts.create_tensor([BGR_NB, BGR_D], ts.f32)
    for i in ts.range(0, BGR_NB):
        for c in ts.range(0, BGR_D, BGR_BC):
            bias_grad_partial(dy[i * BGR_BR : i * BGR_BR + BGR_BR, c : c + BGR_BC], part[i : i + 1, c : c + BGR_BC])
    for c in ts.range(0, BGR_D, BGR_BC):
        bias_grad_final(part[:, c : c + BGR_BC], db[:, c : c + BGR_BC])


def bias_grad_golden(t):
    t["db"][:] = t["dy"].double().sum(dim=0, keepdim=True).float()


BGR_SPECS = [
    TensorSpec("dy", [BGR_N, BGR_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("db", [1, BGR_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# SwiGLU MLP, gate/up half: h = silu(x @ Wg.T) * (x @ Wu.T), weights in nn.Linear's [F, D]
# layout, bf16 in and out, f32 accumulation, 64 x 64 output tiles.

SW_M, SW_D, SW_F, SW_BM, SW_BF, SW_BK = 128, 128, 256, 64, 64, 64


@ts.kernel
def swiglu_gate_up_tile(
    x: ts.Tensor[[SW_BM, SW_D], ts.bf16],
    wg: ts.Tensor[[SW_BF, SW_D], ts.bf16],
    wu: ts.Tensor[[SW_BF, SW_D], ts.bf16],
    h: ts.Out[[SW_BM, SW_BF], ts.bf16],
):
    g = ts.zeros([SW_BM, SW_BF], ts.f32)
    u = ts.zeros([SW_BM, SW_BF], ts.f32)
    for k in ts.range(0, SW_D, SW_BK):
        a = ts.load(x, [0, k], [SW_BM, SW_BK])
        g = g + ts.matmul(a, ts.load(wg, [0, k], [SW_BF, SW_BK]), transpose_b=True)
        u = u + ts.matmul(a, ts.load(wu, [0, k], [SW_BF, SW_BK]))
    ts.store(h, [0, 0], ts.cast(ts.silu(g) * u, ts.bf16))


@ts.jit
def swiglu_gate_up(
    x: ts.Tensor[[SW_M, SW_D], ts.bf16],
    wg: ts.Tensor[[SW_F, SW_D], ts.bf16],
    wu: ts.Tensor[[SW_F, SW_D], ts.bf16],
    h: ts.Out[[SW_M, SW_F], ts.bf16],
):
    for m in ts.range(0, SW_M, SW_BM):
        for f in ts.range(0, SW_F, SW_BF):
            swiglu_gate_up_tile(x[m : m + SW_BM, :], wg[f : f + SW_BF, :], wu[f : f + SW_BF, :], h[m : m + SW_BM, f : f + SW_BF])


def swiglu_gate_up_golden(t):
    x = t["x"].double()
    g = x @ t["wg"].double().T
    u = x @ t["wu"].double().T
    t["h"][:] = (torch.nn.functional.silu(g) * u).to(torch.bfloat16)


SW_SPECS = [
    TensorSpec("x", [SW_M, SW_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("wg", [SW_F, SW_D], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) * 0.1).to(dtype)),
    TensorSpec("wu", [SW_F, SW_D], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) * 0.1).to(dtype)),
    TensorSpec("h", [SW_M, SW_F], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Prefix sum along rows in blocks of 128 columns: pass 1 scans each block locally (a matmul with
# an upper-triangular ones tile) and writes the block's total; pass 2 adds to each block the
# totals of the blocks before it.

CS_R, CS_L, CS_RB, CS_BL = 64, 1024, 32, 128
CS_NB = CS_L // CS_BL


@ts.kernel
def scan_block_local(
    x: ts.Tensor[[CS_RB, CS_BL], ts.f32],
    local: ts.Out[[CS_RB, CS_BL], ts.f32],
    total: ts.Out[[CS_RB, 1], ts.f32],
):
    t = ts.load(x, [0, 0], [CS_RB, CS_BL])
    upper = ts.where(ts.iota([CS_BL, CS_BL], dim=0) <= ts.iota([CS_BL, CS_BL], dim=1), 1.0, 0.0)
    ts.store(local, [0, 0], ts.matmul(t, upper))
    ts.store(total, [0, 0], ts.row_sum(t))


@ts.kernel
def scan_add_carry(
    local: ts.Tensor[[CS_RB, CS_BL], ts.f32],
    totals: ts.Tensor[[CS_RB, CS_NB], ts.f32],
    y: ts.Out[[CS_RB, CS_BL], ts.f32],
    blk: ts.Scalar[ts.i32],
):
    carry = ts.zeros([CS_RB, 1], ts.f32)
    for j in ts.range(0, blk + 1):
        carry = carry + ts.load(totals, [0, j], [CS_RB, 1])
    ts.store(y, [0, 0], ts.load(local, [0, 0], [CS_RB, CS_BL]) + carry)


@ts.jit
def blocked_cumsum(x: ts.Tensor[[CS_R, CS_L], ts.f32], y: ts.Out[[CS_R, CS_L], ts.f32]):
    local = ts.create_tensor([CS_R, CS_L], ts.f32)
    totals = ts.create_tensor([CS_R, CS_NB], ts.f32)
    for r in ts.range(0, CS_R, CS_RB):
        for b in ts.range(0, CS_NB):
            c = b * CS_BL
            scan_block_local(x[r : r + CS_RB, c : c + CS_BL], local[r : r + CS_RB, c : c + CS_BL], totals[r : r + CS_RB, b : b + 1])
    for r in ts.range(0, CS_R, CS_RB):
        for b in ts.range(0, CS_NB):
            c = b * CS_BL
            scan_add_carry(local[r : r + CS_RB, c : c + CS_BL], totals[r : r + CS_RB, :], y[r : r + CS_RB, c : c + CS_BL], b)


def blocked_cumsum_golden(t):
    t["y"][:] = torch.cumsum(t["x"].double(), dim=1).float()


CS_SPECS = [
    TensorSpec("x", [CS_R, CS_L], torch.float32, init_value=torch.randn),
    TensorSpec("y", [CS_R, CS_L], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Cross-entropy backward (reduction="sum", ignore_index=-100) over a 1024-word vocabulary read in
# chunks of 256: dlogits = softmax(logits) - onehot(label) for kept tokens, 0 for ignored ones.
# Token id 0 is a real token here (it is frequent in the labels).

CE_N, CE_V, CE_BT, CE_CH = 64, 1024, 16, 256
CE_IGNORE = -100


@ts.kernel
def ce_backward_rows(
    logits: ts.Tensor[[CE_BT, CE_V], ts.f32],
    labels: ts.Tensor[[CE_BT, 1], ts.i32],
    dlogits: ts.Out[[CE_BT, CE_V], ts.f32],
):
    lab = ts.load(labels, [0, 0], [CE_BT, 1])
    m = ts.full([CE_BT, 1], float("-inf"), ts.f32)
    l = ts.zeros([CE_BT, 1], ts.f32)
    for c in ts.range(0, CE_V, CE_CH):
        t = ts.load(logits, [0, c], [CE_BT, CE_CH])
        m_new = ts.maximum(m, ts.row_max(t))
        l = l * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    inv = 1.0 / l
    keep = lab > 0
    for c in ts.range(0, CE_V, CE_CH):
        p = ts.exp(ts.load(logits, [0, c], [CE_BT, CE_CH]) - m) * inv
        hit = ts.iota([1, CE_CH]) + c == lab
        g = p - ts.where(hit, 1.0, 0.0)
        ts.store(dlogits, [0, c], ts.where(keep, g, 0.0))


@ts.jit
def ce_backward(
    logits: ts.Tensor[[CE_N, CE_V], ts.f32],
    labels: ts.Tensor[[CE_N, 1], ts.i32],
    dlogits: ts.Out[[CE_N, CE_V], ts.f32],
):
    for r in ts.range(0, CE_N, CE_BT):
        ce_backward_rows(logits[r : r + CE_BT, :], labels[r : r + CE_BT, :], dlogits[r : r + CE_BT, :])


def ce_labels(shape, dtype):
    g = torch.Generator().manual_seed(3)
    lab = torch.randint(0, CE_V, shape, generator=g)
    u = torch.rand(shape, generator=g)
    lab[u < 0.15] = 0  # a frequent token
    lab[u > 0.8] = CE_IGNORE  # padding
    return lab.to(dtype)


def ce_backward_golden(t):
    x = t["logits"].double().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(x, t["labels"][:, 0].long(), ignore_index=CE_IGNORE, reduction="sum")
    loss.backward()
    t["dlogits"][:] = x.grad.float()


CE_SPECS = [
    TensorSpec("logits", [CE_N, CE_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 2.0),
    TensorSpec("labels", [CE_N, 1], torch.int32, init_value=ce_labels),
    TensorSpec("dlogits", [CE_N, CE_V], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Layer norm (with bias) over a packed varlen batch: n_tokens real tokens at the front of a
# 256-row buffer, blocks of 32 rows, the last block ragged (valid=). Rows past n_tokens stay 0.

LN_ROWS, LN_D, LN_BT = 256, 128, 32


@ts.kernel
def layernorm_rows(
    x: ts.Tensor[[LN_BT, LN_D], ts.f32],
    gamma: ts.Tensor[[1, LN_D], ts.f32],
    beta: ts.Tensor[[1, LN_D], ts.f32],
    y: ts.Out[[LN_BT, LN_D], ts.f32],
    rows: ts.Scalar[ts.i32],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [LN_BT, LN_D], valid=(rows, LN_D), fill=0.0)
    mu = ts.row_mean(t)
    d = t - mu
    var = ts.row_mean(d * d)
    out = d * ts.rsqrt(var + eps) * ts.load(gamma, [0, 0], [1, LN_D]) + ts.load(beta, [0, 0], [1, LN_D])
    ts.store(y, [0, 0], out, valid=(rows, LN_D))


@ts.jit
def packed_layernorm(
    x: ts.Tensor[[LN_ROWS, LN_D], ts.f32],
    gamma: ts.Tensor[[1, LN_D], ts.f32],
    beta: ts.Tensor[[1, LN_D], ts.f32],
    y: ts.Out[[LN_ROWS, LN_D], ts.f32],
    n_tokens: ts.Scalar[ts.i32],
    eps: ts.Scalar[ts.f32],
):
    for i in ts.range(0, n_tokens // LN_BT):
        r = i * LN_BT
        rows = min(n_tokens - r, LN_BT)
        layernorm_rows(x[r : r + LN_BT, :], gamma, beta, y[r : r + LN_BT, :], rows, eps)


def packed_layernorm_golden(t):
    n = t["n_tokens"]
    x = t["x"][:n].double()
    y = torch.nn.functional.layer_norm(x, (LN_D,), t["gamma"][0].double(), t["beta"][0].double(), t["eps"])
    t["y"][:n] = y.float()


LN_SPECS = [
    TensorSpec("x", [LN_ROWS, LN_D], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 1.5 + 0.3),
    TensorSpec("gamma", [1, LN_D], torch.float32, init_value=lambda s, dtype: 1.0 + 0.1 * torch.randn(s, dtype=dtype)),
    TensorSpec("beta", [1, LN_D], torch.float32, init_value=lambda s, dtype: 0.1 * torch.randn(s, dtype=dtype)),
    TensorSpec("y", [LN_ROWS, LN_D], torch.float32, is_output=True),
    ScalarSpec("n_tokens", torch.int32, 200),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# Greedy decoding step: the argmax token of each row of logits over a 2048-word vocabulary (read
# in chunks of 256, first index on ties), then that token's embedding row gathered as the next
# step's input.

GA_B, GA_V, GA_D, GA_BT, GA_CH = 32, 2048, 32, 8, 256


@ts.kernel
def argmax_rows(logits: ts.Tensor[[GA_BT, GA_V], ts.f32], ids: ts.Out[[GA_BT, 1], ts.i32]):
    best = ts.full([GA_BT, 1], float("-inf"), ts.f32)
    arg = ts.zeros([GA_BT, 1], ts.i32)
    for c in ts.range(0, GA_V, GA_CH):
        t = ts.load(logits, [0, c], [GA_BT, GA_CH])
        cm = ts.row_max(t)
        ci = ts.row_min(ts.where(t == cm, ts.iota([GA_BT, GA_CH]), GA_V))
        arg = ts.where(cm > best, ci, arg)
        best = ts.maximum(best, cm)
    ts.store(ids, [0, 0], arg)


@ts.kernel
def gather_embed(
    emb: ts.Tensor[[GA_V, GA_D], ts.f32],
    ids: ts.Tensor[[GA_BT, 1], ts.i32],
    out: ts.Out[[GA_BT, GA_D], ts.f32],
):
    idx = ts.load(ids, [0, 0], [GA_BT, 1])
    ts.store(out, [0, 0], ts.load_rows(emb, idx, GA_D))


@ts.jit
def greedy_next_embed(
    logits: ts.Tensor[[GA_B, GA_V], ts.f32],
    emb: ts.Tensor[[GA_V, GA_D], ts.f32],
    ids: ts.Out[[GA_B, 1], ts.i32],
    next_emb: ts.Out[[GA_B, GA_D], ts.f32],
):
    for r in ts.range(0, GA_B, GA_BT):
        argmax_rows(logits[r : r + GA_BT, :], ids[r : r + GA_BT, :])
    for r in ts.range(0, GA_B, GA_BT):
        gather_embed(emb, ids[r : r + GA_BT, :], next_emb[r : r + GA_BT, :])


def greedy_next_embed_golden(t):
    ids = t["logits"].argmax(dim=1)
    t["ids"][:] = ids[:, None].to(torch.int32)
    t["next_emb"][:] = t["emb"][ids]


GA_SPECS = [
    TensorSpec("logits", [GA_B, GA_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 3.0),
    TensorSpec("emb", [GA_V, GA_D], torch.float32, init_value=torch.randn),
    TensorSpec("ids", [GA_B, 1], torch.int32, is_output=True),
    TensorSpec("next_emb", [GA_B, GA_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Masked mean pooling of encoder outputs into sentence embeddings: sequence b has lens[b] real
# tokens of a 128-slot padded batch (the padding slots hold whatever the encoder produced for
# pad tokens), read 32 tokens at a time.

MP_B, MP_L, MP_D, MP_BT = 8, 128, 64, 32
MP_LENS = [100, 77, 128, 5, 64, 90, 33, 120]


@ts.kernel
def mean_pool_seq(x: ts.Tensor[[MP_L, MP_D], ts.f32], pooled: ts.Out[[1, MP_D], ts.f32], n: ts.Scalar[ts.i32]):
    acc = ts.zeros([1, MP_D], ts.f32)
    for t in ts.range(0, n, MP_BT):
        xt = ts.load(x, [t, 0], [MP_BT, MP_D])
        acc = acc + ts.col_sum(xt)
    ts.store(pooled, [0, 0], acc / n)


@ts.jit
def masked_mean_pool(
    x: ts.Tensor[[MP_B, MP_L, MP_D], ts.f32],
    lens: ts.Tensor[[MP_B], ts.i32],
    pooled: ts.Out[[MP_B, MP_D], ts.f32],
):
    for b in ts.range(0, MP_B):
        n = lens[b]
        mean_pool_seq(x[b, :, :], pooled[b : b + 1, :], n)


def masked_mean_pool_golden(t):
    for b, n in enumerate(t["lens"].tolist()):
        t["pooled"][b] = t["x"][b, :n].double().mean(dim=0).float()


MP_SPECS = [
    TensorSpec("x", [MP_B, MP_L, MP_D], torch.float32, init_value=torch.randn),
    TensorSpec("lens", [MP_B], torch.int32, init_value=torch.tensor(MP_LENS, dtype=torch.int32)),
    TensorSpec("pooled", [MP_B, MP_D], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="rope_interleaved_cos_sin_swapped",
        what="the orchestration passes the sin table where the kernel takes cos and the cos table where it takes sin",
        pattern="swapped_operands",
        program=rope_interleaved,
        specs=RP_SPECS,
        golden=rope_interleaved_golden,
        rtol=1e-2,
        atol=1e-2,
        category="algorithm",
        kernel="rope_pairs_block",
        op="call",
        line=(rope_interleaved, "sin[r : r + RP_BT, :], cos[r : r + RP_BT, :],"),
        fixed="cos[r : r + RP_BT, :], sin[r : r + RP_BT, :],",
    ),
    BlindBug(
        name="w8a16_scale_wrong_axis",
        what="the per-output-channel scale tile [BN, 1] multiplies the [BM, BN] accumulator as a column, "
        "scaling each token row instead of each output channel (needs a transpose to [1, BN])",
        pattern="broadcast_axis",
        program=w8a16_linear,
        specs=W8_SPECS,
        golden=w8a16_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="w8a16_linear_tile",
        op="mul",
        line=(w8a16_linear_tile, "ts.store(y, [0, 0], ts.cast(acc * sc, ts.bf16))"),
        fixed="ts.store(y, [0, 0], ts.cast(acc * ts.transpose(sc), ts.bf16))",
    ),
    BlindBug(
        name="linear_gelu_before_bias",
        what="the epilogue applies GELU to the accumulator and then adds the bias, instead of GELU(acc + bias)",
        pattern="epilogue_order",
        program=linear_bias_gelu,
        specs=BG_SPECS,
        golden=linear_bias_gelu_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="linear_bias_gelu_tile",
        op="gelu",
        line=(linear_bias_gelu_tile, "ts.store(y, [0, 0], ts.gelu(acc) + bias)"),
        fixed="ts.store(y, [0, 0], ts.gelu(acc + bias))",
    ),
    BlindBug(
        name="prefill_causal_mask_strict",
        what="the causal mask keeps keys strictly before the query (<) instead of up to and including it (<=): "
        "every token ignores itself",
        pattern="mask",
        program=chunked_prefill,
        specs=CP_SPECS,
        golden=chunked_prefill_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="prefill_attention_block",
        op="lt",
        line=(prefill_attention_block, "s = ts.where(ts.iota([1, CP_BK]) + j < qpos"),
        fixed='s = ts.where(ts.iota([1, CP_BK]) + j <= qpos, s, float("-inf"))',
    ),
    BlindBug(
        name="mqa_left_pad_block_nan",
        what="padding keys are masked with -inf and the online softmax has no guard: for a sequence whose "
        "first key block is all padding, the running max stays -inf and exp(-inf - -inf) is NaN",
        pattern="missing_guard",
        program=mqa_decode_left_pad,
        specs=MQ_SPECS,
        golden=mqa_decode_golden,
        rtol=1e-4,
        atol=1e-4,
        category="nan",
        kernel="mqa_decode_seq",
        op="where",
        line=(mqa_decode_seq, "s = ts.where(ts.iota([1, MQ_BK]) + j >= pad"),
        fixed="s = ts.where(ts.iota([1, MQ_BK]) + j >= pad, s, -1e30)",
    ),
    BlindBug(
        name="kv_append_one_slot_early",
        what="the new keys/values are written at cache_lens[b] - 1 instead of cache_lens[b]: the last cached "
        "token is overwritten and the last new token's slot keeps its stale value",
        pattern="off_by_one",
        program=kv_cache_append,
        specs=KV_SPECS,
        golden=kv_append_golden,
        rtol=0.0,
        atol=0.0,
        category="algorithm",
        kernel="kv_append",
        op="call",
        line=(kv_cache_append, "k_cache[b, h, pos - 1 : pos - 1 + KV_NEW, :]"),
        fixed="k_cache[b, h, pos : pos + KV_NEW, :], v_cache[b, h, pos : pos + KV_NEW, :])",
    ),
    BlindBug(
        name="causal_conv1d_taps_flipped",
        what="the kernel taps are read in reverse (w[K - 1 - k]), a flipped convolution, while torch's conv1d "
        "pairs tap k with input row t + k",
        pattern="wrong_offset",
        program=causal_conv1d,
        specs=DW_SPECS,
        golden=causal_conv1d_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="causal_conv1d_block",
        op="load",
        line=(causal_conv1d_block, "wk = ts.load(w, [DW_K - 1 - k, 0], [1, DW_BC])"),
        fixed="wk = ts.load(w, [k, 0], [1, DW_BC])",
    ),
    BlindBug(
        name="se_squeeze_sums_chunk_means",
        what="the global average pool adds up the mean of each 64-pixel chunk and then divides by H*W again, "
        "so the pooled value is 4x too small",
        pattern="wrong_reduction",
        program=squeeze_excite,
        specs=SE_SPECS,
        golden=squeeze_excite_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="se_squeeze_excite",
        op="col_mean",
        line=(se_squeeze_excite, "acc = acc + ts.col_mean(t)"),
        fixed="acc = acc + ts.col_sum(t)",
    ),
    BlindBug(
        name="bias_grad_bf16_chunk_sums",
        what="each 32-row chunk of the bf16 gradient is summed in bf16 (col_sum of a bf16 tile) before the cast "
        "to the f32 accumulator, rounding every partial sum to 8 bits of mantissa",
        pattern="narrow_accumulator",
        program=bias_grad,
        specs=BGR_SPECS,
        golden=bias_grad_golden,
        rtol=1e-4,
        atol=1e-4,
        category="precision",
        kernel="bias_grad_partial",
        op="col_sum",
        line=(bias_grad_partial, "acc = acc + ts.cast(ts.col_sum(t), ts.f32)"),
        fixed="acc = acc + ts.col_sum(ts.cast(t, ts.f32))",
        verdict="guilty",
    ),
    BlindBug(
        name="swiglu_up_missing_transpose",
        what="the up projection multiplies by the [F, D] weight tile as stored (x @ Wu) instead of x @ Wu.T; "
        "the tiles are square, so nothing complains",
        pattern="missing_transpose",
        program=swiglu_gate_up,
        specs=SW_SPECS,
        golden=swiglu_gate_up_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="swiglu_gate_up_tile",
        op="matmul",
        line=(swiglu_gate_up_tile, "u = u + ts.matmul(a, ts.load(wu, [0, k], [SW_BF, SW_BK]))"),
        fixed="u = u + ts.matmul(a, ts.load(wu, [0, k], [SW_BF, SW_BK]), transpose_b=True)",
    ),
    BlindBug(
        name="blocked_cumsum_carry_inclusive",
        what="the carry loop runs over blocks 0..blk inclusive, so each block adds its own total on top of its "
        "local prefix sums",
        pattern="off_by_one",
        program=blocked_cumsum,
        specs=CS_SPECS,
        golden=blocked_cumsum_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="scan_add_carry",
        op="range",
        line=(scan_add_carry, "for j in ts.range(0, blk + 1):"),
        fixed="for j in ts.range(0, blk):",
    ),
    BlindBug(
        name="ce_backward_ignores_token_zero",
        what="the ignore mask keeps labels > 0 instead of >= 0, so tokens whose label is id 0 get a zero gradient",
        pattern="mask",
        program=ce_backward,
        specs=CE_SPECS,
        golden=ce_backward_golden,
        rtol=1e-4,
        atol=1e-6,
        category="algorithm",
        kernel="ce_backward_rows",
        op="gt",
        line=(ce_backward_rows, "keep = lab > 0"),
        fixed="keep = lab >= 0",
    ),
    BlindBug(
        name="packed_layernorm_floor_blocks",
        what="the orchestration launches n_tokens // 32 blocks instead of ceil(n_tokens / 32): the ragged last "
        "block (rows 192..199 of 200) is never normalized and stays 0",
        pattern="off_by_one",
        program=packed_layernorm,
        specs=LN_SPECS,
        golden=packed_layernorm_golden,
        rtol=1e-4,
        atol=1e-4,
        category="uninitialized",
        kernel=None,
        op="range",
        line=(packed_layernorm, "for i in ts.range(0, n_tokens // LN_BT):"),
        fixed="for i in ts.range(0, (n_tokens + LN_BT - 1) // LN_BT):",
    ),
    BlindBug(
        name="argmax_chunk_index_no_offset",
        what="the argmax of each vocabulary chunk is taken from the chunk-local iota without the chunk's offset c, "
        "so the token id is wrong for every row whose max is past the first chunk (and so is the gathered embedding)",
        pattern="wrong_offset",
        program=greedy_next_embed,
        specs=GA_SPECS,
        golden=greedy_next_embed_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="argmax_rows",
        op="where",
        line=(argmax_rows, "ci = ts.row_min(ts.where(t == cm, ts.iota([GA_BT, GA_CH]), GA_V))"),
        fixed="ci = ts.row_min(ts.where(t == cm, ts.iota([GA_BT, GA_CH]) + c, GA_V))",
    ),
    BlindBug(
        name="mean_pool_tail_reads_padding",
        what="the last block of a sequence is loaded whole, without valid=, so the padding slots after lens[b] "
        "are summed into the mean",
        pattern="mask",
        program=masked_mean_pool,
        specs=MP_SPECS,
        golden=masked_mean_pool_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="mean_pool_seq",
        op="load",
        line=(mean_pool_seq, "xt = ts.load(x, [t, 0], [MP_BT, MP_D])"),
        fixed="xt = ts.load(x, [t, 0], [MP_BT, MP_D], valid=(min(n - t, MP_BT), MP_D))",
    ),
)
