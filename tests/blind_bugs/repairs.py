"""Sixteen more kernels of inference and training stacks, each with one mistake and the one line
that repairs it: an embedding bag with offsets, a length-masked (segmented) softmax, a grouped
GEMM over per-expert row counts, a last-token classification head, a vocabulary-parallel
embedding shard, a row-wise cosine similarity, an RMSNorm backward, ALiBi attention over packed
documents, a Welford (Chan) merge of per-chunk statistics, a repetition-penalty + temperature
sampling prep, a LayerScale residual projection, GEGLU with biases, a group-wise int8 weight
dequant + matmul, a W8A8 GEMM with per-token scales, an MLM head gathering masked positions and
a 2x2 average pool over channels-last images."""

from __future__ import annotations

import math

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# EmbeddingBag(mode="mean") with offsets: bag b averages the rows of weight named by
# indices[offsets[b] : offsets[b + 1]] (an empty bag gives 0). One task per bag reads its indices
# 16 at a time; the last chunk of a bag is ragged.

EB_V, EB_D, EB_NNZ, EB_B, EB_CH = 512, 64, 96, 8, 16
EB_OFFSETS = [0, 5, 5, 23, 40, 41, 60, 77, 96]


@ts.kernel
def embedding_bag_mean_bag(
    weight: ts.Tensor[[EB_V, EB_D], ts.f32],
    indices: ts.Tensor[[1, EB_NNZ], ts.i32],
    out: ts.Out[[1, EB_D], ts.f32],
    start: ts.Scalar[ts.i32],
    n: ts.Scalar[ts.i32],
):
    acc = ts.zeros([1, EB_D], ts.f32)
    for j in ts.range(0, n, EB_CH):
        cnt = min(n - j, EB_CH)
        idx = ts.load(indices, [0, start + j], [1, EB_CH], valid=(1, cnt))
        rows = ts.load_rows(weight, idx, EB_D)
        acc = acc + ts.col_sum(rows)
    ts.store(out, [0, 0], acc / max(n, 1))


@ts.jit
def embedding_bag_mean(
    weight: ts.Tensor[[EB_V, EB_D], ts.f32],
    indices: ts.Tensor[[1, EB_NNZ], ts.i32],
    offsets: ts.Tensor[[EB_B + 1], ts.i32],
    out: ts.Out[[EB_B, EB_D], ts.f32],
):
    for b in ts.range(0, EB_B):
        s = offsets[b]
        e = offsets[b + 1]
        embedding_bag_mean_bag(weight, indices, out[b : b + 1, :], s, e - s)


def embedding_bag_mean_golden(t):
    idx = t["indices"][0].long()
    offs = t["offsets"][:-1].long()
    t["out"][:] = torch.nn.functional.embedding_bag(idx, t["weight"].double(), offs, mode="mean").float()


