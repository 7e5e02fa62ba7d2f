"""Row and column reductions and scans: max-over-time pooling of ragged rows, f16 dot products,
batch-norm statistics, logsumexp, cumulative sums by triangular matmul, a decayed linear
recurrence (SSM-style scan), chunked log-softmax."""

from __future__ import annotations

import torch

import tilescope as ts
from blind_bugs import BlindBug
from tilescope.harness import ScalarSpec, TensorSpec

# --------------------------------------------------------------------------------------------
# Max over time of per-step log-probabilities, T = 200 steps read in chunks of 64 (ragged tail).

MP_ROWS, MP_T, MP_BLOCK, MP_CHUNK = 128, 200, 32, 64


@ts.kernel
def max_over_time_rows(x: ts.Tensor[[MP_BLOCK, MP_T], ts.f32], y: ts.Out[[MP_BLOCK, 1], ts.f32]):
    m = ts.full([MP_BLOCK, 1], float("-inf"), ts.f32)
    for c in ts.range(0, MP_T, MP_CHUNK):
        n = min(MP_T - c, MP_CHUNK)
        t = ts.load(x, [0, c], [MP_BLOCK, MP_CHUNK], valid=(MP_BLOCK, n))
        m = ts.maximum(m, ts.row_max(t))
    ts.store(y, [0, 0], m)


@ts.jit
def max_over_time(x: ts.Tensor[[MP_ROWS, MP_T], ts.f32], y: ts.Out[[MP_ROWS, 1], ts.f32]):
    for r in ts.range(0, MP_ROWS, MP_BLOCK):
        max_over_time_rows(x[r : r + MP_BLOCK, :], y[r : r + MP_BLOCK, :])


def max_over_time_golden(t):
    t["y"][:] = t["x"].max(dim=1, keepdim=True).values


