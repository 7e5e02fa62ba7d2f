"""Programs as a new user writes them from the docs: cross-entropy over a bf16 vocabulary with a
ragged tail, group norm, and a convolution as im2col + GEMM."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Cross-entropy over a 1000-word bf16 vocabulary read in chunks of 256 (the last chunk is ragged:
# masked with valid= and fill=-inf), online logsumexp in f32, the target logit picked by a mask.

XE_N, XE_V, XE_BLOCK, XE_CHUNK = 64, 1000, 16, 256


@ts.kernel
def xent_rows(
    logits: ts.Tensor[[XE_BLOCK, XE_V], ts.bf16],
    labels: ts.Tensor[[XE_BLOCK, 1], ts.i32],
    loss: ts.Out[[XE_BLOCK, 1], ts.f32],
):
    lab = ts.load(labels, [0, 0], [XE_BLOCK, 1])
    m = ts.full([XE_BLOCK, 1], float("-inf"), ts.f32)
    l = ts.zeros([XE_BLOCK, 1], ts.f32)
    tgt = ts.zeros([XE_BLOCK, 1], ts.f32)
    for c in ts.range(0, XE_V, XE_CHUNK):
        n = min(XE_V - c, XE_CHUNK)
        t = ts.cast(ts.load(logits, [0, c], [XE_BLOCK, XE_CHUNK], valid=(XE_BLOCK, n), fill=float("-inf")), ts.f32)
        hit = ts.iota([1, XE_CHUNK]) == lab
        tgt = tgt + ts.row_sum(ts.where(hit, t, 0.0))
        m_new = ts.maximum(m, ts.row_max(t))
        l = l * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    ts.store(loss, [0, 0], m + ts.log(l) - tgt)


@ts.jit
def xent(
    logits: ts.Tensor[[XE_N, XE_V], ts.bf16],
    labels: ts.Tensor[[XE_N, 1], ts.i32],
    loss: ts.Out[[XE_N, 1], ts.f32],
):
    for r in ts.range(0, XE_N, XE_BLOCK):
        xent_rows(logits[r : r + XE_BLOCK, :], labels[r : r + XE_BLOCK, :], loss[r : r + XE_BLOCK, :])


def xent_golden(t):
    x = t["logits"].float()
    lab = t["labels"][:, 0].long()
    m = x.max(dim=1, keepdim=True).values
    lse = m + torch.log(torch.exp(x - m).sum(dim=1, keepdim=True))
    t["loss"][:] = lse - x.gather(1, lab[:, None])


XE_SPECS = [
    TensorSpec("logits", [XE_N, XE_V], torch.bfloat16, init_value=lambda s, dtype: (torch.randn(s) * 3.0).to(dtype)),
    TensorSpec("labels", [XE_N, 1], torch.int32, init_value=lambda s, dtype: torch.randint(0, XE_V, s, dtype=dtype)),
    TensorSpec("loss", [XE_N, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Group norm over [N, C, H*W] (8 groups of 8 channels), one task per (sample, group), f32,
# per-channel affine gamma / beta of shape [C, 1].

GN_N, GN_C, GN_HW, GN_G = 4, 64, 256, 8
GN_CPG = GN_C // GN_G


@ts.kernel
def group_norm_group(
    x: ts.Tensor[[GN_CPG, GN_HW], ts.f32],
    gamma: ts.Tensor[[GN_CPG, 1], ts.f32],
    beta: ts.Tensor[[GN_CPG, 1], ts.f32],
    y: ts.Out[[GN_CPG, GN_HW], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [GN_CPG, GN_HW])
    mu = ts.col_sum(ts.row_sum(t)) * (1.0 / (GN_CPG * GN_HW))
    d = t - mu
    var = ts.col_sum(ts.row_sum(d * d)) * (1.0 / (GN_CPG * GN_HW))
    g = ts.load(gamma, [0, 0], [GN_CPG, 1])
    b = ts.load(beta, [0, 0], [GN_CPG, 1])
    ts.store(y, [0, 0], d * ts.rsqrt(var + eps) * g + b)


@ts.jit
def group_norm(
    x: ts.Tensor[[GN_N, GN_C, GN_HW], ts.f32],
    gamma: ts.Tensor[[GN_C, 1], ts.f32],
    beta: ts.Tensor[[GN_C, 1], ts.f32],
    y: ts.Out[[GN_N, GN_C, GN_HW], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for n in ts.range(0, GN_N):
        for g in ts.range(0, GN_G):
            c0 = g * GN_CPG
            group_norm_group(x[n, c0 : c0 + GN_CPG, :], gamma[c0 : c0 + GN_CPG, :], beta[n * GN_CPG : n * GN_CPG + GN_CPG, :],
                             y[n, c0 : c0 + GN_CPG, :], eps)


def group_norm_golden(t):
    x = t["x"].double()
    y = torch.nn.functional.group_norm(x, GN_G, t["gamma"][:, 0].double(), t["beta"][:, 0].double(), t["eps"])
    t["y"][:] = y.float()


GN_SPECS = [
    TensorSpec("x", [GN_N, GN_C, GN_HW], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 2.0 + 1.0),
    TensorSpec("gamma", [GN_C, 1], torch.float32, init_value=lambda s, dtype: 1.0 + 0.1 * torch.randn(s, dtype=dtype)),
    TensorSpec("beta", [GN_C, 1], torch.float32, init_value=torch.randn),
    TensorSpec("y", [GN_N, GN_C, GN_HW], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# 3x3 convolution, stride 1, channels-last, as im2col + GEMM: the input comes padded by one
# pixel, xp [H + 2, W + 2, C]; cols[oh, ow, (kh * 3 + kw) * C + c] = xp[oh + kh, ow + kw, c]; then
# y[oh] = cols[oh] @ wmat with wmat [9 C, O].

CV_H, CV_W, CV_C, CV_O, CV_K = 32, 32, 16, 32, 3
CV_KC = CV_K * CV_K * CV_C


@ts.kernel
def im2col_row(xp: ts.Tensor[[CV_K, CV_W + 2, CV_C], ts.f32], cols: ts.Out[[CV_W, CV_KC], ts.f32]):
    for kh in ts.range(0, CV_K):
        for kw in ts.range(0, CV_K):
            patch = ts.load(xp, [kw, kh, 0], [1, CV_W, CV_C])
            ts.store(cols, [0, (kh * CV_K + kw) * CV_C], patch)


@ts.kernel
def conv_gemm_row(cols: ts.Tensor[[CV_W, CV_KC], ts.f32], wmat: ts.Tensor[[CV_KC, CV_O], ts.f32], y: ts.Out[[CV_W, CV_O], ts.f32]):
    acc = ts.matmul(ts.load(cols, [0, 0], [CV_W, CV_KC]), ts.load(wmat, [0, 0], [CV_KC, CV_O]))
    ts.store(y, [0, 0], acc)


@ts.jit
def conv3x3(
    xp: ts.Tensor[[CV_H + 2, CV_W + 2, CV_C], ts.f32],
    wmat: ts.Tensor[[CV_KC, CV_O], ts.f32],
    y: ts.Out[[CV_H, CV_W, CV_O], ts.f32],
):
    cols = ts.create_tensor([CV_H, CV_W, CV_KC], ts.f32)
    for oh in ts.range(0, CV_H):
        im2col_row(xp[oh : oh + CV_K, :, :], cols[oh, :, :])
    for oh in ts.range(0, CV_H):
        conv_gemm_row(cols[oh, :, :], wmat, y[oh, :, :])


def padded_image(shape, dtype):
    img = torch.randn(shape[0] - 2, shape[1] - 2, shape[2], dtype=dtype)
    return torch.nn.functional.pad(img, (0, 0, 1, 1, 1, 1))


def conv_golden(t):
    x = t["xp"].double().permute(2, 0, 1)[None]  # [1, C, H + 2, W + 2]
    w = t["wmat"].double().reshape(CV_K, CV_K, CV_C, CV_O).permute(3, 2, 0, 1)  # [O, C, kh, kw]
    y = torch.nn.functional.conv2d(x, w)  # [1, O, H, W]
    t["y"][:] = y[0].permute(1, 2, 0).float()


CV_SPECS = [
    TensorSpec("xp", [CV_H + 2, CV_W + 2, CV_C], torch.float32, init_value=padded_image),
    TensorSpec("wmat", [CV_KC, CV_O], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) / 12.0),
    TensorSpec("y", [CV_H, CV_W, CV_O], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="xent_chunk_offset",
        what="the target mask compares the chunk-local iota with the label, forgetting the chunk offset + c; "
        "every loss is wrong, and a label whose local index falls in the last chunk's -inf tail makes the loss inf",
        pattern="mask",
        program=xent,
        specs=XE_SPECS,
        golden=xent_golden,
        rtol=1e-4,
        atol=1e-4,
        category="nan",
        kernel="xent_rows",
        op="eq",
        line=(xent_rows, "hit = ts.iota([1, XE_CHUNK]) == lab"),
        fixed="hit = ts.iota([1, XE_CHUNK]) + c == lab",
    ),
    BlindBug(
        name="groupnorm_beta_slice",
        what="beta is sliced at the sample's offset n * CPG instead of the group's channel offset c0 (gamma is right)",
        pattern="wrong_slice",
        program=group_norm,
        specs=GN_SPECS,
        golden=group_norm_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="group_norm_group",
        op="call",
        line=(group_norm, "beta[n * GN_CPG : n * GN_CPG + GN_CPG, :]"),
        fixed="group_norm_group(x[n, c0 : c0 + GN_CPG, :], gamma[c0 : c0 + GN_CPG, :], beta[c0 : c0 + GN_CPG, :],",
    ),
    BlindBug(
        name="im2col_swapped_khkw",
        what="the im2col patch is loaded at [kw, kh, 0] instead of [kh, kw, 0] (kernel row and column swapped)",
        pattern="wrong_offset",
        program=conv3x3,
        specs=CV_SPECS,
        golden=conv_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="im2col_row",
        op="load",
        line=(im2col_row, "patch = ts.load(xp, [kw, kh, 0], [1, CV_W, CV_C])"),
        fixed="patch = ts.load(xp, [kh, kw, 0], [1, CV_W, CV_C])",
    ),
)
