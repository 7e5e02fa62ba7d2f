"""Loss kernels: cross-entropy, binary cross-entropy, masked mean of per-token losses, Huber
loss, KL divergence."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Cross-entropy per row over 512 classes, f32, whole row per tile, integer labels [N, 1].

CE_N, CE_V, CE_BLOCK = 256, 512, 32


@ts.kernel
def cross_entropy_rows(
    logits: ts.Tensor[[CE_BLOCK, CE_V], ts.f32],
    labels: ts.Tensor[[CE_BLOCK, 1], ts.i32],
    loss: ts.Out[[CE_BLOCK, 1], ts.f32],
):
    t = ts.load(logits, [0, 0], [CE_BLOCK, CE_V])
    lab = ts.load(labels, [0, 0], [CE_BLOCK, 1])
    m = ts.row_max(t)
    s = ts.row_sum(ts.exp(t - m))
    tgt = ts.row_sum(ts.where(ts.iota([1, CE_V]) == lab, t, 0.0))
    nll = -ts.log(ts.exp(tgt - m) / s)
    ts.store(loss, [0, 0], nll)


@ts.jit
def cross_entropy(
    logits: ts.Tensor[[CE_N, CE_V], ts.f32],
    labels: ts.Tensor[[CE_N, 1], ts.i32],
    loss: ts.Out[[CE_N, 1], ts.f32],
):
    for r in ts.range(0, CE_N, CE_BLOCK):
        cross_entropy_rows(logits[r : r + CE_BLOCK, :], labels[r : r + CE_BLOCK, :], loss[r : r + CE_BLOCK, :])


def cross_entropy_golden(t):
    x = t["logits"].double()
    lab = t["labels"][:, 0].long()
    nll = torch.nn.functional.cross_entropy(x, lab, reduction="none")
    t["loss"][:] = nll[:, None].float()


CE_SPECS = [
    # a confident (sharp) classifier: logits spread over tens of units
    TensorSpec("logits", [CE_N, CE_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 30.0),
    TensorSpec("labels", [CE_N, 1], torch.int32, init_value=lambda s, dtype: torch.randint(0, CE_V, s, dtype=dtype)),
    TensorSpec("loss", [CE_N, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Binary cross-entropy of multi-label logits, computed from sigmoid probabilities, f32.

BC_N, BC_C, BC_BLOCK = 256, 128, 64


@ts.kernel
def bce_rows(
    z: ts.Tensor[[BC_BLOCK, BC_C], ts.f32],
    y: ts.Tensor[[BC_BLOCK, BC_C], ts.f32],
    out: ts.Out[[BC_BLOCK, BC_C], ts.f32],
):
    zt = ts.load(z, [0, 0], [BC_BLOCK, BC_C])
    yt = ts.load(y, [0, 0], [BC_BLOCK, BC_C])
    p = ts.sigmoid(zt)
    loss = -(yt * ts.log(p) + (1.0 - yt) * ts.log(1.0 - p))
    ts.store(out, [0, 0], loss)


@ts.jit
def bce(z: ts.Tensor[[BC_N, BC_C], ts.f32], y: ts.Tensor[[BC_N, BC_C], ts.f32], out: ts.Out[[BC_N, BC_C], ts.f32]):
    for r in ts.range(0, BC_N, BC_BLOCK):
        bce_rows(z[r : r + BC_BLOCK, :], y[r : r + BC_BLOCK, :], out[r : r + BC_BLOCK, :])


def bce_golden(t):
    z, y = t["z"].double(), t["y"].double()
    t["out"][:] = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none").float()


BC_SPECS = [
    TensorSpec("z", [BC_N, BC_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 8.0),
    TensorSpec("y", [BC_N, BC_C], torch.float32, init_value=lambda s, dtype: (torch.rand(s) < 0.3).to(dtype)),
    TensorSpec("out", [BC_N, BC_C], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Per-sequence mean of token losses under a padding mask (1 = real token). Some sequences of
# the batch are empty (all padding) and must give 0.

MM_N, MM_T, MM_BLOCK = 128, 256, 32


@ts.kernel
def masked_mean_rows(
    tok_loss: ts.Tensor[[MM_BLOCK, MM_T], ts.f32],
    mask: ts.Tensor[[MM_BLOCK, MM_T], ts.f32],
    out: ts.Out[[MM_BLOCK, 1], ts.f32],
):
    l = ts.load(tok_loss, [0, 0], [MM_BLOCK, MM_T])
    w = ts.load(mask, [0, 0], [MM_BLOCK, MM_T])
    total = ts.row_sum(l * w)
    count = ts.row_sum(w)
    ts.store(out, [0, 0], total / count)


@ts.jit
def masked_mean(
    tok_loss: ts.Tensor[[MM_N, MM_T], ts.f32],
    mask: ts.Tensor[[MM_N, MM_T], ts.f32],
    out: ts.Out[[MM_N, 1], ts.f32],
):
    for r in ts.range(0, MM_N, MM_BLOCK):
        masked_mean_rows(tok_loss[r : r + MM_BLOCK, :], mask[r : r + MM_BLOCK, :], out[r : r + MM_BLOCK, :])


def padding_mask(shape, dtype):
    g = torch.Generator().manual_seed(5)
    lens = torch.randint(0, shape[1] + 1, (shape[0],), generator=g)
    lens[::9] = 0  # empty sequences in the batch
    return (torch.arange(shape[1])[None, :] < lens[:, None]).to(dtype)


def masked_mean_golden(t):
    l, w = t["tok_loss"].double(), t["mask"].double()
    t["out"][:] = ((l * w).sum(dim=1, keepdim=True) / w.sum(dim=1, keepdim=True).clamp(min=1.0)).float()


MM_SPECS = [
    TensorSpec("tok_loss", [MM_N, MM_T], torch.float32, init_value=lambda s, dtype: torch.rand(s, dtype=dtype) * 5.0),
    TensorSpec("mask", [MM_N, MM_T], torch.float32, init_value=padding_mask),
    TensorSpec("out", [MM_N, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Huber (smooth L1) loss: 0.5 d^2 / delta where |d| < delta, |d| - 0.5 delta elsewhere.

HU_N, HU_C, HU_BLOCK = 256, 256, 32


@ts.kernel
def huber_rows(
    pred: ts.Tensor[[HU_BLOCK, HU_C], ts.f32],
    target: ts.Tensor[[HU_BLOCK, HU_C], ts.f32],
    out: ts.Out[[HU_BLOCK, HU_C], ts.f32],
    delta: ts.Scalar[ts.f32],
):
    d = ts.load(pred, [0, 0], [HU_BLOCK, HU_C]) - ts.load(target, [0, 0], [HU_BLOCK, HU_C])
    ad = ts.abs(d)
    quad = 0.5 * d * d / delta
    lin = ad - 0.5 * delta
    ts.store(out, [0, 0], ts.where(ad > delta, quad, lin))


@ts.jit
def huber(
    pred: ts.Tensor[[HU_N, HU_C], ts.f32],
    target: ts.Tensor[[HU_N, HU_C], ts.f32],
    out: ts.Out[[HU_N, HU_C], ts.f32],
    delta: ts.Scalar[ts.f32],
):
    for r in ts.range(0, HU_N, HU_BLOCK):
        huber_rows(pred[r : r + HU_BLOCK, :], target[r : r + HU_BLOCK, :], out[r : r + HU_BLOCK, :], delta)


def huber_golden(t):
    p, y = t["pred"].double(), t["target"].double()
    t["out"][:] = torch.nn.functional.smooth_l1_loss(p, y, reduction="none", beta=t["delta"]).float()


HU_SPECS = [
    TensorSpec("pred", [HU_N, HU_C], torch.float32, init_value=torch.randn),
    TensorSpec("target", [HU_N, HU_C], torch.float32, init_value=torch.randn),
    TensorSpec("out", [HU_N, HU_C], torch.float32, is_output=True),
    ScalarSpec("delta", torch.float32, 1.0),
]

# --------------------------------------------------------------------------------------------
# Distillation KL(p_teacher || q_student) per row, from log-probabilities, f32.

KL_N, KL_V, KL_BLOCK = 128, 512, 16


@ts.kernel
def kl_rows(
    logp: ts.Tensor[[KL_BLOCK, KL_V], ts.f32],
    logq: ts.Tensor[[KL_BLOCK, KL_V], ts.f32],
    out: ts.Out[[KL_BLOCK, 1], ts.f32],
):
    lp = ts.load(logp, [0, 0], [KL_BLOCK, KL_V])
    lq = ts.load(logq, [0, 0], [KL_BLOCK, KL_V])
    ts.store(out, [0, 0], ts.row_sum(ts.exp(lp) * (lq - lp)))


@ts.jit
def kl_div(logp: ts.Tensor[[KL_N, KL_V], ts.f32], logq: ts.Tensor[[KL_N, KL_V], ts.f32], out: ts.Out[[KL_N, 1], ts.f32]):
    for r in ts.range(0, KL_N, KL_BLOCK):
        kl_rows(logp[r : r + KL_BLOCK, :], logq[r : r + KL_BLOCK, :], out[r : r + KL_BLOCK, :])


def log_probs(seed):
    def init(shape, dtype):
        g = torch.Generator().manual_seed(seed)
        return torch.log_softmax(torch.randn(shape, generator=g, dtype=torch.float64) * 2.0, dim=1).to(dtype)

    return init


def kl_golden(t):
    lp, lq = t["logp"].double(), t["logq"].double()
    t["out"][:] = (lp.exp() * (lp - lq)).sum(dim=1, keepdim=True).float()


KL_SPECS = [
    TensorSpec("logp", [KL_N, KL_V], torch.float32, init_value=log_probs(11)),
    TensorSpec("logq", [KL_N, KL_V], torch.float32, init_value=log_probs(12)),
    TensorSpec("out", [KL_N, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Next-token loss of a language model: position i's logits are scored against token i + 1 of
# the sequence (tokens holds T + 1 ids), f32, stable logsumexp.

NT_T, NT_V, NT_BLOCK = 128, 256, 32


@ts.kernel
def next_token_nll_rows(
    logits: ts.Tensor[[NT_BLOCK, NT_V], ts.f32],
    target: ts.Tensor[[NT_BLOCK, 1], ts.i32],
    loss: ts.Out[[NT_BLOCK, 1], ts.f32],
):
    t = ts.load(logits, [0, 0], [NT_BLOCK, NT_V])
    lab = ts.load(target, [0, 0], [NT_BLOCK, 1])
    m = ts.row_max(t)
    lse = m + ts.log(ts.row_sum(ts.exp(t - m)))
    picked = ts.row_sum(ts.where(ts.iota([1, NT_V]) == lab, t, 0.0))
    ts.store(loss, [0, 0], lse - picked)


@ts.jit
def next_token_loss(
    logits: ts.Tensor[[NT_T, NT_V], ts.f32],
    tokens: ts.Tensor[[NT_T + 1, 1], ts.i32],
    loss: ts.Out[[NT_T, 1], ts.f32],
):
    for r in ts.range(0, NT_T, NT_BLOCK):
        next_token_nll_rows(logits[r : r + NT_BLOCK, :], tokens[r : r + NT_BLOCK, :], loss[r : r + NT_BLOCK, :])


def next_token_golden(t):
    x = t["logits"].double()
    targets = t["tokens"][1:, 0].long()
    t["loss"][:] = torch.nn.functional.cross_entropy(x, targets, reduction="none")[:, None].float()


NT_SPECS = [
    TensorSpec("logits", [NT_T, NT_V], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 2.0),
    TensorSpec("tokens", [NT_T + 1, 1], torch.int32, init_value=lambda s, dtype: torch.randint(0, NT_V, s, dtype=dtype)),
    TensorSpec("loss", [NT_T, 1], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="ce_log_of_softmax_prob",
        what="the loss takes log of the target probability, which underflows to 0 for sharp logits: log(0) = -inf",
        pattern="missing_guard",
        program=cross_entropy,
        specs=CE_SPECS,
        golden=cross_entropy_golden,
        rtol=1e-5,
        atol=1e-5,
        category="nan",
        kernel="cross_entropy_rows",
        op="log",
        line=(cross_entropy_rows, "nll = -ts.log(ts.exp(tgt - m) / s)"),
        fixed="nll = m + ts.log(s) - tgt",
    ),
    BlindBug(
        name="bce_log_saturated_sigmoid",
        what="BCE is computed as log(sigmoid(z)) and log(1 - sigmoid(z)); sigmoid saturates to 1 for large z and log(0) gives inf / NaN",
        pattern="missing_guard",
        program=bce,
        specs=BC_SPECS,
        golden=bce_golden,
        rtol=1e-5,
        atol=1e-5,
        category="nan",
        kernel="bce_rows",
        op="log",
        line=(bce_rows, "loss = -(yt * ts.log(p) + (1.0 - yt) * ts.log(1.0 - p))"),
        fixed="loss = ts.maximum(zt, 0.0) - zt * yt + ts.log1p(ts.exp(-ts.abs(zt)))",
    ),
    BlindBug(
        name="masked_mean_zero_count",
        what="the masked mean divides by the token count unguarded; empty sequences give 0 / 0 = NaN",
        pattern="missing_guard",
        program=masked_mean,
        specs=MM_SPECS,
        golden=masked_mean_golden,
        rtol=1e-5,
        atol=1e-5,
        category="nan",
        kernel="masked_mean_rows",
        op="div",
        line=(masked_mean_rows, "ts.store(out, [0, 0], total / count)"),
        fixed="ts.store(out, [0, 0], total / ts.maximum(count, 1.0))",
    ),
    BlindBug(
        name="huber_branch_flipped",
        what="the quadratic branch is taken where |d| > delta instead of |d| < delta",
        pattern="mask",
        program=huber,
        specs=HU_SPECS,
        golden=huber_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="huber_rows",
        op="gt",
        line=(huber_rows, "ts.where(ad > delta, quad, lin)"),
        fixed="ts.store(out, [0, 0], ts.where(ad < delta, quad, lin))",
    ),
    BlindBug(
        name="kl_log_ratio_swapped",
        what="the log ratio is log q - log p instead of log p - log q (the KL's sign flips)",
        pattern="swapped_operands",
        program=kl_div,
        specs=KL_SPECS,
        golden=kl_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="kl_rows",
        op="sub",
        line=(kl_rows, "ts.row_sum(ts.exp(lp) * (lq - lp))"),
        fixed="ts.store(out, [0, 0], ts.row_sum(ts.exp(lp) * (lp - lq)))",
    ),
    BlindBug(
        name="next_token_labels_not_shifted",
        what="the targets are sliced at tokens[r : r + B] instead of tokens[r + 1 : r + 1 + B]: each position is scored against its own token",
        pattern="off_by_one",
        program=next_token_loss,
        specs=NT_SPECS,
        golden=next_token_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="next_token_nll_rows",
        op="call",
        line=(next_token_loss, "tokens[r : r + NT_BLOCK, :]"),
        fixed="next_token_nll_rows(logits[r : r + NT_BLOCK, :], tokens[r + 1 : r + 1 + NT_BLOCK, :], loss[r : r + NT_BLOCK, :])",
    ),
)