EB_SPECS = [
    TensorSpec("weight", [EB_V, EB_D], torch.float32, init_value=torch.randn),
    TensorSpec("indices", [1, EB_NNZ], torch.int32, init_value=lambda s, dtype: torch.randint(1, EB_V, s, dtype=dtype)),
    TensorSpec("offsets", [EB_B + 1], torch.int32, init_value=torch.tensor(EB_OFFSETS, dtype=torch.int32)),
    TensorSpec("out", [EB_B, EB_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Segmented softmax: row r of a padded [64, 512] score matrix has lens[r] real entries; softmax
# over them, 0 past them. Two passes over 128-column chunks (online max/sum, then normalize).

SG_R, SG_L, SG_BR, SG_CH = 64, 512, 16, 128


@ts.kernel
def segment_softmax_rows(
    x: ts.Tensor[[SG_BR, SG_L], ts.f32],
    lens: ts.Tensor[[SG_BR, 1], ts.i32],
    y: ts.Out[[SG_BR, SG_L], ts.f32],
):
    n = ts.load(lens, [0, 0], [SG_BR, 1])
    m = ts.full([SG_BR, 1], float("-inf"), ts.f32)
    l = ts.zeros([SG_BR, 1], ts.f32)
    for c in ts.range(0, SG_L, SG_CH):
        keep = ts.iota([SG_BR, SG_CH]) < n
        t = ts.where(keep, ts.load(x, [0, c], [SG_BR, SG_CH]), float("-inf"))
        m_new = ts.maximum(m, ts.row_max(t))
        l = l * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    inv = 1.0 / l
    for c in ts.range(0, SG_L, SG_CH):
        keep = ts.iota([SG_BR, SG_CH]) + c < n
        t = ts.where(keep, ts.load(x, [0, c], [SG_BR, SG_CH]), float("-inf"))
        ts.store(y, [0, c], ts.exp(t - m) * inv)


@ts.jit
def segment_softmax(
    x: ts.Tensor[[SG_R, SG_L], ts.f32],
    lens: ts.Tensor[[SG_R, 1], ts.i32],
    y: ts.Out[[SG_R, SG_L], ts.f32],
):
    for r in ts.range(0, SG_R, SG_BR):
        segment_softmax_rows(x[r : r + SG_BR, :], lens[r : r + SG_BR, :], y[r : r + SG_BR, :])


def segment_softmax_golden(t):
    keep = torch.arange(SG_L)[None, :] < t["lens"].long()
    s = t["x"].double().masked_fill(~keep, float("-inf"))
    t["y"][:] = torch.softmax(s, dim=1).float()


SG_SPECS = [
    TensorSpec("x", [SG_R, SG_L], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 2.0),
    TensorSpec("lens", [SG_R, 1], torch.int32, init_value=lambda s, dtype: torch.randint(1, SG_L + 1, s, dtype=dtype)),
    TensorSpec("y", [SG_R, SG_L], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Grouped GEMM for MoE experts: the tokens routed to expert g are rows offsets[g] : offsets[g+1]
# of x (sorted by expert, a capacity-padded buffer), multiplied by that expert's weight [K, N].
# Blocks of 32 rows, the last block of each group ragged.

GG_G, GG_CAP, GG_K, GG_N, GG_BM = 4, 224, 64, 64, 32
GG_OFFSETS = [0, 40, 104, 121, 192]


@ts.kernel
def grouped_gemm_block(
    x: ts.Tensor[[GG_BM, GG_K], ts.f32],
    w: ts.Tensor[[GG_K, GG_N], ts.f32],
    y: ts.Out[[GG_BM, GG_N], ts.f32],
    rows: ts.Scalar[ts.i32],
):
    a = ts.load(x, [0, 0], [GG_BM, GG_K], valid=(rows, GG_K))
    ts.store(y, [0, 0], ts.matmul(a, ts.load(w, [0, 0], [GG_K, GG_N])), valid=(rows, GG_N))


@ts.jit
def grouped_gemm(
    x: ts.Tensor[[GG_CAP, GG_K], ts.f32],
    w: ts.Tensor[[GG_G, GG_K, GG_N], ts.f32],
    offsets: ts.Tensor[[GG_G + 1], ts.i32],
    y: ts.Out[[GG_CAP, GG_N], ts.f32],
):
    for g in ts.range(0, GG_G):
        s = offsets[g]
        e = offsets[g + 1]
        cnt = e - s
        for i in ts.range(0, (cnt - 1) // GG_BM):
            r = s + i * GG_BM
            grouped_gemm_block(x[r : r + GG_BM, :], w[g, :, :], y[r : r + GG_BM, :], min(cnt - i * GG_BM, GG_BM))


def grouped_gemm_golden(t):
    offs = t["offsets"].tolist()
    for g in range(GG_G):
        s, e = offs[g], offs[g + 1]
        t["y"][s:e] = (t["x"][s:e].double() @ t["w"][g].double()).float()


GG_SPECS = [
    TensorSpec("x", [GG_CAP, GG_K], torch.float32, init_value=torch.randn),
    TensorSpec("w", [GG_G, GG_K, GG_N], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 8.0),
    TensorSpec("offsets", [GG_G + 1], torch.int32, init_value=torch.tensor(GG_OFFSETS, dtype=torch.int32)),
    TensorSpec("y", [GG_CAP, GG_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Sequence classification head of a decoder (GPT-2 / LLaMA ForSequenceClassification): the
# logits of a right-padded sequence come from the hidden state of its last real token,
# position lens[b] - 1, through an nn.Linear [C, D] with bias.

LT_B, LT_L, LT_D, LT_C = 8, 64, 128, 16


@ts.kernel
def last_token_head(
    h: ts.Tensor[[1, LT_D], ts.f32],
    w: ts.Tensor[[LT_C, LT_D], ts.f32],
    bias: ts.Tensor[[1, LT_C], ts.f32],
    logits: ts.Out[[1, LT_C], ts.f32],
):
    z = ts.matmul(ts.load(h, [0, 0], [1, LT_D]), ts.load(w, [0, 0], [LT_C, LT_D]), transpose_b=True)
    ts.store(logits, [0, 0], z + ts.load(bias, [0, 0], [1, LT_C]))


@ts.jit
def last_token_classifier(
    hidden: ts.Tensor[[LT_B, LT_L, LT_D], ts.f32],
    lens: ts.Tensor[[LT_B], ts.i32],
    w: ts.Tensor[[LT_C, LT_D], ts.f32],
    bias: ts.Tensor[[1, LT_C], ts.f32],
    logits: ts.Out[[LT_B, LT_C], ts.f32],
):
    for b in ts.range(0, LT_B):
        n = lens[b]
        last_token_head(hidden[b, n : n + 1, :], w, bias, logits[b : b + 1, :])


def last_token_classifier_golden(t):
    idx = t["lens"].long() - 1
    h = t["hidden"].double()[torch.arange(LT_B), idx]  # [B, D]
    t["logits"][:] = torch.nn.functional.linear(h, t["w"].double(), t["bias"][0].double()).float()


LT_SPECS = [
    TensorSpec("hidden", [LT_B, LT_L, LT_D], torch.float32, init_value=torch.randn),
    TensorSpec("lens", [LT_B], torch.int32, init_value=lambda s, dtype: torch.randint(1, LT_L, s, dtype=dtype)),
    TensorSpec("w", [LT_C, LT_D], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 11.0),
    TensorSpec("bias", [1, LT_C], torch.float32, init_value=torch.randn),
    TensorSpec("logits", [LT_B, LT_C], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Vocabulary-parallel embedding (Megatron): this rank holds rows vstart : vstart + 256 of a
# 1024-word table. Token ids outside the shard give a zero row (the all-reduce over ranks adds
# the owner's row); their shard-local index must be clamped before the gather.

VP_T, VP_V, VP_SHARD, VP_D, VP_BT = 128, 1024, 256, 64, 32


@ts.kernel
def vocab_shard_embed(
    ids: ts.Tensor[[VP_BT, 1], ts.i32],
    emb: ts.Tensor[[VP_SHARD, VP_D], ts.f32],
    out: ts.Out[[VP_BT, VP_D], ts.f32],
    vstart: ts.Scalar[ts.i32],
):
    local = ts.load(ids, [0, 0], [VP_BT, 1]) - vstart
    keep = ts.logical_and(local >= 0, local < VP_SHARD)
    rows = ts.load_rows(emb, local, VP_D)
    ts.store(out, [0, 0], ts.where(keep, rows, 0.0))


@ts.jit
def vocab_parallel_embedding(
    ids: ts.Tensor[[VP_T, 1], ts.i32],
    emb: ts.Tensor[[VP_SHARD, VP_D], ts.f32],
    out: ts.Out[[VP_T, VP_D], ts.f32],
    vstart: ts.Scalar[ts.i32],
):
    for r in ts.range(0, VP_T, VP_BT):
        vocab_shard_embed(ids[r : r + VP_BT, :], emb, out[r : r + VP_BT, :], vstart)


def vocab_parallel_embedding_golden(t):
    local = t["ids"][:, 0].long() - t["vstart"]
    keep = (local >= 0) & (local < VP_SHARD)
    out = torch.zeros(VP_T, VP_D, dtype=torch.float32)
    out[keep] = t["emb"][local[keep]]
    t["out"][:] = out


VP_SPECS = [
    TensorSpec("ids", [VP_T, 1], torch.int32, init_value=lambda s, dtype: torch.randint(0, VP_V, s, dtype=dtype)),
    TensorSpec("emb", [VP_SHARD, VP_D], torch.float32, init_value=torch.randn),
    TensorSpec("out", [VP_T, VP_D], torch.float32, is_output=True),
    ScalarSpec("vstart", torch.int32, 512),
]

# --------------------------------------------------------------------------------------------
# Row-wise cosine similarity of f16 embedding pairs (near-duplicate detection): cos(a_i, b_i)
# over 2048 dims read 512 at a time, f32 sums, as torch.cosine_similarity (eps 1e-8).

CO_N, CO_D, CO_BR, CO_CH = 64, 2048, 16, 512


@ts.kernel
def cosine_rows(
    a: ts.Tensor[[CO_BR, CO_D], ts.f16],
    b: ts.Tensor[[CO_BR, CO_D], ts.f16],
    y: ts.Out[[CO_BR, 1], ts.f32],
):
    dot = ts.zeros([CO_BR, 1], ts.f32)
    na = ts.zeros([CO_BR, 1], ts.f32)
    nb = ts.zeros([CO_BR, 1], ts.f32)
    for c in ts.range(0, CO_D, CO_CH):
        at = ts.load(a, [0, c], [CO_BR, CO_CH])
        bt = ts.load(b, [0, c], [CO_BR, CO_CH])
        af = ts.cast(at, ts.f32)
        bf = ts.cast(bt, ts.f32)
        dot = dot + ts.cast(ts.row_sum(at * bt), ts.f32)
        na = na + ts.row_sum(af * af)
        nb = nb + ts.row_sum(bf * bf)
    ts.store(y, [0, 0], dot * ts.rsqrt(ts.maximum(na * nb, 1e-16)))


@ts.jit
def cosine_similarity(
    a: ts.Tensor[[CO_N, CO_D], ts.f16],
    b: ts.Tensor[[CO_N, CO_D], ts.f16],
    y: ts.Out[[CO_N, 1], ts.f32],
):
    for r in ts.range(0, CO_N, CO_BR):
        cosine_rows(a[r : r + CO_BR, :], b[r : r + CO_BR, :], y[r : r + CO_BR, :])


def cosine_similarity_golden(t):
    t["y"][:] = torch.nn.functional.cosine_similarity(t["a"].double(), t["b"].double(), dim=1, eps=1e-8)[:, None].float()


def near_duplicate(shape, dtype):
    """Near-duplicate pairs: one shared base (a fixed stream) plus each side's own noise, so the
    cosines sit near 0.8."""
    base = torch.randn(shape, generator=torch.Generator().manual_seed(7))
    return (base + 0.5 * torch.randn(shape)).to(dtype)


CO_SPECS = [
    TensorSpec("a", [CO_N, CO_D], torch.float16, init_value=near_duplicate),
    TensorSpec("b", [CO_N, CO_D], torch.float16, init_value=near_duplicate),
    TensorSpec("y", [CO_N, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# RMSNorm backward (rstd recomputed, bf16 activations and weight, f32 input gradient):
#   dx = rstd * g * dy - x * rstd^3 * mean(g * dy * x)
# Pass 1 accumulates sum(x^2) and sum(g * dy * x) over 256-column chunks; pass 2 writes dx.

RB_T, RB_D, RB_BT, RB_CH = 64, 1024, 16, 256
RB_EPS = 1e-6


@ts.kernel
def rmsnorm_backward_rows(
    x: ts.Tensor[[RB_BT, RB_D], ts.bf16],
    dy: ts.Tensor[[RB_BT, RB_D], ts.bf16],
    gamma: ts.Tensor[[1, RB_D], ts.bf16],
    dx: ts.Out[[RB_BT, RB_D], ts.f32],
):
    ss = ts.zeros([RB_BT, 1], ts.f32)
    dot = ts.zeros([RB_BT, 1], ts.f32)
    for c in ts.range(0, RB_D, RB_CH):
        xt = ts.load(x, [0, c], [RB_BT, RB_CH])
        dyt = ts.load(dy, [0, c], [RB_BT, RB_CH])
        gt = ts.load(gamma, [0, c], [1, RB_CH])
        xf = ts.cast(xt, ts.f32)
        ss = ss + ts.row_sum(xf * xf)
        dot = dot + ts.cast(ts.row_sum(gt * dyt * xt), ts.f32)
    rstd = ts.rsqrt(ss * (1.0 / RB_D) + RB_EPS)
    coef = rstd * rstd * rstd * dot * (1.0 / RB_D)
    for c in ts.range(0, RB_D, RB_CH):
        xf = ts.cast(ts.load(x, [0, c], [RB_BT, RB_CH]), ts.f32)
        gdy = ts.cast(ts.load(gamma, [0, c], [1, RB_CH]), ts.f32) * ts.cast(ts.load(dy, [0, c], [RB_BT, RB_CH]), ts.f32)
        ts.store(dx, [0, c], rstd * gdy - xf * coef)


@ts.jit
def rmsnorm_backward(
    x: ts.Tensor[[RB_T, RB_D], ts.bf16],
    dy: ts.Tensor[[RB_T, RB_D], ts.bf16],
    gamma: ts.Tensor[[1, RB_D], ts.bf16],
    dx: ts.Out[[RB_T, RB_D], ts.f32],
):
    for r in ts.range(0, RB_T, RB_BT):
        rmsnorm_backward_rows(x[r : r + RB_BT, :], dy[r : r + RB_BT, :], gamma, dx[r : r + RB_BT, :])


def rmsnorm_backward_golden(t):
    x = t["x"].double().requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + RB_EPS) * t["gamma"].double()
    y.backward(t["dy"].double())
    t["dx"][:] = x.grad.float()


RB_SPECS = [
    TensorSpec("x", [RB_T, RB_D], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) + 0.5).to(dtype)),
    TensorSpec("dy", [RB_T, RB_D], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) + 0.5).to(dtype)),
    TensorSpec("gamma", [1, RB_D], torch.bfloat16, init_value=lambda s, dtype: (1.0 + 0.2 * torch.randn(s)).to(dtype)),
    TensorSpec("dx", [RB_T, RB_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# ALiBi attention over a packed batch of documents (no positional embedding; bias
# -slope_h * (i - j)): token i attends causally to the keys of its own document, from
# doc_start[i] to i. Key blocks are streamed from 0 with an online softmax, so a query whose
# document starts after a key block sees that block fully masked.

AL_H, AL_T, AL_D, AL_BQ, AL_BK = 4, 128, 32, 32, 32
AL_SCALE = 1.0 / math.sqrt(AL_D)
AL_DOCS = [45, 20, 63]


@ts.kernel
def alibi_doc_attention_block(
    q: ts.Tensor[[AL_BQ, AL_D], ts.f32],
    k: ts.Tensor[[AL_T, AL_D], ts.f32],
    v: ts.Tensor[[AL_T, AL_D], ts.f32],
    doc_start: ts.Tensor[[AL_BQ, 1], ts.i32],
    slope: ts.Tensor[[1, 1], ts.f32],
    o: ts.Out[[AL_BQ, AL_D], ts.f32],
    q0: ts.Scalar[ts.i32],
):
    qt = ts.load(q, [0, 0], [AL_BQ, AL_D])
    qpos = ts.iota([AL_BQ, 1], dim=0) + q0
    first = ts.load(doc_start, [0, 0], [AL_BQ, 1])
    sl = ts.load(slope, [0, 0], [1, 1])
    m = ts.full([AL_BQ, 1], float("-inf"), ts.f32)
    l = ts.zeros([AL_BQ, 1], ts.f32)
    acc = ts.zeros([AL_BQ, AL_D], ts.f32)
    for j in ts.range(0, q0 + AL_BQ, AL_BK):
        kpos = ts.iota([1, AL_BK]) + j
        s = ts.matmul(qt, ts.load(k, [j, 0], [AL_BK, AL_D]), transpose_b=True) * AL_SCALE
        s = s - sl * ts.cast(qpos - kpos, ts.f32)
        s = ts.where(ts.logical_and(kpos <= qpos, kpos >= first), s, float("-inf"))
        m_new = ts.maximum(m, ts.row_max(s))
        alpha = ts.exp(m - m_new)
        p = ts.exp(s - m_new)
        l = l * alpha + ts.row_sum(p)
        acc = acc * alpha + ts.matmul(p, ts.load(v, [j, 0], [AL_BK, AL_D]))
        m = m_new
    ts.store(o, [0, 0], acc / l)


@ts.jit
def alibi_packed_attention(
    q: ts.Tensor[[AL_H, AL_T, AL_D], ts.f32],
    k: ts.Tensor[[AL_H, AL_T, AL_D], ts.f32],
    v: ts.Tensor[[AL_H, AL_T, AL_D], ts.f32],
    doc_start: ts.Tensor[[AL_T, 1], ts.i32],
    slopes: ts.Tensor[[AL_H, 1], ts.f32],
    o: ts.Out[[AL_H, AL_T, AL_D], ts.f32],
):
    for h in ts.range(0, AL_H):
        for r in ts.range(0, AL_T, AL_BQ):
            alibi_doc_attention_block(q[h, r : r + AL_BQ, :], k[h, :, :], v[h, :, :], doc_start[r : r + AL_BQ, :],
                                      slopes[h : h + 1, :], o[h, r : r + AL_BQ, :], r)


def alibi_doc_starts(shape, dtype):
    starts = torch.cat([torch.full((n,), sum(AL_DOCS[:i])) for i, n in enumerate(AL_DOCS)])
    return starts[:, None].to(dtype)


def alibi_slopes(shape, dtype):
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / AL_H) for h in range(AL_H)])[:, None].to(dtype)


def alibi_packed_attention_golden(t):
    q, k, v = (t[n].double() for n in ("q", "k", "v"))
    i = torch.arange(AL_T)[:, None]
    j = torch.arange(AL_T)[None, :]
    s = (q @ k.transpose(-1, -2)) * AL_SCALE - t["slopes"].double()[:, :, None] * (i - j)
    allowed = (j <= i) & (j >= t["doc_start"].long())
    s = s.masked_fill(~allowed, float("-inf"))
    t["o"][:] = (torch.softmax(s, dim=-1) @ v).float()


AL_SPECS = [
    TensorSpec("q", [AL_H, AL_T, AL_D], torch.float32, init_value=torch.randn),
    TensorSpec("k", [AL_H, AL_T, AL_D], torch.float32, init_value=torch.randn),
    TensorSpec("v", [AL_H, AL_T, AL_D], torch.float32, init_value=torch.randn),
    TensorSpec("doc_start", [AL_T, 1], torch.int32, init_value=alibi_doc_starts),
    TensorSpec("slopes", [AL_H, 1], torch.float32, init_value=alibi_slopes),
    TensorSpec("o", [AL_H, AL_T, AL_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Per-channel mean and unbiased variance of a [232, 64] batch (BatchNorm statistics) by Chan's
# parallel Welford: each 64-row chunk (the last one 40 rows) writes (count, mean, M2), then one
# task merges the chunks in order.

WF_N, WF_C, WF_BR = 232, 64, 64
WF_NCH = (WF_N + WF_BR - 1) // WF_BR


@ts.kernel
def welford_chunk(
    x: ts.Tensor[[WF_N, WF_C], ts.f32],
    part: ts.Out[[3, WF_C], ts.f32],
    r: ts.Scalar[ts.i32],
    rows: ts.Scalar[ts.i32],
):
    t = ts.load(x, [r, 0], [WF_BR, WF_C], valid=(rows, WF_C))
    mean = ts.col_sum(t) / rows
    d = ts.where(ts.iota([WF_BR, 1], dim=0) < rows, t - mean, 0.0)
    ts.store(part, [0, 0], ts.zeros([1, WF_C], ts.f32) + rows)
    ts.store(part, [1, 0], mean)
    ts.store(part, [2, 0], ts.col_sum(d * d))


@ts.kernel
def welford_merge(
    part: ts.Tensor[[3 * WF_NCH, WF_C], ts.f32],
    mean: ts.Out[[1, WF_C], ts.f32],
    var: ts.Out[[1, WF_C], ts.f32],
):
    n_a = ts.load(part, [0, 0], [1, WF_C])
    mean_a = ts.load(part, [1, 0], [1, WF_C])
    m2_a = ts.load(part, [2, 0], [1, WF_C])
    for i in ts.range(1, WF_NCH):
        n_b = ts.load(part, [3 * i, 0], [1, WF_C])
        mean_b = ts.load(part, [3 * i + 1, 0], [1, WF_C])
        m2_b = ts.load(part, [3 * i + 2, 0], [1, WF_C])
        n = n_a + n_b
        delta = mean_b - mean_a
        mean_a = mean_a + delta * n_a / n
        m2_a = m2_a + m2_b + delta * delta * n_a * n_b / n
        n_a = n
    ts.store(mean, [0, 0], mean_a)
    ts.store(var, [0, 0], m2_a / (n_a - 1.0))


@ts.jit
def welford_stats(
    x: ts.Tensor[[WF_N, WF_C], ts.f32],
    mean: ts.Out[[1, WF_C], ts.f32],
    var: ts.Out[[1, WF_C], ts.f32],
):
    part = ts.create_tensor([3 * WF_NCH, WF_C], ts.f32)
    for i in ts.range(0, WF_NCH):
        r = i * WF_BR
        welford_chunk(x, part[3 * i : 3 * i + 3, :], r, min(WF_N - r, WF_BR))
    welford_merge(part, mean, var)


def welford_stats_golden(t):
    x = t["x"].double()
    t["mean"][:] = x.mean(dim=0, keepdim=True).float()
    t["var"][:] = x.var(dim=0, keepdim=True).float()


WF_SPECS = [
    TensorSpec("x", [WF_N, WF_C], torch.float32,
               init_value=lambda s, dtype: (torch.randn(s) * 2.0 + torch.linspace(-3.0, 5.0, s[0])[:, None]).to(dtype)),
    TensorSpec("mean", [1, WF_C], torch.float32, is_output=True),
    TensorSpec("var", [1, WF_C], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Sampling prep for a batch of requests: the repetition penalty (CTRL / HF: a seen token's
# logit is divided by the penalty when positive, multiplied when negative), each request's
# temperature, then softmax over the 1024-word vocabulary.

SP_B, SP_V, SP_BR, SP_CH = 16, 1024, 8, 256


@ts.kernel
def penalize_logits(
    logits: ts.Tensor[[SP_BR, SP_CH], ts.f32],
    seen: ts.Tensor[[SP_BR, SP_CH], ts.i8],
    temp: ts.Tensor[[SP_BR, 1], ts.f32],
    out: ts.Out[[SP_BR, SP_CH], ts.f32],
    penalty: ts.Scalar[ts.f32],
):
    t = ts.load(logits, [0, 0], [SP_BR, SP_CH])
    hit = ts.load(seen, [0, 0], [SP_BR, SP_CH]) != 0
    t = ts.where(hit, ts.where(t > 0.0, t * penalty, t / penalty), t)
    ts.store(out, [0, 0], t / ts.load(temp, [0, 0], [SP_BR, 1]))


@ts.kernel
def softmax_vocab_rows(z: ts.Tensor[[SP_BR, SP_V], ts.f32], probs: ts.Out[[SP_BR, SP_V], ts.f32]):
    m = ts.full([SP_BR, 1], float("-inf"), ts.f32)
    l = ts.zeros([SP_BR, 1], ts.f32)
    for c in ts.range(0, SP_V, SP_CH):
        t = ts.load(z, [0, c], [SP_BR, SP_CH])
        m_new = ts.maximum(m, ts.row_max(t))
        l = l * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    inv = 1.0 / l
    for c in ts.range(0, SP_V, SP_CH):
        ts.store(probs, [0, c], ts.exp(ts.load(z, [0, c], [SP_BR, SP_CH]) - m) * inv)


@ts.jit
def sampling_probs(
    logits: ts.Tensor[[SP_B, SP_V], ts.f32],
    seen: ts.Tensor[[SP_B, SP_V], ts.i8],
    temps: ts.Tensor[[SP_B, 1], ts.f32],
    probs: ts.Out[[SP_B, SP_V], ts.f32],
    penalty: ts.Scalar[ts.f32],
):
    z = ts.create_tensor([SP_B, SP_V], ts.f32)
    for r in ts.range(0, SP_B, SP_BR):
        for c in ts.range(0, SP_V, SP_CH):
            penalize_logits(logits[r : r + SP_BR, c : c + SP_CH], seen[r : r + SP_BR, c : c + SP_CH],
                            temps[r : r + SP_BR, :], z[r : r + SP_BR, c : c + SP_CH], penalty)
    for r in ts.range(0, SP_B, SP_BR):
        softmax_vocab_rows(z[r : r + SP_BR, :], probs[r : r + SP_BR, :])


def sampling_probs_golden(t):
    x = t["logits"].double()
    pen = t["penalty"]
    penalized = torch.where(x < 0, x * pen, x / pen)
    x = torch.where(t["seen"] != 0, penalized, x)
    t["probs"][:] = torch.softmax(x / t["temps"].double(), dim=-1).float()


SP_SPECS = [
    TensorSpec("logits", [SP_B, SP_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 3.0),
    TensorSpec("seen", [SP_B, SP_V], torch.int8, init_value=lambda s, dtype: (torch.rand(s) < 0.2).to(dtype)),
    TensorSpec("temps", [SP_B, 1], torch.float32, init_value=lambda s, dtype: (0.5 + torch.rand(s)).to(dtype)),
    TensorSpec("probs", [SP_B, SP_V], torch.float32, is_output=True),
    ScalarSpec("penalty", torch.float32, 1.3),
]

# --------------------------------------------------------------------------------------------
# Output projection with LayerScale (CaiT): y = residual + gamma * (x @ W + b), gamma a learned
# per-channel scale (small, ~0.1). 64 x 64 output tiles.

LS_M, LS_K, LS_N, LS_BM, LS_BN, LS_BK = 128, 128, 128, 64, 64, 64


@ts.kernel
def layerscale_proj_tile(
    x: ts.Tensor[[LS_BM, LS_K], ts.f32],
    w: ts.Tensor[[LS_K, LS_BN], ts.f32],
    b: ts.Tensor[[1, LS_BN], ts.f32],
    gamma: ts.Tensor[[1, LS_BN], ts.f32],
    res: ts.Tensor[[LS_BM, LS_BN], ts.f32],
    y: ts.Out[[LS_BM, LS_BN], ts.f32],
):
    acc = ts.zeros([LS_BM, LS_BN], ts.f32)
    for k in ts.range(0, LS_K, LS_BK):
        acc = acc + ts.matmul(ts.load(x, [0, k], [LS_BM, LS_BK]), ts.load(w, [k, 0], [LS_BK, LS_BN]))
    bias = ts.load(b, [0, 0], [1, LS_BN])
    g = ts.load(gamma, [0, 0], [1, LS_BN])
    r = ts.load(res, [0, 0], [LS_BM, LS_BN])
    ts.store(y, [0, 0], r + g * acc + bias)


@ts.jit
def layerscale_proj(
    x: ts.Tensor[[LS_M, LS_K], ts.f32],
    w: ts.Tensor[[LS_K, LS_N], ts.f32],
    b: ts.Tensor[[1, LS_N], ts.f32],
    gamma: ts.Tensor[[1, LS_N], ts.f32],
    res: ts.Tensor[[LS_M, LS_N], ts.f32],
    y: ts.Out[[LS_M, LS_N], ts.f32],
):
    for m in ts.range(0, LS_M, LS_BM):
        for n in ts.range(0, LS_N, LS_BN):
            layerscale_proj_tile(x[m : m + LS_BM, :], w[:, n : n + LS_BN], b[:, n : n + LS_BN], gamma[:, n : n + LS_BN],
                                 res[m : m + LS_BM, n : n + LS_BN], y[m : m + LS_BM, n : n + LS_BN])


def layerscale_proj_golden(t):
    h = torch.nn.functional.linear(t["x"].double(), t["w"].double().T, t["b"][0].double())
    t["y"][:] = (t["res"].double() + t["gamma"].double() * h).float()


LS_SPECS = [
    TensorSpec("x", [LS_M, LS_K], torch.float32, init_value=torch.randn),
    TensorSpec("w", [LS_K, LS_N], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 11.0),
    TensorSpec("b", [1, LS_N], torch.float32, init_value=torch.randn),
    TensorSpec("gamma", [1, LS_N], torch.float32, init_value=lambda s, dtype: (0.1 + 0.02 * torch.randn(s)).to(dtype)),
    TensorSpec("res", [LS_M, LS_N], torch.float32, init_value=torch.randn),
    TensorSpec("y", [LS_M, LS_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# GEGLU feed-forward input half with biases (T5 v1.1 / gated-GELU MLP, tanh GELU):
#   h = gelu(x @ Wg + bg) * (x @ Wu + bu)
# weights stored [D, F], f32, 64 x 64 output tiles.

GE_M, GE_D, GE_F, GE_BM, GE_BF, GE_BK = 128, 128, 256, 64, 64, 64


@ts.kernel
def geglu_tile(
    x: ts.Tensor[[GE_BM, GE_D], ts.f32],
    wg: ts.Tensor[[GE_D, GE_BF], ts.f32],
    bg: ts.Tensor[[1, GE_BF], ts.f32],
    wu: ts.Tensor[[GE_D, GE_BF], ts.f32],
    bu: ts.Tensor[[1, GE_BF], ts.f32],
    h: ts.Out[[GE_BM, GE_BF], ts.f32],
):
    g = ts.zeros([GE_BM, GE_BF], ts.f32)
    u = ts.zeros([GE_BM, GE_BF], ts.f32)
    for k in ts.range(0, GE_D, GE_BK):
        a = ts.load(x, [0, k], [GE_BM, GE_BK])
        g = g + ts.matmul(a, ts.load(wg, [k, 0], [GE_BK, GE_BF]))
        u = u + ts.matmul(a, ts.load(wu, [k, 0], [GE_BK, GE_BF]))
    gate = ts.gelu(g + ts.load(bg, [0, 0], [1, GE_BF]), approximate="tanh")
    ts.store(h, [0, 0], gate * u + ts.load(bu, [0, 0], [1, GE_BF]))


@ts.jit
def geglu(
    x: ts.Tensor[[GE_M, GE_D], ts.f32],
    wg: ts.Tensor[[GE_D, GE_F], ts.f32],
    bg: ts.Tensor[[1, GE_F], ts.f32],
    wu: ts.Tensor[[GE_D, GE_F], ts.f32],
    bu: ts.Tensor[[1, GE_F], ts.f32],
    h: ts.Out[[GE_M, GE_F], ts.f32],
):
    for m in ts.range(0, GE_M, GE_BM):
        for f in ts.range(0, GE_F, GE_BF):
            geglu_tile(x[m : m + GE_BM, :], wg[:, f : f + GE_BF], bg[:, f : f + GE_BF], wu[:, f : f + GE_BF],
                       bu[:, f : f + GE_BF], h[m : m + GE_BM, f : f + GE_BF])


def geglu_golden(t):
    x = t["x"].double()
    g = x @ t["wg"].double() + t["bg"].double()
    u = x @ t["wu"].double() + t["bu"].double()
    t["h"][:] = (torch.nn.functional.gelu(g, approximate="tanh") * u).float()


GE_SPECS = [
    TensorSpec("x", [GE_M, GE_D], torch.float32, init_value=torch.randn),
    TensorSpec("wg", [GE_D, GE_F], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 11.0),
    TensorSpec("bg", [1, GE_F], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.5),
    TensorSpec("wu", [GE_D, GE_F], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 11.0),
    TensorSpec("bu", [1, GE_F], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.5),
    TensorSpec("h", [GE_M, GE_F], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Group-wise int8 weight-only linear (GPTQ/AWQ-style W8A16 with group size 64): w int8 in
# nn.Linear's [N, K] layout, one f32 scale per output channel and group of 64 input channels
# ([N, K / 64]); each group's weights are dequantized in the K loop, y = x @ w_deq.T in f32.

GQ_M, GQ_K, GQ_N, GQ_G, GQ_BM, GQ_BN = 64, 256, 128, 64, 64, 64
GQ_NG = GQ_K // GQ_G


@ts.kernel
def group_dequant_linear_tile(
    x: ts.Tensor[[GQ_BM, GQ_K], ts.bf16],
    w: ts.Tensor[[GQ_BN, GQ_K], ts.i8],
    scales: ts.Tensor[[GQ_BN, GQ_NG], ts.f32],
    y: ts.Out[[GQ_BM, GQ_BN], ts.f32],
):
    acc = ts.zeros([GQ_BM, GQ_BN], ts.f32)
    for g in ts.range(0, GQ_NG):
        k = g * GQ_G
        a = ts.cast(ts.load(x, [0, k], [GQ_BM, GQ_G]), ts.f32)
        wd = ts.cast(ts.load(w, [0, k], [GQ_BN, GQ_G]), ts.f32) * ts.load(scales, [0, g], [GQ_BN, 1])
        acc = acc + ts.matmul(a, wd)
    ts.store(y, [0, 0], acc)


@ts.jit
def group_dequant_linear(
    x: ts.Tensor[[GQ_M, GQ_K], ts.bf16],
    w: ts.Tensor[[GQ_N, GQ_K], ts.i8],
    scales: ts.Tensor[[GQ_N, GQ_NG], ts.f32],
    y: ts.Out[[GQ_M, GQ_N], ts.f32],
):
    for m in ts.range(0, GQ_M, GQ_BM):
        for n in ts.range(0, GQ_N, GQ_BN):
            group_dequant_linear_tile(x[m : m + GQ_BM, :], w[n : n + GQ_BN, :], scales[n : n + GQ_BN, :], y[m : m + GQ_BM, n : n + GQ_BN])


def group_dequant_linear_golden(t):
    w = t["w"].double() * t["scales"].double().repeat_interleave(GQ_G, dim=1)
    t["y"][:] = torch.nn.functional.linear(t["x"].double(), w).float()


GQ_SPECS = [
    TensorSpec("x", [GQ_M, GQ_K], torch.bfloat16, init_value=torch.randn),
    TensorSpec("w", [GQ_N, GQ_K], torch.int8, init_value=lambda s, dtype: torch.randint(-127, 128, s, dtype=dtype)),
    TensorSpec("scales", [GQ_N, GQ_NG], torch.float32, init_value=lambda s, dtype: (0.001 + 0.01 * torch.rand(s)).to(dtype)),
    TensorSpec("y", [GQ_M, GQ_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# W8A8 GEMM (SmoothQuant-style): int8 activations with one scale per token, int8 weights
# ([K, N]) with one scale per output channel, exact int32 accumulation, then
# y = acc * sx[token] * sw[channel]. Both scale vectors are stored as rows ([1, M], [1, N]).

QA_M, QA_K, QA_N, QA_BM, QA_BN, QA_BK = 128, 256, 128, 64, 64, 64


@ts.kernel
def w8a8_gemm_tile(
    xq: ts.Tensor[[QA_BM, QA_K], ts.i8],
    wq: ts.Tensor[[QA_K, QA_BN], ts.i8],
    sx: ts.Tensor[[1, QA_BM], ts.f32],
    sw: ts.Tensor[[1, QA_BN], ts.f32],
    y: ts.Out[[QA_BM, QA_BN], ts.f32],
):
    acc = ts.zeros([QA_BM, QA_BN], ts.i32)
    for k in ts.range(0, QA_K, QA_BK):
        acc = acc + ts.matmul(ts.load(xq, [0, k], [QA_BM, QA_BK]), ts.load(wq, [k, 0], [QA_BK, QA_BN]))
    sx_t = ts.load(sx, [0, 0], [1, QA_BM])
    sw_t = ts.load(sw, [0, 0], [1, QA_BN])
    ts.store(y, [0, 0], ts.cast(acc, ts.f32) * sx_t * sw_t)


@ts.jit
def w8a8_gemm(
    xq: ts.Tensor[[QA_M, QA_K], ts.i8],
    wq: ts.Tensor[[QA_K, QA_N], ts.i8],
    sx: ts.Tensor[[1, QA_M], ts.f32],
    sw: ts.Tensor[[1, QA_N], ts.f32],
    y: ts.Out[[QA_M, QA_N], ts.f32],
):
    for m in ts.range(0, QA_M, QA_BM):
        for n in ts.range(0, QA_N, QA_BN):
            w8a8_gemm_tile(xq[m : m + QA_BM, :], wq[:, n : n + QA_BN], sx[:, m : m + QA_BM], sw[:, n : n + QA_BN],
                           y[m : m + QA_BM, n : n + QA_BN])


def w8a8_gemm_golden(t):
    acc = t["xq"].double() @ t["wq"].double()
    t["y"][:] = (acc * t["sx"].double().T * t["sw"].double()).float()


def int8_values(shape, dtype):
    return torch.randint(-127, 128, shape, dtype=dtype)


QA_SPECS = [
    TensorSpec("xq", [QA_M, QA_K], torch.int8, init_value=int8_values),
    TensorSpec("wq", [QA_K, QA_N], torch.int8, init_value=int8_values),
    TensorSpec("sx", [1, QA_M], torch.float32, init_value=lambda s, dtype: (0.005 + 0.05 * torch.rand(s)).to(dtype)),
    TensorSpec("sw", [1, QA_N], torch.float32, init_value=lambda s, dtype: (0.001 + 0.01 * torch.rand(s)).to(dtype)),
    TensorSpec("y", [QA_M, QA_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# BERT's masked-LM head input: the hidden states of the masked positions, named by
# (batch, position) pairs, are gathered from the flattened [B * L, D] sequence output
# (gather_indexes: row = batch * L + position) and scored against the tied word embeddings,
# plus the output bias, 128 words at a time.

MM_B, MM_L, MM_D, MM_V, MM_M, MM_BT, MM_VC = 4, 64, 64, 512, 32, 16, 128


@ts.kernel
def mlm_logits_block(
    hidden: ts.Tensor[[MM_B * MM_L, MM_D], ts.f32],
    masked: ts.Tensor[[MM_BT, 2], ts.i32],
    emb: ts.Tensor[[MM_V, MM_D], ts.f32],
    bias: ts.Tensor[[1, MM_V], ts.f32],
    logits: ts.Out[[MM_BT, MM_V], ts.f32],
):
    bi = ts.load(masked, [0, 0], [MM_BT, 1])
    pos = ts.load(masked, [0, 0], [MM_BT, 1])
    h = ts.load_rows(hidden, bi * MM_L + pos, MM_D)
    for v in ts.range(0, MM_V, MM_VC):
        z = ts.matmul(h, ts.load(emb, [v, 0], [MM_VC, MM_D]), transpose_b=True)
        ts.store(logits, [0, v], z + ts.load(bias, [0, v], [1, MM_VC]))


@ts.jit
def mlm_head(
    hidden: ts.Tensor[[MM_B * MM_L, MM_D], ts.f32],
    masked: ts.Tensor[[MM_M, 2], ts.i32],
    emb: ts.Tensor[[MM_V, MM_D], ts.f32],
    bias: ts.Tensor[[1, MM_V], ts.f32],
    logits: ts.Out[[MM_M, MM_V], ts.f32],
):
    for r in ts.range(0, MM_M, MM_BT):
        mlm_logits_block(hidden, masked[r : r + MM_BT, :], emb, bias, logits[r : r + MM_BT, :])


def mlm_head_golden(t):
    seq = t["hidden"].double().view(MM_B, MM_L, MM_D)
    pairs = t["masked"].long()
    h = seq[pairs[:, 0], pairs[:, 1]]
    t["logits"][:] = (h @ t["emb"].double().T + t["bias"].double()).float()


def masked_pairs(shape, dtype):
    return torch.stack([torch.randint(0, MM_B, (shape[0],)), torch.randint(0, MM_L, (shape[0],))], dim=1).to(dtype)


MM_SPECS = [
    TensorSpec("hidden", [MM_B * MM_L, MM_D], torch.float32, init_value=torch.randn),
    TensorSpec("masked", [MM_M, 2], torch.int32, init_value=masked_pairs),
    TensorSpec("emb", [MM_V, MM_D], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 8.0),
    TensorSpec("bias", [1, MM_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 0.1),
    TensorSpec("logits", [MM_M, MM_V], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# 2x2 average pooling (stride 2) of channels-last images: x is [N, H, W, C] viewed as
# [N, H, W / 2, 2C], so the two horizontal neighbours share a row; a task averages input rows
# 2i and 2i + 1 into output row i.

AP_N, AP_H, AP_W, AP_C = 2, 32, 32, 16


@ts.kernel
def avg_pool_2x2_row(
    top: ts.Tensor[[AP_W // 2, 2 * AP_C], ts.f32],
    bottom: ts.Tensor[[AP_W // 2, 2 * AP_C], ts.f32],
    out: ts.Out[[AP_W // 2, AP_C], ts.f32],
):
    s = ts.load(top, [0, 0], [AP_W // 2, 2 * AP_C]) + ts.load(bottom, [0, 0], [AP_W // 2, 2 * AP_C])
    ts.store(out, [0, 0], (s[:, 0:AP_C] + s[:, AP_C : 2 * AP_C]) * 0.25)


@ts.jit
def avg_pool_2x2(
    x: ts.Tensor[[AP_N, AP_H, AP_W // 2, 2 * AP_C], ts.f32],
    y: ts.Out[[AP_N, AP_H // 2, AP_W // 2, AP_C], ts.f32],
):
    for n in ts.range(0, AP_N):
        for i in ts.range(0, AP_H // 2):
            avg_pool_2x2_row(x[n, i, :, :], x[n, i + 1, :, :], y[n, i, :, :])


def avg_pool_2x2_golden(t):
    x = t["x"].double().reshape(AP_N, AP_H, AP_W, AP_C).permute(0, 3, 1, 2)
    y = torch.nn.functional.avg_pool2d(x, kernel_size=2, stride=2)
    t["y"][:] = y.permute(0, 2, 3, 1).float()


AP_SPECS = [
    TensorSpec("x", [AP_N, AP_H, AP_W // 2, 2 * AP_C], torch.float32, init_value=torch.randn),
    TensorSpec("y", [AP_N, AP_H // 2, AP_W // 2, AP_C], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="embedding_bag_tail_reads_row_zero",
        what="the row gather of a bag's last, ragged chunk of indices has no valid=: the index tile's slots past "
        "the bag's end hold the load's fill 0, so embedding row 0 is summed once for each of them",
        pattern="mask",
        program=embedding_bag_mean,
        specs=EB_SPECS,
        golden=embedding_bag_mean_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="embedding_bag_mean_bag",
        op="load_rows",
        line=(embedding_bag_mean_bag, "rows = ts.load_rows(weight, idx, EB_D)"),
        fixed="rows = ts.load_rows(weight, idx, EB_D, valid=cnt)",
    ),
    BlindBug(
        name="segment_softmax_stats_mask_no_offset",
        what="the length mask of the max/sum pass compares the chunk-local column index with lens (no + c): "
        "in every chunk after the first it keeps the wrong columns, so the normalizer is wrong (the "
        "normalizing pass's mask is right)",
        pattern="mask",
        program=segment_softmax,
        specs=SG_SPECS,
        golden=segment_softmax_golden,
        rtol=1e-5,
        atol=1e-6,
        category="algorithm",
        kernel="segment_softmax_rows",
        op="lt",
        line=(segment_softmax_rows, "keep = ts.iota([SG_BR, SG_CH]) < n"),
        fixed="keep = ts.iota([SG_BR, SG_CH]) + c < n",
    ),
    BlindBug(
        name="grouped_gemm_last_block_per_group",
        what="the block count of a group is (cnt - 1) // 32 instead of ceil(cnt / 32) = (cnt + 31) // 32: the "
        "last block of every group (all of a 17-row group) is never computed and its rows of y stay 0",
        pattern="off_by_one",
        program=grouped_gemm,
        specs=GG_SPECS,
        golden=grouped_gemm_golden,
        rtol=1e-4,
        atol=1e-4,
        category="uninitialized",
        kernel=None,
        op="range",
        line=(grouped_gemm, "for i in ts.range(0, (cnt - 1) // GG_BM):"),
        fixed="for i in ts.range(0, (cnt + GG_BM - 1) // GG_BM):",
    ),
    BlindBug(
        name="last_token_head_reads_pad",
        what="the classification head reads the hidden state at position lens[b] (the first padding slot) "
        "instead of lens[b] - 1, the sequence's last real token",
        pattern="off_by_one",
        program=last_token_classifier,
        specs=LT_SPECS,
        golden=last_token_classifier_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="last_token_head",
        op="call",
        line=(last_token_classifier, "last_token_head(hidden[b, n : n + 1, :], w, bias, logits[b : b + 1, :])"),
        fixed="last_token_head(hidden[b, n - 1 : n, :], w, bias, logits[b : b + 1, :])",
    ),
    BlindBug(
        name="vocab_shard_gather_unclamped",
        what="token ids outside this rank's vocabulary shard are gathered at their raw shard-local index "
        "(negative, or past the shard's 256 rows) before being zeroed: the local index is not clamped "
        "(where(keep, local, 0)) before the gather",
        pattern="missing_clamp",
        program=vocab_parallel_embedding,
        specs=VP_SPECS,
        golden=vocab_parallel_embedding_golden,
        rtol=0.0,
        atol=0.0,
        category="out_of_bounds",
        kernel="vocab_shard_embed",
        op="load_rows",
        line=(vocab_shard_embed, "rows = ts.load_rows(emb, local, VP_D)"),
        fixed="rows = ts.load_rows(emb, ts.where(keep, local, 0), VP_D)",
    ),
    BlindBug(
        name="cosine_dot_f16_chunk_sums",
        what="the dot product's 512-element chunks are multiplied and summed in f16 (row_sum of an f16 tile) "
        "and only then cast to f32; the norms are upcast first",
        pattern="narrow_accumulator",
        program=cosine_similarity,
        specs=CO_SPECS,
        golden=cosine_similarity_golden,
        rtol=1e-5,
        atol=1e-6,
        category="precision",
        kernel="cosine_rows",
        op="row_sum",
        line=(cosine_rows, "dot = dot + ts.cast(ts.row_sum(at * bt), ts.f32)"),
        fixed="dot = dot + ts.row_sum(af * bf)",
        verdict="guilty",
    ),
    BlindBug(
        name="rmsnorm_bwd_bf16_dot",
        what="the backward's row reduction sum(g * dy * x) is computed on the bf16 tiles (products and the "
        "chunk sum rounded to bf16) and cast to f32 afterwards",
        pattern="narrow_accumulator",
        program=rmsnorm_backward,
        specs=RB_SPECS,
        golden=rmsnorm_backward_golden,
        rtol=1e-4,
        atol=1e-5,
        category="precision",
        kernel="rmsnorm_backward_rows",
        op="row_sum",
        line=(rmsnorm_backward_rows, "dot = dot + ts.cast(ts.row_sum(gt * dyt * xt), ts.f32)"),
        fixed="dot = dot + ts.row_sum(ts.cast(gt, ts.f32) * ts.cast(dyt, ts.f32) * xf)",
        verdict="guilty",
    ),
    BlindBug(
        name="alibi_docs_running_max_neg_inf",
        what="the running max starts at -inf: a query whose document starts after key block 0 sees that "
        "block fully masked, its max stays -inf and exp(-inf - -inf) is NaN (a finite start, -1e30, keeps "
        "the masked block's weights 0 and is wiped by the first real block)",
        pattern="missing_guard",
        program=alibi_packed_attention,
        specs=AL_SPECS,
        golden=alibi_packed_attention_golden,
        rtol=1e-4,
        atol=1e-4,
        category="nan",
        kernel="alibi_doc_attention_block",
        op="full",
        line=(alibi_doc_attention_block, 'm = ts.full([AL_BQ, 1], float("-inf"), ts.f32)'),
        fixed="m = ts.full([AL_BQ, 1], -1e30, ts.f32)",
    ),
    BlindBug(
        name="welford_merge_counts_swapped",
        what="the merged mean moves toward the new chunk by delta * n_a / n instead of delta * n_b / n: the two "
        "counts are swapped, so a large running total is pulled toward a small chunk (and M2 follows)",
        pattern="swapped_operands",
        program=welford_stats,
        specs=WF_SPECS,
        golden=welford_stats_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="welford_merge",
        op="mul",
        line=(welford_merge, "mean_a = mean_a + delta * n_a / n"),
        fixed="mean_a = mean_a + delta * n_b / n",
    ),
    BlindBug(
        name="repetition_penalty_branches_swapped",
        what="the repetition penalty multiplies positive logits of seen tokens and divides negative ones, the "
        "two branches of the where swapped: repeated tokens become more likely instead of less",
        pattern="swapped_operands",
        program=sampling_probs,
        specs=SP_SPECS,
        golden=sampling_probs_golden,
        rtol=1e-4,
        atol=1e-6,
        category="algorithm",
        kernel="penalize_logits",
        op="where",
        line=(penalize_logits, "t = ts.where(hit, ts.where(t > 0.0, t * penalty, t / penalty), t)"),
        fixed="t = ts.where(hit, ts.where(t > 0.0, t / penalty, t * penalty), t)",
    ),
    BlindBug(
        name="layerscale_bias_outside_scale",
        what="the epilogue scales only the matmul by the LayerScale gamma and adds the bias unscaled "
        "(res + gamma * acc + b) instead of res + gamma * (acc + b)",
        pattern="epilogue_order",
        program=layerscale_proj,
        specs=LS_SPECS,
        golden=layerscale_proj_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="layerscale_proj_tile",
        op="mul",
        line=(layerscale_proj_tile, "ts.store(y, [0, 0], r + g * acc + bias)"),
        fixed="ts.store(y, [0, 0], r + g * (acc + bias))",
    ),
    BlindBug(
        name="geglu_up_bias_after_gate",
        what="the up projection's bias is added after the gating product (gelu(g + bg) * u + bu) instead of "
        "to the up projection (gelu(g + bg) * (u + bu))",
        pattern="epilogue_order",
        program=geglu,
        specs=GE_SPECS,
        golden=geglu_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="geglu_tile",
        op="mul",
        line=(geglu_tile, "ts.store(h, [0, 0], gate * u + ts.load(bu, [0, 0], [1, GE_BF]))"),
        fixed="ts.store(h, [0, 0], gate * (u + ts.load(bu, [0, 0], [1, GE_BF])))",
    ),
    BlindBug(
        name="group_dequant_missing_transpose",
        what="the dequantized [BN, 64] weight group (nn.Linear's [N, K] layout) is multiplied as stored, "
        "x @ w instead of x @ w.T; group size and tile width are both 64, so the shapes agree",
        pattern="missing_transpose",
        program=group_dequant_linear,
        specs=GQ_SPECS,
        golden=group_dequant_linear_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="group_dequant_linear_tile",
        op="matmul",
        line=(group_dequant_linear_tile, "acc = acc + ts.matmul(a, wd)"),
        fixed="acc = acc + ts.matmul(a, wd, transpose_b=True)",
    ),
    BlindBug(
        name="w8a8_token_scale_wrong_axis",
        what="the per-token activation scales, a [1, BM] row, multiply the [BM, BN] accumulator along its "
        "columns (scaling output channel j by token j's scale) instead of along its rows (transpose to [BM, 1])",
        pattern="broadcast_axis",
        program=w8a8_gemm,
        specs=QA_SPECS,
        golden=w8a8_gemm_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="w8a8_gemm_tile",
        op="mul",
        line=(w8a8_gemm_tile, "ts.store(y, [0, 0], ts.cast(acc, ts.f32) * sx_t * sw_t)"),
        fixed="ts.store(y, [0, 0], ts.cast(acc, ts.f32) * ts.transpose(sx_t) * sw_t)",
    ),
    BlindBug(
        name="mlm_position_from_batch_column",
        what="the masked position is read from column 0 of the (batch, position) pairs, the batch column, "
        "instead of column 1: every gathered row is row batch * L + batch",
        pattern="wrong_column",
        program=mlm_head,
        specs=MM_SPECS,
        golden=mlm_head_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="mlm_logits_block",
        op="load",
        line=(mlm_logits_block, "pos = ts.load(masked, [0, 0], [MM_BT, 1])"),
        fixed="pos = ts.load(masked, [0, 1], [MM_BT, 1])",
    ),
    BlindBug(
        name="avg_pool_rows_stride_one",
        what="output row i averages input rows i and i + 1 instead of 2i and 2i + 1: the row slices of the "
        "call have stride 1 where the pool's stride is 2",
        pattern="wrong_slice",
        program=avg_pool_2x2,
        specs=AP_SPECS,
        golden=avg_pool_2x2_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="avg_pool_2x2_row",
        op="call",
        line=(avg_pool_2x2, "avg_pool_2x2_row(x[n, i, :, :], x[n, i + 1, :, :], y[n, i, :, :])"),
        fixed="avg_pool_2x2_row(x[n, 2 * i, :, :], x[n, 2 * i + 1, :, :], y[n, i, :, :])",
    ),
)
