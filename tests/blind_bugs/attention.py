"""Softmax and attention kernels: chunked online softmax, single-pass bf16 softmax, padded
(key-length masked) attention, sliding-window attention, decode attention (MHA and GQA)."""

from __future__ import annotations

import math

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import TensorSpec

# --------------------------------------------------------------------------------------------
# Row softmax, f32, online max / sum carried over column chunks.

OS_ROWS, OS_COLS, OS_BLOCK, OS_CHUNK = 128, 1024, 16, 256


@ts.kernel
def softmax_online_rows(x: ts.Tensor[[OS_BLOCK, OS_COLS], ts.f32], y: ts.Out[[OS_BLOCK, OS_COLS], ts.f32]):
    m = ts.full([OS_BLOCK, 1], float("-inf"), ts.f32)
    l = ts.zeros([OS_BLOCK, 1], ts.f32)
    for c in ts.range(0, OS_COLS, OS_CHUNK):
        t = ts.load(x, [0, c], [OS_BLOCK, OS_CHUNK])
        m_new = ts.maximum(m, ts.row_max(t))
        alpha = ts.exp(m_new - m)
        l = l * alpha + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    inv = 1.0 / l
    for c in ts.range(0, OS_COLS, OS_CHUNK):
        t = ts.load(x, [0, c], [OS_BLOCK, OS_CHUNK])
        ts.store(y, [0, c], ts.exp(t - m) * inv)


@ts.jit
def softmax_online(x: ts.Tensor[[OS_ROWS, OS_COLS], ts.f32], y: ts.Out[[OS_ROWS, OS_COLS], ts.f32]):
    for r in ts.range(0, OS_ROWS, OS_BLOCK):
        softmax_online_rows(x[r : r + OS_BLOCK, :], y[r : r + OS_BLOCK, :])


def softmax_golden(t):
    x = t["x"].double()
    m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - m)
    t["y"][:] = (e / e.sum(dim=-1, keepdim=True)).to(t["y"].dtype)


def logits(scale):
    def init(shape, dtype):
        return (torch.randn(shape) * scale).to(dtype)

    return init


