"""GEMM kernels: tiled GEMM with bias epilogue, nn.Linear (weight [N, K]) with a run-time row
offset, f32 GEMM, GEMM + residual epilogue, batched matmul, similarity scores x @ y^T."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# C = A @ B + bias, bf16 inputs, f32 accumulation, bf16 output, one task per 64 x 64 tile.

GB_M, GB_N, GB_K, GB_BM, GB_BN, GB_BK = 256, 256, 512, 64, 64, 64


@ts.kernel
def gemm_bias_tile(
    a: ts.Tensor[[GB_BM, GB_K], ts.bf16],
    b: ts.Tensor[[GB_K, GB_BN], ts.bf16],
    bias: ts.Tensor[[1, GB_BN], ts.f32],
    c: ts.Out[[GB_BM, GB_BN], ts.bf16],
):
    acc = ts.zeros([GB_BM, GB_BN], ts.f32)
    for k in ts.range(0, GB_K - GB_BK, GB_BK):
        acc = acc + ts.matmul(ts.load(a, [0, k], [GB_BM, GB_BK]), ts.load(b, [k, 0], [GB_BK, GB_BN]))
    ts.store(c, [0, 0], ts.cast(acc + ts.load(bias, [0, 0], [1, GB_BN]), ts.bf16))


@ts.jit
def gemm_bias(
    a: ts.Tensor[[GB_M, GB_K], ts.bf16],
    b: ts.Tensor[[GB_K, GB_N], ts.bf16],
    bias: ts.Tensor[[1, GB_N], ts.f32],
    c: ts.Out[[GB_M, GB_N], ts.bf16],
):
    for i in ts.range(0, GB_M, GB_BM):
        for j in ts.range(0, GB_N, GB_BN):
            gemm_bias_tile(a[i : i + GB_BM, :], b[:, j : j + GB_BN], bias[:, j : j + GB_BN], c[i : i + GB_BM, j : j + GB_BN])


def gemm_bias_golden(t):
    a, b = t["a"].float(), t["b"].float()
    t["c"][:] = (a @ b + t["bias"]).to(torch.bfloat16)


GB_SPECS = [
    TensorSpec("a", [GB_M, GB_K], torch.bfloat16, init_value=torch.randn),
    TensorSpec("b", [GB_K, GB_N], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) * 0.05).to(dtype)),
    TensorSpec("bias", [1, GB_N], torch.float32, init_value=torch.randn),
    TensorSpec("c", [GB_M, GB_N], torch.bfloat16, is_output=True),
]

# --------------------------------------------------------------------------------------------
# nn.Linear: y = x @ W^T with W stored [out_features, in_features]; each task gets the whole W and
# the first output feature of its block as a scalar.

LN_T, LN_IN, LN_OUT, LN_BM, LN_BN, LN_BK = 128, 256, 256, 64, 64, 64


@ts.kernel
def linear_block(
    x: ts.Tensor[[LN_BM, LN_IN], ts.f32],
    w: ts.Tensor[[LN_OUT, LN_IN], ts.f32],
    y: ts.Out[[LN_BM, LN_BN], ts.f32],
    n0: ts.Scalar[ts.i32],
):
    acc = ts.zeros([LN_BM, LN_BN], ts.f32)
    for k in ts.range(0, LN_IN, LN_BK):
        xt = ts.load(x, [0, k], [LN_BM, LN_BK])
        wt = ts.load(w, [k, n0], [LN_BN, LN_BK])
        acc = acc + ts.matmul(xt, wt, transpose_b=True)
    ts.store(y, [0, 0], acc)


@ts.jit
def linear(x: ts.Tensor[[LN_T, LN_IN], ts.f32], w: ts.Tensor[[LN_OUT, LN_IN], ts.f32], y: ts.Out[[LN_T, LN_OUT], ts.f32]):
    for i in ts.range(0, LN_T, LN_BM):
        for n in ts.range(0, LN_OUT, LN_BN):
            linear_block(x[i : i + LN_BM, :], w, y[i : i + LN_BM, n : n + LN_BN], n)


def linear_golden(t):
    t["y"][:] = torch.nn.functional.linear(t["x"].double(), t["w"].double()).float()


LN_SPECS = [
    TensorSpec("x", [LN_T, LN_IN], torch.float32, init_value=torch.randn),
    TensorSpec("w", [LN_OUT, LN_IN], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 16.0),
    TensorSpec("y", [LN_T, LN_OUT], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# f32 GEMM whose inner products are meant to be f32 throughout.

GF_M, GF_N, GF_K, GF_BM, GF_BN, GF_BK = 128, 128, 512, 64, 64, 128


@ts.kernel
def gemm_f32_tile(
    a: ts.Tensor[[GF_BM, GF_K], ts.f32],
    b: ts.Tensor[[GF_K, GF_BN], ts.f32],
    c: ts.Out[[GF_BM, GF_BN], ts.f32],
):
    acc = ts.zeros([GF_BM, GF_BN], ts.f32)
    for k in ts.range(0, GF_K, GF_BK):
        at = ts.load(a, [0, k], [GF_BM, GF_BK])
        bt = ts.load(b, [k, 0], [GF_BK, GF_BN])
        acc = acc + ts.matmul(ts.cast(at, ts.f16), ts.cast(bt, ts.f16))
    ts.store(c, [0, 0], acc)


@ts.jit
def gemm_f32(a: ts.Tensor[[GF_M, GF_K], ts.f32], b: ts.Tensor[[GF_K, GF_N], ts.f32], c: ts.Out[[GF_M, GF_N], ts.f32]):
    for i in ts.range(0, GF_M, GF_BM):
        for j in ts.range(0, GF_N, GF_BN):
            gemm_f32_tile(a[i : i + GF_BM, :], b[:, j : j + GF_BN], c[i : i + GF_BM, j : j + GF_BN])


def gemm_f32_golden(t):
    t["c"][:] = (t["a"].double() @ t["b"].double()).float()


GF_SPECS = [
    TensorSpec("a", [GF_M, GF_K], torch.float32, init_value=torch.randn),
    TensorSpec("b", [GF_K, GF_N], torch.float32, init_value=torch.randn),
    TensorSpec("c", [GF_M, GF_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Output projection + residual: y = h @ Wo + res; a task owns a block of rows and walks the
# output columns in chunks.

RS_M, RS_N, RS_K, RS_BM, RS_BN, RS_BK = 128, 256, 256, 32, 64, 64


@ts.kernel
def proj_residual_rows(
    h: ts.Tensor[[RS_BM, RS_K], ts.f32],
    wo: ts.Tensor[[RS_K, RS_N], ts.f32],
    res: ts.Tensor[[RS_BM, RS_N], ts.f32],
    y: ts.Out[[RS_BM, RS_N], ts.f32],
):
    for n in ts.range(0, RS_N, RS_BN):
        acc = ts.zeros([RS_BM, RS_BN], ts.f32)
        for k in ts.range(0, RS_K, RS_BK):
            acc = acc + ts.matmul(ts.load(h, [0, k], [RS_BM, RS_BK]), ts.load(wo, [k, n], [RS_BK, RS_BN]))
        r = ts.load(res, [0, 0], [RS_BM, RS_BN])
        ts.store(y, [0, n], acc + r)


@ts.jit
def proj_residual(
    h: ts.Tensor[[RS_M, RS_K], ts.f32],
    wo: ts.Tensor[[RS_K, RS_N], ts.f32],
    res: ts.Tensor[[RS_M, RS_N], ts.f32],
    y: ts.Out[[RS_M, RS_N], ts.f32],
):
    for i in ts.range(0, RS_M, RS_BM):
        proj_residual_rows(h[i : i + RS_BM, :], wo, res[i : i + RS_BM, :], y[i : i + RS_BM, :])


def proj_residual_golden(t):
    t["y"][:] = (t["h"].double() @ t["wo"].double() + t["res"].double()).float()


RS_SPECS = [
    TensorSpec("h", [RS_M, RS_K], torch.float32, init_value=torch.randn),
    TensorSpec("wo", [RS_K, RS_N], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 16.0),
    TensorSpec("res", [RS_M, RS_N], torch.float32, init_value=torch.randn),
    TensorSpec("y", [RS_M, RS_N], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Batched matmul C[b] = A[b] @ B[b], bf16 in, f32 out, square 128 x 128 matrices in 64 x 64 tiles.

BM_B, BM_S, BM_T = 4, 128, 64


@ts.kernel
def bmm_tile(a: ts.Tensor[[BM_T, BM_S], ts.bf16], b: ts.Tensor[[BM_S, BM_T], ts.bf16], c: ts.Out[[BM_T, BM_T], ts.f32]):
    acc = ts.zeros([BM_T, BM_T], ts.f32)
    for k in ts.range(0, BM_S, BM_T):
        acc = acc + ts.matmul(ts.load(a, [0, k], [BM_T, BM_T]), ts.load(b, [k, 0], [BM_T, BM_T]))
    ts.store(c, [0, 0], acc)


@ts.jit
def bmm(
    a: ts.Tensor[[BM_B, BM_S, BM_S], ts.bf16],
    b: ts.Tensor[[BM_B, BM_S, BM_S], ts.bf16],
    c: ts.Out[[BM_B, BM_S, BM_S], ts.f32],
):
    for z in ts.range(0, BM_B):
        for i in ts.range(0, BM_S, BM_T):
            for j in ts.range(0, BM_S, BM_T):
                bmm_tile(a[z, j : j + BM_T, :], b[z, :, j : j + BM_T], c[z, i : i + BM_T, j : j + BM_T])


def bmm_golden(t):
    t["c"][:] = torch.bmm(t["a"].double(), t["b"].double()).float()


BM_SPECS = [
    TensorSpec("a", [BM_B, BM_S, BM_S], torch.bfloat16, init_value=torch.randn),
    TensorSpec("b", [BM_B, BM_S, BM_S], torch.bfloat16, init_value=torch.randn),
    TensorSpec("c", [BM_B, BM_S, BM_S], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Similarity scores S = X @ Y^T / temperature between two sets of 64-d embeddings, f32.

SM_NX, SM_NY, SM_D, SM_B = 256, 256, 64, 64


@ts.kernel
def scores_tile(
    x: ts.Tensor[[SM_B, SM_D], ts.f32],
    y: ts.Tensor[[SM_B, SM_D], ts.f32],
    s: ts.Out[[SM_B, SM_B], ts.f32],
    inv_temp: ts.Scalar[ts.f32],
):
    xt = ts.load(x, [0, 0], [SM_B, SM_D])
    yt = ts.load(y, [0, 0], [SM_B, SM_D])
    ts.store(s, [0, 0], ts.matmul(xt, yt) * inv_temp)


@ts.jit
def similarity(
    x: ts.Tensor[[SM_NX, SM_D], ts.f32],
    y: ts.Tensor[[SM_NY, SM_D], ts.f32],
    s: ts.Out[[SM_NX, SM_NY], ts.f32],
    inv_temp: ts.Scalar[ts.f32],
):
    for i in ts.range(0, SM_NX, SM_B):
        for j in ts.range(0, SM_NY, SM_B):
            scores_tile(x[i : i + SM_B, :], y[j : j + SM_B, :], s[i : i + SM_B, j : j + SM_B], inv_temp)


def similarity_golden(t):
    t["s"][:] = (t["x"].double() @ t["y"].double().T * t["inv_temp"]).float()


SM_SPECS = [
    TensorSpec("x", [SM_NX, SM_D], torch.float32, init_value=lambda s, dtype: torch.nn.functional.normalize(torch.randn(s), dim=1).to(dtype)),
    TensorSpec("y", [SM_NY, SM_D], torch.float32, init_value=lambda s, dtype: torch.nn.functional.normalize(torch.randn(s), dim=1).to(dtype)),
    TensorSpec("s", [SM_NX, SM_NY], torch.float32, is_output=True),
    ScalarSpec("inv_temp", torch.float32, 1.0 / 0.07),
]

# --------------------------------------------------------------------------------------------
# Down projection of an MLP, nn.Linear layout: out = h @ Wd^T, Wd [N, K], bf16 in, f32 out.

DN_T, DN_K, DN_N, DN_B, DN_BK = 128, 256, 128, 64, 64


@ts.kernel
def down_proj_tile(
    h: ts.Tensor[[DN_B, DN_K], ts.bf16],
    wd: ts.Tensor[[DN_B, DN_K], ts.bf16],
    out: ts.Out[[DN_B, DN_B], ts.f32],
):
    acc = ts.zeros([DN_B, DN_B], ts.f32)
    for k in ts.range(0, DN_K, DN_BK):
        ht = ts.load(h, [0, k], [DN_B, DN_BK])
        wt = ts.load(wd, [0, k], [DN_B, DN_BK])
        acc = ts.matmul(wt, ht, acc=acc, transpose_b=True)
    ts.store(out, [0, 0], acc)


@ts.jit
def down_proj(h: ts.Tensor[[DN_T, DN_K], ts.bf16], wd: ts.Tensor[[DN_N, DN_K], ts.bf16], out: ts.Out[[DN_T, DN_N], ts.f32]):
    for i in ts.range(0, DN_T, DN_B):
        for j in ts.range(0, DN_N, DN_B):
            down_proj_tile(h[i : i + DN_B, :], wd[j : j + DN_B, :], out[i : i + DN_B, j : j + DN_B])


def down_proj_golden(t):
    t["out"][:] = (t["h"].float() @ t["wd"].float().T).float()


DN_SPECS = [
    TensorSpec("h", [DN_T, DN_K], torch.bfloat16, init_value=torch.randn),
    TensorSpec("wd", [DN_N, DN_K], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) / 16.0).to(dtype)),
    TensorSpec("out", [DN_T, DN_N], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="gemm_k_loop_short",
        what="the K loop stops one block early, the last 64 columns of A / rows of B never enter the product",
        pattern="off_by_one",
        program=gemm_bias,
        specs=GB_SPECS,
        golden=gemm_bias_golden,
        rtol=2e-2,
        atol=2e-2,
        category="algorithm",
        kernel="gemm_bias_tile",
        op="range",
        line=(gemm_bias_tile, "for k in ts.range(0, GB_K - GB_BK, GB_BK):"),
        fixed="for k in ts.range(0, GB_K, GB_BK):",
    ),
    BlindBug(
        name="linear_weight_offset_swapped",
        what="the weight tile is loaded at [k, n0] instead of [n0, k] (row and column offsets swapped)",
        pattern="wrong_offset",
        program=linear,
        specs=LN_SPECS,
        golden=linear_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="linear_block",
        op="load",
        line=(linear_block, "wt = ts.load(w, [k, n0], [LN_BN, LN_BK])"),
        fixed="wt = ts.load(w, [n0, k], [LN_BN, LN_BK])",
    ),
    BlindBug(
        name="gemm_f32_f16_operands",
        what="f32 operand tiles are cast to f16 before the matmul, losing 13 mantissa bits of every input",
        pattern="narrow_accumulator",
        program=gemm_f32,
        specs=GF_SPECS,
        golden=gemm_f32_golden,
        rtol=1e-4,
        atol=1e-3,
        category="precision",
        kernel="gemm_f32_tile",
        op="cast",
        line=(gemm_f32_tile, "acc = acc + ts.matmul(ts.cast(at, ts.f16), ts.cast(bt, ts.f16))"),
        fixed="acc = acc + ts.matmul(at, bt)",
        verdict="guilty",
    ),
    BlindBug(
        name="proj_residual_missing_chunk_offset",
        what="the residual tile is loaded at column 0 for every output chunk instead of at column n",
        pattern="wrong_offset",
        program=proj_residual,
        specs=RS_SPECS,
        golden=proj_residual_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="proj_residual_rows",
        op="load",
        line=(proj_residual_rows, "r = ts.load(res, [0, 0], [RS_BM, RS_BN])"),
        fixed="r = ts.load(res, [0, n], [RS_BM, RS_BN])",
    ),
    BlindBug(
        name="bmm_a_rows_from_col_index",
        what="the A block is sliced with the column index j instead of the row index i",
        pattern="wrong_slice",
        program=bmm,
        specs=BM_SPECS,
        golden=bmm_golden,
        rtol=1e-5,
        atol=1e-4,
        category="algorithm",
        kernel="bmm_tile",
        op="call",
        line=(bmm, "bmm_tile(a[z, j : j + BM_T, :]"),
        fixed="bmm_tile(a[z, i : i + BM_T, :], b[z, :, j : j + BM_T], c[z, i : i + BM_T, j : j + BM_T])",
    ),
    BlindBug(
        name="similarity_missing_transpose",
        what="the scores multiply X by Y instead of Y^T (transpose_b forgotten; the square tiles hide it)",
        pattern="swapped_operands",
        program=similarity,
        specs=SM_SPECS,
        golden=similarity_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="scores_tile",
        op="matmul",
        line=(scores_tile, "ts.matmul(xt, yt)"),
        fixed="ts.store(s, [0, 0], ts.matmul(xt, yt, transpose_b=True) * inv_temp)",
    ),
    BlindBug(
        name="down_proj_operands_swapped",
        what="the product is W @ h^T instead of h @ W^T, which gives the transposed tile",
        pattern="swapped_operands",
        program=down_proj,
        specs=DN_SPECS,
        golden=down_proj_golden,
        rtol=1e-4,
        atol=1e-4,
        category="algorithm",
        kernel="down_proj_tile",
        op="matmul",
        line=(down_proj_tile, "acc = ts.matmul(wt, ht, acc=acc, transpose_b=True)"),
        fixed="acc = ts.matmul(ht, wt, acc=acc, transpose_b=True)",
    ),
)