MP_SPECS = [
    # log-probabilities: all negative
    TensorSpec("x", [MP_ROWS, MP_T], torch.float32, init_value=lambda s, dtype: torch.log(torch.rand(s, dtype=dtype) * 0.5 + 1e-3)),
    TensorSpec("y", [MP_ROWS, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Row-wise dot products of two f16 embedding matrices (retrieval scores), f32 result.

DP_ROWS, DP_K, DP_BLOCK, DP_CHUNK = 64, 4096, 16, 512


@ts.kernel
def row_dot_f16(
    a: ts.Tensor[[DP_BLOCK, DP_K], ts.f16],
    b: ts.Tensor[[DP_BLOCK, DP_K], ts.f16],
    out: ts.Out[[DP_BLOCK, 1], ts.f32],
):
    acc = ts.zeros([DP_BLOCK, 1], ts.f32)
    for c in ts.range(0, DP_K, DP_CHUNK):
        at = ts.load(a, [0, c], [DP_BLOCK, DP_CHUNK])
        bt = ts.load(b, [0, c], [DP_BLOCK, DP_CHUNK])
        acc = acc + ts.cast(ts.row_sum(at * bt), ts.f32)
    ts.store(out, [0, 0], acc)


@ts.jit
def row_dot(a: ts.Tensor[[DP_ROWS, DP_K], ts.f16], b: ts.Tensor[[DP_ROWS, DP_K], ts.f16], out: ts.Out[[DP_ROWS, 1], ts.f32]):
    for r in ts.range(0, DP_ROWS, DP_BLOCK):
        row_dot_f16(a[r : r + DP_BLOCK, :], b[r : r + DP_BLOCK, :], out[r : r + DP_BLOCK, :])


def row_dot_golden(t):
    a, b = t["a"].double(), t["b"].double()
    t["out"][:] = (a * b).sum(dim=1, keepdim=True).float()


DP_SPECS = [
    TensorSpec("a", [DP_ROWS, DP_K], torch.float16, init_value=torch.randn),
    TensorSpec("b", [DP_ROWS, DP_K], torch.float16, init_value=torch.randn),
    TensorSpec("out", [DP_ROWS, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Batch norm (training-mode statistics over the batch), one task per block of channels.

BN_N, BN_C, BN_CB = 256, 128, 32


@ts.kernel
def batchnorm_channels(
    x: ts.Tensor[[BN_N, BN_CB], ts.f32],
    gamma: ts.Tensor[[1, BN_CB], ts.f32],
    beta: ts.Tensor[[1, BN_CB], ts.f32],
    y: ts.Out[[BN_N, BN_CB], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    t = ts.load(x, [0, 0], [BN_N, BN_CB])
    mu = ts.row_mean(t)
    d = t - mu
    var = ts.col_mean(d * d)
    g = ts.load(gamma, [0, 0], [1, BN_CB])
    b = ts.load(beta, [0, 0], [1, BN_CB])
    ts.store(y, [0, 0], d * ts.rsqrt(var + eps) * g + b)


@ts.jit
def batchnorm(
    x: ts.Tensor[[BN_N, BN_C], ts.f32],
    gamma: ts.Tensor[[1, BN_C], ts.f32],
    beta: ts.Tensor[[1, BN_C], ts.f32],
    y: ts.Out[[BN_N, BN_C], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for c in ts.range(0, BN_C, BN_CB):
        batchnorm_channels(x[:, c : c + BN_CB], gamma[:, c : c + BN_CB], beta[:, c : c + BN_CB], y[:, c : c + BN_CB], eps)


def batchnorm_golden(t):
    x = t["x"].double()
    mean = x.mean(dim=0, keepdim=True)
    var = x.var(dim=0, unbiased=False, keepdim=True)
    t["y"][:] = ((x - mean) / torch.sqrt(var + t["eps"]) * t["gamma"].double() + t["beta"].double()).float()


BN_SPECS = [
    TensorSpec("x", [BN_N, BN_C], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 1.5 + torch.linspace(-2, 2, s[1])),
    TensorSpec("gamma", [1, BN_C], torch.float32, init_value=torch.rand),
    TensorSpec("beta", [1, BN_C], torch.float32, init_value=torch.randn),
    TensorSpec("y", [BN_N, BN_C], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-5),
]

# --------------------------------------------------------------------------------------------
# Row logsumexp (the normalizer of a log-softmax), f32.

LS_ROWS, LS_COLS, LS_BLOCK = 256, 512, 32


@ts.kernel
def logsumexp_rows(x: ts.Tensor[[LS_BLOCK, LS_COLS], ts.f32], out: ts.Out[[LS_BLOCK, 1], ts.f32]):
    t = ts.load(x, [0, 0], [LS_BLOCK, LS_COLS])
    m = ts.row_max(t)
    s = ts.row_max(ts.exp(t - m))
    ts.store(out, [0, 0], m + ts.log(s))


@ts.jit
def logsumexp(x: ts.Tensor[[LS_ROWS, LS_COLS], ts.f32], out: ts.Out[[LS_ROWS, 1], ts.f32]):
    for r in ts.range(0, LS_ROWS, LS_BLOCK):
        logsumexp_rows(x[r : r + LS_BLOCK, :], out[r : r + LS_BLOCK, :])


def logsumexp_golden(t):
    x = t["x"].double()
    m = x.max(dim=1, keepdim=True).values
    t["out"][:] = (m + torch.log(torch.exp(x - m).sum(dim=1, keepdim=True))).float()


LS_SPECS = [
    TensorSpec("x", [LS_ROWS, LS_COLS], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 4.0),
    TensorSpec("out", [LS_ROWS, 1], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Inclusive cumulative sum along rows: within a chunk by a matmul with an upper-triangular
# ones matrix built from iota, across chunks by a carried row total.

CS_ROWS, CS_COLS, CS_BLOCK, CS_CHUNK = 64, 1024, 16, 64


@ts.kernel
def cumsum_rows(x: ts.Tensor[[CS_BLOCK, CS_COLS], ts.f32], y: ts.Out[[CS_BLOCK, CS_COLS], ts.f32]):
    src = ts.iota([CS_CHUNK, CS_CHUNK], dim=0)
    dst = ts.iota([CS_CHUNK, CS_CHUNK], dim=1)
    ones = ts.full([CS_CHUNK, CS_CHUNK], 1.0, ts.f32)
    tri = ts.where(src < dst, ones, 0.0)
    carry = ts.zeros([CS_BLOCK, 1], ts.f32)
    for c in ts.range(0, CS_COLS, CS_CHUNK):
        t = ts.load(x, [0, c], [CS_BLOCK, CS_CHUNK])
        ts.store(y, [0, c], ts.matmul(t, tri) + carry)
        carry = carry + ts.row_sum(t)


@ts.jit
def cumsum(x: ts.Tensor[[CS_ROWS, CS_COLS], ts.f32], y: ts.Out[[CS_ROWS, CS_COLS], ts.f32]):
    for r in ts.range(0, CS_ROWS, CS_BLOCK):
        cumsum_rows(x[r : r + CS_BLOCK, :], y[r : r + CS_BLOCK, :])


def cumsum_golden(t):
    t["y"][:] = torch.cumsum(t["x"].double(), dim=1).float()


CS_SPECS = [
    TensorSpec("x", [CS_ROWS, CS_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("y", [CS_ROWS, CS_COLS], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Decayed linear recurrence y[t] = a * y[t-1] + x[t] (an SSM / EMA scan), chunked: within a chunk
# y = x @ L with L[s, t] = a^(t-s) (s <= t), plus the previous chunk's last value times a^(t+1).

SS_ROWS, SS_T, SS_BLOCK, SS_CHUNK = 64, 512, 16, 64
SS_DECAY = 0.95


@ts.kernel
def decay_scan_rows(
    x: ts.Tensor[[SS_BLOCK, SS_T], ts.f32],
    lmat: ts.Tensor[[SS_CHUNK, SS_CHUNK], ts.f32],
    pw: ts.Tensor[[1, SS_CHUNK], ts.f32],
    y: ts.Out[[SS_BLOCK, SS_T], ts.f32],
):
    L = ts.load(lmat, [0, 0], [SS_CHUNK, SS_CHUNK])
    decay = ts.load(pw, [0, 0], [1, SS_CHUNK])
    carry = ts.zeros([SS_BLOCK, 1], ts.f32)
    for c in ts.range(0, SS_T, SS_CHUNK):
        yc = ts.matmul(ts.load(x, [0, c], [SS_BLOCK, SS_CHUNK]), L) + carry
        ts.store(y, [0, c], yc)
        carry = yc[:, SS_CHUNK - 1 : SS_CHUNK]


@ts.jit
def decay_scan(
    x: ts.Tensor[[SS_ROWS, SS_T], ts.f32],
    lmat: ts.Tensor[[SS_CHUNK, SS_CHUNK], ts.f32],
    pw: ts.Tensor[[1, SS_CHUNK], ts.f32],
    y: ts.Out[[SS_ROWS, SS_T], ts.f32],
):
    for r in ts.range(0, SS_ROWS, SS_BLOCK):
        decay_scan_rows(x[r : r + SS_BLOCK, :], lmat, pw, y[r : r + SS_BLOCK, :])


def decay_tables():
    i = torch.arange(SS_CHUNK, dtype=torch.float64)
    diff = i[None, :] - i[:, None]  # t - s
    lmat = torch.where(diff >= 0, SS_DECAY ** diff.clamp(min=0), torch.zeros(())).float()
    pw = (SS_DECAY ** (i + 1))[None, :].float()
    return lmat, pw


def decay_scan_golden(t):
    x = t["x"].double()
    y = torch.empty_like(x)
    state = torch.zeros(x.shape[0], dtype=torch.float64)
    for step in range(x.shape[1]):
        state = SS_DECAY * state + x[:, step]
        y[:, step] = state
    t["y"][:] = y.float()


_LMAT, _PW = decay_tables()
SS_SPECS = [
    TensorSpec("x", [SS_ROWS, SS_T], torch.float32, init_value=torch.randn),
    TensorSpec("lmat", [SS_CHUNK, SS_CHUNK], torch.float32, init_value=_LMAT),
    TensorSpec("pw", [1, SS_CHUNK], torch.float32, init_value=_PW),
    TensorSpec("y", [SS_ROWS, SS_T], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Chunked log-softmax, f32: online max/sum pass, then a pass writing x - m - log(l).

LG_ROWS, LG_COLS, LG_BLOCK, LG_CHUNK = 128, 1024, 16, 256


@ts.kernel
def log_softmax_rows(x: ts.Tensor[[LG_BLOCK, LG_COLS], ts.f32], y: ts.Out[[LG_BLOCK, LG_COLS], ts.f32]):
    m = ts.full([LG_BLOCK, 1], float("-inf"), ts.f32)
    l = ts.zeros([LG_BLOCK, 1], ts.f32)
    for c in ts.range(0, LG_COLS, LG_CHUNK):
        t = ts.load(x, [0, c], [LG_BLOCK, LG_CHUNK])
        m_new = ts.maximum(m, ts.row_max(t))
        l = l * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    lse = m + ts.log(l)
    for c in ts.range(0, LG_COLS - LG_CHUNK, LG_CHUNK):
        ts.store(y, [0, c], ts.load(x, [0, c], [LG_BLOCK, LG_CHUNK]) - lse)


@ts.jit
def log_softmax(x: ts.Tensor[[LG_ROWS, LG_COLS], ts.f32], y: ts.Out[[LG_ROWS, LG_COLS], ts.f32]):
    for r in ts.range(0, LG_ROWS, LG_BLOCK):
        log_softmax_rows(x[r : r + LG_BLOCK, :], y[r : r + LG_BLOCK, :])


def log_softmax_golden(t):
    x = t["x"].double()
    m = x.max(dim=1, keepdim=True).values
    lse = m + torch.log(torch.exp(x - m).sum(dim=1, keepdim=True))
    t["y"][:] = (x - lse).float()


LG_SPECS = [
    TensorSpec("x", [LG_ROWS, LG_COLS], torch.float32, init_value=lambda s, dtype: torch.randn(s, dtype=dtype) * 3.0),
    TensorSpec("y", [LG_ROWS, LG_COLS], torch.float32, is_output=True),
]

# --------------------------------------------------------------------------------------------
# Row-wise L2 normalization of embeddings (x / max(||x||, eps)), one task per 32 rows.

L2_ROWS, L2_COLS, L2_BLOCK = 320, 256, 32


@ts.kernel
def l2_normalize_rows(x: ts.Tensor[[L2_BLOCK, L2_COLS], ts.f32], y: ts.Out[[L2_BLOCK, L2_COLS], ts.f32]):
    t = ts.load(x, [0, 0], [L2_BLOCK, L2_COLS])
    nrm = ts.sqrt(ts.row_sum(t * t))
    ts.store(y, [0, 0], t / ts.maximum(nrm, 1e-12))


@ts.jit
def l2_normalize(x: ts.Tensor[[L2_ROWS, L2_COLS], ts.f32], y: ts.Out[[L2_ROWS, L2_COLS], ts.f32]):
    for r in ts.range(0, L2_ROWS - L2_BLOCK, L2_BLOCK):
        l2_normalize_rows(x[r : r + L2_BLOCK, :], y[r : r + L2_BLOCK, :])


def l2_normalize_golden(t):
    t["y"][:] = torch.nn.functional.normalize(t["x"].double(), dim=1, eps=1e-12).float()


L2_SPECS = [
    TensorSpec("x", [L2_ROWS, L2_COLS], torch.float32, init_value=torch.randn),
    TensorSpec("y", [L2_ROWS, L2_COLS], torch.float32, is_output=True),
]


BUGS = (
    BlindBug(
        name="max_pool_tail_fill_zero",
        what="the ragged last chunk is loaded with the default fill 0 instead of -inf, so the row max of negative log-probs becomes 0",
        pattern="mask",
        program=max_over_time,
        specs=MP_SPECS,
        golden=max_over_time_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="max_over_time_rows",
        op="load",
        line=(max_over_time_rows, "t = ts.load(x, [0, c], [MP_BLOCK, MP_CHUNK], valid=(MP_BLOCK, n))"),
        fixed='t = ts.load(x, [0, c], [MP_BLOCK, MP_CHUNK], valid=(MP_BLOCK, n), fill=float("-inf"))',
    ),
    BlindBug(
        name="dot_f16_partial_sums",
        what="products and chunk partial sums are taken in f16 and only then cast to f32; the dot products drift",
        pattern="narrow_accumulator",
        program=row_dot,
        specs=DP_SPECS,
        golden=row_dot_golden,
        rtol=1e-4,
        atol=1e-4,
        category="precision",
        kernel="row_dot_f16",
        op="row_sum",
        line=(row_dot_f16, "acc = acc + ts.cast(ts.row_sum(at * bt), ts.f32)"),
        fixed="acc = acc + ts.row_sum(ts.cast(at, ts.f32) * ts.cast(bt, ts.f32))",
        verdict="guilty",
    ),
    BlindBug(
        name="batchnorm_mean_wrong_axis",
        what="the batch mean is taken per row (row_mean) instead of per channel over the batch (col_mean)",
        pattern="wrong_reduction",
        program=batchnorm,
        specs=BN_SPECS,
        golden=batchnorm_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="batchnorm_channels",
        op="row_mean",
        line=(batchnorm_channels, "mu = ts.row_mean(t)"),
        fixed="mu = ts.col_mean(t)",
    ),
    BlindBug(
        name="logsumexp_max_for_sum",
        what="the shifted exponentials are reduced with row_max instead of row_sum",
        pattern="wrong_reduction",
        program=logsumexp,
        specs=LS_SPECS,
        golden=logsumexp_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="logsumexp_rows",
        op="row_max",
        line=(logsumexp_rows, "s = ts.row_max(ts.exp(t - m))"),
        fixed="s = ts.row_sum(ts.exp(t - m))",
    ),
    BlindBug(
        name="cumsum_tri_strict",
        what="the triangular matrix is strict (src < dst), so the scan is exclusive instead of inclusive",
        pattern="mask",
        program=cumsum,
        specs=CS_SPECS,
        golden=cumsum_golden,
        rtol=1e-5,
        atol=1e-4,
        category="algorithm",
        kernel="cumsum_rows",
        op="lt",
        line=(cumsum_rows, "tri = ts.where(src < dst, ones, 0.0)"),
        fixed="tri = ts.where(src <= dst, ones, 0.0)",
    ),
    BlindBug(
        name="decay_scan_carry_not_decayed",
        what="the previous chunk's state is added undecayed (carry instead of carry * a^(t+1))",
        pattern="missing_term",
        program=decay_scan,
        specs=SS_SPECS,
        golden=decay_scan_golden,
        rtol=1e-5,
        atol=1e-5,
        category="algorithm",
        kernel="decay_scan_rows",
        op="add",
        line=(decay_scan_rows, "yc = ts.matmul(ts.load(x, [0, c], [SS_BLOCK, SS_CHUNK]), L) + carry"),
        fixed="yc = ts.matmul(ts.load(x, [0, c], [SS_BLOCK, SS_CHUNK]), L) + carry * decay",
    ),
    BlindBug(
        name="log_softmax_store_loop_short",
        what="the output loop stops one chunk early, the last 256 columns of every row are never written",
        pattern="off_by_one",
        program=log_softmax,
        specs=LG_SPECS,
        golden=log_softmax_golden,
        rtol=1e-5,
        atol=1e-5,
        category="uninitialized",
        kernel="log_softmax_rows",
        op="range",
        line=(log_softmax_rows, "for c in ts.range(0, LG_COLS - LG_CHUNK, LG_CHUNK):"),
        fixed="for c in ts.range(0, LG_COLS, LG_CHUNK):",
    ),
    BlindBug(
        name="l2norm_last_block_skipped",
        what="the orchestration's row loop stops one block early; the last 32 rows of y are never written",
        pattern="off_by_one",
        program=l2_normalize,
        specs=L2_SPECS,
        golden=l2_normalize_golden,
        rtol=1e-5,
        atol=1e-5,
        category="uninitialized",
        kernel=None,
        op="range",
        line=(l2_normalize, "for r in ts.range(0, L2_ROWS - L2_BLOCK, L2_BLOCK):"),
        fixed="for r in ts.range(0, L2_ROWS, L2_BLOCK):",
    ),
)