OS_SPECS = [
    TensorSpec("x", [OS_ROWS, OS_COLS], torch.float32, init_value=logits(2.0)),
    TensorSpec("y", [OS_ROWS, OS_COLS], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Single-pass softmax of raw (unscaled) bf16 attention scores, f32 math.

SB_ROWS, SB_COLS, SB_BLOCK = 256, 512, 32


@ts.kernel
def softmax_bf16_rows(x: ts.Tensor[[SB_BLOCK, SB_COLS], ts.bf16], y: ts.Out[[SB_BLOCK, SB_COLS], ts.bf16]):
    t = ts.cast(ts.load(x, [0, 0], [SB_BLOCK, SB_COLS]), ts.f32)
    e = ts.exp(t)
    denom = ts.row_sum(e)
    ts.store(y, [0, 0], ts.cast(e / denom, ts.bf16))


@ts.jit
def softmax_bf16(x: ts.Tensor[[SB_ROWS, SB_COLS], ts.bf16], y: ts.Out[[SB_ROWS, SB_COLS], ts.bf16]):
    for r in ts.range(0, SB_ROWS, SB_BLOCK):
        softmax_bf16_rows(x[r : r + SB_BLOCK, :], y[r : r + SB_BLOCK, :])


SB_SPECS = [
    TensorSpec("x", [SB_ROWS, SB_COLS], torch.bfloat16, init_value=logits(40.0)),
    TensorSpec("y", [SB_ROWS, SB_COLS], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Whole-row softmax, f32, max subtracted for stability.

SC_ROWS, SC_COLS, SC_BLOCK = 128, 256, 32


@ts.kernel
def softmax_stable_rows(x: ts.Tensor[[SC_BLOCK, SC_COLS], ts.f32], y: ts.Out[[SC_BLOCK, SC_COLS], ts.f32]):
    t = ts.load(x, [0, 0], [SC_BLOCK, SC_COLS])
    mx = ts.col_max(t)
    e = ts.exp(t - mx)
    ts.store(y, [0, 0], e / ts.row_sum(e))


@ts.jit
def softmax_stable(x: ts.Tensor[[SC_ROWS, SC_COLS], ts.f32], y: ts.Out[[SC_ROWS, SC_COLS], ts.f32]):
    for r in ts.range(0, SC_ROWS, SC_BLOCK):
        softmax_stable_rows(x[r : r + SC_BLOCK, :], y[r : r + SC_BLOCK, :])


SC_SPECS = [
    TensorSpec("x", [SC_ROWS, SC_COLS], torch.float32, init_value=logits(3.0)),
    TensorSpec("y", [SC_ROWS, SC_COLS], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Encoder attention over a padded batch: each sequence's keys past its length are masked.
# bf16 q/k/v, f32 scores and online softmax.

PA_B, PA_H, PA_S, PA_D, PA_BQ, PA_BK = 2, 4, 128, 64, 64, 64
PA_SCALE = 1.0 / math.sqrt(PA_D)


@ts.kernel
def padded_attention_block(
    q: ts.Tensor[[PA_BQ, PA_D], ts.bf16],
    k: ts.Tensor[[PA_S, PA_D], ts.bf16],
    v: ts.Tensor[[PA_S, PA_D], ts.bf16],
    o: ts.Out[[PA_BQ, PA_D], ts.bf16],
    kv_len: ts.Scalar[ts.i32],
):
    qt = ts.load(q, [0, 0], [PA_BQ, PA_D])
    m = ts.full([PA_BQ, 1], float("-inf"), ts.f32)
    l = ts.zeros([PA_BQ, 1], ts.f32)
    acc = ts.zeros([PA_BQ, PA_D], ts.f32)
    for j in ts.range(0, kv_len, PA_BK):
        n = min(kv_len - j, PA_BK)
        kt = ts.load(k, [j, 0], [PA_BK, PA_D], valid=(n, PA_D))
        vt = ts.load(v, [j, 0], [PA_BK, PA_D], valid=(n, PA_D))
        s = ts.matmul(qt, kt, transpose_b=True) * PA_SCALE
        s = ts.where(ts.iota([1, PA_BK]) + j <= kv_len, s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        p = ts.exp(s - m_new)
        alpha = ts.exp(m - m_new)
        l = l * alpha + ts.row_sum(p)
        acc = acc * alpha + ts.matmul(ts.cast(p, ts.bf16), vt)
        m = m_new
    ts.store(o, [0, 0], ts.cast(acc / l, ts.bf16))


@ts.jit
def padded_attention(
    q: ts.Tensor[[PA_B, PA_H, PA_S, PA_D], ts.bf16],
    k: ts.Tensor[[PA_B, PA_H, PA_S, PA_D], ts.bf16],
    v: ts.Tensor[[PA_B, PA_H, PA_S, PA_D], ts.bf16],
    lens: ts.Tensor[[PA_B], ts.i32],
    o: ts.Out[[PA_B, PA_H, PA_S, PA_D], ts.bf16],
):
    for b in ts.range(0, PA_B):
        n = lens[b]
        for h in ts.range(0, PA_H):
            for r in ts.range(0, PA_S, PA_BQ):
                padded_attention_block(q[b, h, r : r + PA_BQ, :], k[b, h, :, :], v[b, h, :, :], o[b, h, r : r + PA_BQ, :], n)


def padded_attention_golden(t):
    q, k, v = (t[n].float() for n in ("q", "k", "v"))
    out = torch.empty_like(q)
    for b in range(PA_B):
        n = int(t["lens"][b])
        scores = q[b] @ k[b, :, :n, :].transpose(-1, -2) / math.sqrt(PA_D)
        p = torch.softmax(scores, dim=-1)
        out[b] = p @ v[b, :, :n, :]
    t["o"][:] = out.to(torch.bfloat16)


PA_SPECS = [
    TensorSpec("q", [PA_B, PA_H, PA_S, PA_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("k", [PA_B, PA_H, PA_S, PA_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("v", [PA_B, PA_H, PA_S, PA_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("lens", [PA_B], torch.int32, init_value=torch.tensor([21, 9], dtype=torch.int32)),
    TensorSpec("o", [PA_B, PA_H, PA_S, PA_D], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Causal sliding-window attention (Mistral-style window): every key block is visited; blocks
# entirely outside a row's window are masked, so the running max must be guarded.

SW_H, SW_S, SW_D, SW_BQ, SW_BK, SW_WINDOW = 4, 256, 64, 32, 32, 64
SW_SCALE = 1.0 / math.sqrt(SW_D)


@ts.kernel
def window_attention_block(
    q: ts.Tensor[[SW_BQ, SW_D], ts.bf16],
    k: ts.Tensor[[SW_S, SW_D], ts.bf16],
    v: ts.Tensor[[SW_S, SW_D], ts.bf16],
    o: ts.Out[[SW_BQ, SW_D], ts.bf16],
    q0: ts.Scalar[ts.i32],
):
    qt = ts.load(q, [0, 0], [SW_BQ, SW_D])
    row = ts.iota([SW_BQ, 1], dim=0) + q0
    m = ts.full([SW_BQ, 1], float("-inf"), ts.f32)
    l = ts.zeros([SW_BQ, 1], ts.f32)
    acc = ts.zeros([SW_BQ, SW_D], ts.f32)
    for j in ts.range(0, SW_S, SW_BK):
        s = ts.matmul(qt, ts.load(k, [j, 0], [SW_BK, SW_D]), transpose_b=True) * SW_SCALE
        col = ts.iota([1, SW_BK]) + j
        keep = ts.logical_and(col <= row, col > row - SW_WINDOW)
        s = ts.where(keep, s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        m_safe = ts.where(m_new == float("-inf"), 0.0, m_new)
        p = ts.exp(s - m_new)
        alpha = ts.exp(m - m_safe)
        l = l * alpha + ts.row_sum(p)
        acc = acc * alpha + ts.matmul(ts.cast(p, ts.bf16), ts.load(v, [j, 0], [SW_BK, SW_D]))
        m = m_new
    ts.store(o, [0, 0], ts.cast(acc / l, ts.bf16))


@ts.jit
def window_attention(
    q: ts.Tensor[[SW_H, SW_S, SW_D], ts.bf16],
    k: ts.Tensor[[SW_H, SW_S, SW_D], ts.bf16],
    v: ts.Tensor[[SW_H, SW_S, SW_D], ts.bf16],
    o: ts.Out[[SW_H, SW_S, SW_D], ts.bf16],
):
    for h in ts.range(0, SW_H):
        for r in ts.range(0, SW_S, SW_BQ):
            window_attention_block(q[h, r : r + SW_BQ, :], k[h, :, :], v[h, :, :], o[h, r : r + SW_BQ, :], r)


def window_attention_golden(t):
    q, k, v = (t[n].float() for n in ("q", "k", "v"))
    i = torch.arange(SW_S)[:, None]
    j = torch.arange(SW_S)[None, :]
    allowed = (j <= i) & (j > i - SW_WINDOW)
    scores = q @ k.transpose(-1, -2) / math.sqrt(SW_D)
    scores = scores.masked_fill(~allowed, float("-inf"))
    t["o"][:] = (torch.softmax(scores, dim=-1) @ v).to(torch.bfloat16)


SW_SPECS = [
    TensorSpec("q", [SW_H, SW_S, SW_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("k", [SW_H, SW_S, SW_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("v", [SW_H, SW_S, SW_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("o", [SW_H, SW_S, SW_D], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Decode attention (one new token per sequence), multi-head, f32, whole context in one tile.

DA_B, DA_H, DA_S, DA_D = 2, 8, 256, 64


@ts.kernel
def decode_head(
    q: ts.Tensor[[1, DA_D], ts.f32],
    k: ts.Tensor[[DA_S, DA_D], ts.f32],
    v: ts.Tensor[[DA_S, DA_D], ts.f32],
    o: ts.Out[[1, DA_D], ts.f32],
):
    qt = ts.load(q, [0, 0], [1, DA_D])
    s = ts.matmul(qt, ts.load(k, [0, 0], [DA_S, DA_D]), transpose_b=True) * (1.0 / DA_D)
    p = ts.exp(s - ts.row_max(s))
    p = p / ts.row_sum(p)
    ts.store(o, [0, 0], ts.matmul(p, ts.load(v, [0, 0], [DA_S, DA_D])))


@ts.jit
def decode_attention(
    q: ts.Tensor[[DA_B, DA_H, DA_D], ts.f32],
    k: ts.Tensor[[DA_B, DA_H, DA_S, DA_D], ts.f32],
    v: ts.Tensor[[DA_B, DA_H, DA_S, DA_D], ts.f32],
    o: ts.Out[[DA_B, DA_H, DA_D], ts.f32],
):
    for b in ts.range(0, DA_B):
        for h in ts.range(0, DA_H):
            decode_head(q[b, h : h + 1, :], k[b, h, :, :], v[b, h, :, :], o[b, h : h + 1, :])


def decode_golden(t):
    q, k, v = (t[n].double() for n in ("q", "k", "v"))
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(q.shape[-1])
    p = torch.softmax(scores, dim=-1)
    t["o"][:] = torch.einsum("bhs,bhsd->bhd", p, v).float()


DA_SPECS = [
    TensorSpec("q", [DA_B, DA_H, DA_D], torch.float32, init_value=torch.randn),
    TensorSpec("k", [DA_B, DA_H, DA_S, DA_D], torch.float32, init_value=torch.randn),
    TensorSpec("v", [DA_B, DA_H, DA_S, DA_D], torch.float32, init_value=torch.randn),
    TensorSpec("o", [DA_B, DA_H, DA_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Decode attention with grouped-query heads (8 query heads share 2 KV heads), bf16.

GQ_B, GQ_H, GQ_KVH, GQ_S, GQ_D = 2, 8, 2, 256, 64
GQ_GROUP = GQ_H // GQ_KVH


@ts.kernel
def gqa_decode_head(
    q: ts.Tensor[[1, GQ_D], ts.bf16],
    k: ts.Tensor[[GQ_S, GQ_D], ts.bf16],
    v: ts.Tensor[[GQ_S, GQ_D], ts.bf16],
    o: ts.Out[[1, GQ_D], ts.bf16],
):
    s = ts.matmul(ts.load(q, [0, 0], [1, GQ_D]), ts.load(k, [0, 0], [GQ_S, GQ_D]), transpose_b=True)
    s = s * (1.0 / math.sqrt(GQ_D))
    p = ts.exp(s - ts.row_max(s))
    p = p / ts.row_sum(p)
    ts.store(o, [0, 0], ts.cast(ts.matmul(ts.cast(p, ts.bf16), ts.load(v, [0, 0], [GQ_S, GQ_D])), ts.bf16))


@ts.jit
def gqa_decode(
    q: ts.Tensor[[GQ_B, GQ_H, GQ_D], ts.bf16],
    k: ts.Tensor[[GQ_B, GQ_KVH, GQ_S, GQ_D], ts.bf16],
    v: ts.Tensor[[GQ_B, GQ_KVH, GQ_S, GQ_D], ts.bf16],
    o: ts.Out[[GQ_B, GQ_H, GQ_D], ts.bf16],
):
    for b in ts.range(0, GQ_B):
        for h in ts.range(0, GQ_H):
            kv = h // GQ_GROUP
            gqa_decode_head(q[b, h : h + 1, :], k[b, kv, :, :], v[b, h % GQ_KVH, :, :], o[b, h : h + 1, :])


def gqa_golden(t):
    q, k, v = (t[n].float() for n in ("q", "k", "v"))
    k = k.repeat_interleave(GQ_GROUP, dim=1)
    v = v.repeat_interleave(GQ_GROUP, dim=1)
    scores = torch.einsum("bhd,bhsd->bhs", q, k) / math.sqrt(GQ_D)
    p = torch.softmax(scores, dim=-1)
    t["o"][:] = torch.einsum("bhs,bhsd->bhd", p, v).to(torch.bfloat16)


GQ_SPECS = [
    TensorSpec("q", [GQ_B, GQ_H, GQ_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("k", [GQ_B, GQ_KVH, GQ_S, GQ_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("v", [GQ_B, GQ_KVH, GQ_S, GQ_D], torch.bfloat16, init_value=torch.randn),
    TensorSpec("o", [GQ_B, GQ_H, GQ_D], torch.bfloat16, is_output=True),
]


BUGS = (
    BlindBug(
        name="online_softmax_rescale_flipped",
        what="the running sum is rescaled by exp(m_new - m) instead of exp(m - m_new); on the first chunk m is -inf and 0 * inf is NaN",
        pattern="swapped_operands",
        program=softmax_online,
        specs=OS_SPECS,
        golden=softmax_golden,
        rtol=1e-5,
        atol=1e-5,
        category="nan",
        kernel="softmax_online_rows",
        op="sub",
        line=(softmax_online_rows, "alpha = ts.exp(m_new - m)"),
        fixed="alpha = ts.exp(m - m_new)",
    ),
    BlindBug(
        name="softmax_no_max_subtraction",
        what="exp is taken of the raw scores without subtracting the row max; large scores overflow to inf and inf / inf is NaN",
        pattern="missing_guard",
        program=softmax_bf16,
        specs=SB_SPECS,
        golden=softmax_golden,
        rtol=2e-2,
        atol=2e-2,
        category="nan",
        kernel="softmax_bf16_rows",
        op="exp",
        line=(softmax_bf16_rows, "e = ts.exp(t)"),
        fixed="e = ts.exp(t - ts.row_max(t))",
    ),
    BlindBug(
        name="softmax_max_wrong_axis",
        what="the max subtracted before exp is taken per column (col_max) instead of per row",
        pattern="wrong_reduction",
        program=softmax_stable,
        specs=SC_SPECS,
        golden=softmax_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="softmax_stable_rows",
        op="col_max",
        line=(softmax_stable_rows, "mx = ts.col_max(t)"),
        fixed="mx = ts.row_max(t)",
    ),
    BlindBug(
        name="padded_attention_mask_le",
        what="the key-length mask keeps key index kv_len (<= instead of <), a zero-filled padding key joins the softmax",
        pattern="mask",
        program=padded_attention,
        specs=PA_SPECS,
        golden=padded_attention_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="padded_attention_block",
        op="le",
        line=(padded_attention_block, "s = ts.where(ts.iota([1, PA_BK]) + j <= kv_len"),
        fixed='s = ts.where(ts.iota([1, PA_BK]) + j < kv_len, s, float("-inf"))',
    ),
    BlindBug(
        name="window_attention_unguarded_max",
        what="p subtracts the raw running max instead of the guarded one; a key block outside the window gives exp(-inf - -inf) = NaN",
        pattern="missing_guard",
        program=window_attention,
        specs=SW_SPECS,
        golden=window_attention_golden,
        rtol=2e-2,
        atol=2e-2,
        category="nan",
        kernel="window_attention_block",
        op="sub",
        line=(window_attention_block, "p = ts.exp(s - m_new)"),
        fixed="p = ts.exp(s - m_safe)",
    ),
    BlindBug(
        name="decode_scale_one_over_d",
        what="scores are scaled by 1/d instead of 1/sqrt(d)",
        pattern="wrong_constant",
        program=decode_attention,
        specs=DA_SPECS,
        golden=decode_golden,
        rtol=1e-4,
        atol=1e-5,
        category="algorithm",
        kernel="decode_head",
        op="mul",
        line=(decode_head, "* (1.0 / DA_D)"),
        fixed="s = ts.matmul(qt, ts.load(k, [0, 0], [DA_S, DA_D]), transpose_b=True) * (1.0 / math.sqrt(DA_D))",
    ),
    BlindBug(
        name="gqa_decode_wrong_kv_head",
        what="the value cache is sliced at KV head h % KVH (interleaved layout) while keys use h // GROUP",
        pattern="wrong_slice",
        program=gqa_decode,
        specs=GQ_SPECS,
        golden=gqa_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="gqa_decode_head",
        op="call",
        line=(gqa_decode, "v[b, h % GQ_KVH, :, :]"),
        fixed="gqa_decode_head(q[b, h : h + 1, :], k[b, kv, :, :], v[b, kv, :, :], o[b, h : h + 1, :])",
    ),
)
