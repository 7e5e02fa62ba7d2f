"""Routing, gathers and ragged batches: top-k router masking, embedding lookup by row gather,
MoE expert compute and combine (orchestration reads token ids), a ragged token batch."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Top-k router: keep each token's k largest expert logits and softmax over them (others get 0).
# The k-th largest is found by removing the row max k times.

TK_T, TK_E, TK_BLOCK, TK_K = 256, 64, 32, 4


@ts.kernel
def topk_router_rows(logits: ts.Tensor[[TK_BLOCK, TK_E], ts.f32], probs: ts.Out[[TK_BLOCK, TK_E], ts.f32]):
    t = ts.load(logits, [0, 0], [TK_BLOCK, TK_E])
    work = t
    kth = ts.full([TK_BLOCK, 1], float("inf"), ts.f32)
    for i in ts.range(0, TK_K):
        kth = ts.row_max(work)
        work = ts.where(work >= kth, float("-inf"), work)
    s = ts.where(t > kth, t, float("-inf"))
    e = ts.exp(s - ts.row_max(s))
    ts.store(probs, [0, 0], e / ts.row_sum(e))


@ts.jit
def topk_router(logits: ts.Tensor[[TK_T, TK_E], ts.f32], probs: ts.Out[[TK_T, TK_E], ts.f32]):
    for r in ts.range(0, TK_T, TK_BLOCK):
        topk_router_rows(logits[r : r + TK_BLOCK, :], probs[r : r + TK_BLOCK, :])


def topk_router_golden(t):
    x = t["logits"].double()
    vals, idx = x.topk(TK_K, dim=1)
    p = torch.zeros_like(x)
    p.scatter_(1, idx, torch.softmax(vals, dim=1))
    t["probs"][:] = p.float()


TK_SPECS = [
    TensorSpec("logits", [TK_T, TK_E], torch.float32, init_value=torch.randn),
    TensorSpec("probs", [TK_T, TK_E], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Embedding lookup: out[i, :] = table[ids[i], :], gathered 64 columns at a time.

EM_V, EM_D, EM_N, EM_BT, EM_CH = 1000, 256, 256, 32, 64


@ts.kernel
def embed_block(
    table: ts.Tensor[[EM_V, EM_D], ts.f32],
    ids: ts.Tensor[[1, EM_BT], ts.i32],
    out: ts.Out[[EM_BT, EM_D], ts.f32],
):
    rows = ts.load(ids, [0, 0], [1, EM_BT])
    for c in ts.range(0, EM_D, EM_CH):
        ts.store(out, [0, c], ts.load_rows(table, rows, (0, EM_CH)))


@ts.jit
def embedding(
    table: ts.Tensor[[EM_V, EM_D], ts.f32],
    ids: ts.Tensor[[1, EM_N], ts.i32],
    out: ts.Out[[EM_N, EM_D], ts.f32],
):
    for i in ts.range(0, EM_N, EM_BT):
        embed_block(table, ids[:, i : i + EM_BT], out[i : i + EM_BT, :])


def embedding_golden(t):
    t["out"][:] = t["table"][t["ids"][0].long()]


EM_SPECS = [
    TensorSpec("table", [EM_V, EM_D], torch.float32, init_value=torch.randn),
    TensorSpec("ids", [1, EM_N], torch.int32, init_value=lambda s, dtype: torch.randint(0, EM_V, s, dtype=dtype)),
    TensorSpec("out", [EM_N, EM_D], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# MoE layer (top-2 of 4 experts), added into the residual stream: for each expert, gather its
# tokens, y = silu(x_tok @ W_e) * router_weight; then each (expert, slot) row is added into its
# token's row of out. Routing (token ids per expert, counts, weights) is an input.

MO_T, MO_D, MO_E, MO_K = 64, 64, 4, 2


@ts.kernel
def expert_ffn(
    x: ts.Tensor[[MO_T, MO_D], ts.f32],
    ids: ts.Tensor[[1, MO_T], ts.i32],
    w: ts.Tensor[[MO_D, MO_D], ts.f32],
    rw: ts.Tensor[[1, MO_T], ts.f32],
    y: ts.Out[[MO_T, MO_D], ts.f32],
    n: ts.Scalar[ts.i32],
):
    rows = ts.load(ids, [0, 0], [1, MO_T])
    xt = ts.load_rows(x, rows, MO_D, valid=n)
    h = ts.silu(ts.matmul(xt, ts.load(w, [0, 0], [MO_D, MO_D])))
    gate = ts.transpose(ts.load(rw, [0, 0], [1, MO_T]))
    ts.store(y, [0, 0], h * gate)


@ts.kernel
def add_row(src: ts.Tensor[[1, MO_D], ts.f32], dst: ts.InOut[[1, MO_D], ts.f32]):
    ts.store(dst, [0, 0], ts.load(dst, [0, 0], [1, MO_D]) + ts.load(src, [0, 0], [1, MO_D]))


@ts.jit
def moe_layer(
    x: ts.Tensor[[MO_T, MO_D], ts.f32],
    token_ids: ts.Tensor[[MO_E, MO_T], ts.i32],
    counts: ts.Tensor[[MO_E], ts.i32],
    route_w: ts.Tensor[[MO_E, MO_T], ts.f32],
    w: ts.Tensor[[MO_E, MO_D, MO_D], ts.f32],
    out: ts.InOut[[MO_T, MO_D], ts.f32],
):
    y = ts.create_tensor([MO_E, MO_T, MO_D], ts.f32)
    for e in ts.range(0, MO_E):
        n = counts[e]
        expert_ffn(x, token_ids[e : e + 1, :], w[e, :, :], route_w[e : e + 1, :], y[e, :, :], n)
        for i in ts.range(0, n):
            tok = token_ids[e, i]
            add_row(y[e, i : i + 1, :], out[i : i + 1, :])


def routing():
    """Top-2 routing of MO_T tokens over MO_E experts from random router logits."""
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(MO_T, MO_E, generator=g)
    vals, experts = logits.topk(MO_K, dim=1)
    weights = torch.softmax(vals, dim=1)
    token_ids = torch.zeros(MO_E, MO_T, dtype=torch.int32)
    route_w = torch.zeros(MO_E, MO_T)
    counts = torch.zeros(MO_E, dtype=torch.int32)
    for tok in range(MO_T):
        for j in range(MO_K):
            e = int(experts[tok, j])
            token_ids[e, counts[e]] = tok
            route_w[e, counts[e]] = weights[tok, j]
            counts[e] += 1
    return token_ids, counts, route_w


_MO_IDS, _MO_COUNTS, _MO_RW = routing()


def moe_golden(t):
    x, w = t["x"].double(), t["w"].double()
    out = t["out"].double().clone()
    for e in range(MO_E):
        n = int(t["counts"][e])
        ids = t["token_ids"][e, :n].long()
        h = torch.nn.functional.silu(x[ids] @ w[e]) * t["route_w"][e, :n, None].double()
        out.index_add_(0, ids, h)
    t["out"][:] = out.float()


MO_SPECS = [
    TensorSpec("x", [MO_T, MO_D], torch.float32, init_value=torch.randn),
    TensorSpec("token_ids", [MO_E, MO_T], torch.int32, init_value=_MO_IDS),
    TensorSpec("counts", [MO_E], torch.int32, init_value=_MO_COUNTS),
    TensorSpec("route_w", [MO_E, MO_T], torch.float32, init_value=_MO_RW),
    TensorSpec("w", [MO_E, MO_D, MO_D], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 8.0),
    TensorSpec("out", [MO_T, MO_D], torch.float32, init_value=torch.randn, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Per-token RMS scaling of a ragged batch of n tokens (n is a run-time scalar; the buffer holds
# exactly 100 rows), 16 tokens at a time.

RG_ROWS, RG_D, RG_BT = 100, 64, 16


@ts.kernel
def ragged_rms(
    x: ts.Tensor[[RG_ROWS, RG_D], ts.f32],
    y: ts.Out[[RG_ROWS, RG_D], ts.f32],
    n: ts.Scalar[ts.i32],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, n, RG_BT):
        rows = min(n - r, RG_BT)
        t = ts.load(x, [r, 0], [RG_BT, RG_D])
        inv = ts.rsqrt(ts.row_mean(t * t) + eps)
        ts.store(y, [r, 0], t * inv, valid=(rows, RG_D))


@ts.jit
def ragged_tokens(
    x: ts.Tensor[[RG_ROWS, RG_D], ts.f32],
    y: ts.Out[[RG_ROWS, RG_D], ts.f32],
    n: ts.Scalar[ts.i32],
    eps: ts.Scalar[ts.f32],
):
    ragged_rms(x, y, n, eps)


def ragged_golden(t):
    x = t["x"].double()
    t["y"][:] = (x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + t["eps"])).float()


RG_SPECS = [
    TensorSpec("x", [RG_ROWS, RG_D], torch.float32, init_value=torch.randn),
    TensorSpec("y", [RG_ROWS, RG_D], torch.float32, is_output=True),
    ScalarSpec("n", torch.int32, RG_ROWS),
    ScalarSpec("eps", torch.float32, 1e-6),
]


BUGS = (
    BlindBug(
        name="topk_router_strict_threshold",
        what="the top-k mask keeps logits strictly above the k-th largest (>), so only k-1 experts survive",
        pattern="mask",
        program=topk_router,
        specs=TK_SPECS,
        golden=topk_router_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="topk_router_rows",
        op="gt",
        line=(topk_router_rows, "s = ts.where(t > kth"),
        fixed='s = ts.where(t >= kth, t, float("-inf"))',
    ),
    BlindBug(
        name="embedding_gather_no_col_offset",
        what="every column chunk gathers table columns 0:64 instead of c:c+64",
        pattern="wrong_offset",
        program=embedding,
        specs=EM_SPECS,
        golden=embedding_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="embed_block",
        op="load_rows",
        line=(embed_block, "ts.load_rows(table, rows, (0, EM_CH))"),
        fixed="ts.store(out, [0, c], ts.load_rows(table, rows, (c, EM_CH)))",
    ),
    BlindBug(
        name="moe_combine_slot_not_token",
        what="the combine adds expert slot i's row into out row i instead of into its token's row tok",
        pattern="wrong_slice",
        program=moe_layer,
        specs=MO_SPECS,
        golden=moe_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="add_row",
        op="call",
        line=(moe_layer, "add_row(y[e, i : i + 1, :], out[i : i + 1, :])"),
        fixed="add_row(y[e, i : i + 1, :], out[tok : tok + 1, :])",
    ),
    BlindBug(
        name="ragged_rms_load_no_valid",
        what="the last block's load has no valid= (the store has one), so it reads 12 rows past the 100-row buffer",
        pattern="mask",
        program=ragged_tokens,
        specs=RG_SPECS,
        golden=ragged_golden,
        rtol=1e-5,
        atol=1e-5,
        category="out_of_bounds",
        kernel="ragged_rms",
        op="load",
        line=(ragged_rms, "t = ts.load(x, [r, 0], [RG_BT, RG_D])"),
        fixed="t = ts.load(x, [r, 0], [RG_BT, RG_D], valid=(rows, RG_D))",
    ),
)
