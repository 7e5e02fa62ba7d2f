"""Seeded bugs that ``tilescope triage --fix`` proposes a verified edit for, besides those of
tests/localize_programs.py and tests/triage_programs.py (tests/analysis/test_fix.py asserts the edit)."""

import torch

import tilescope as ts
from tilescope.harness import TensorSpec

# -- nan: variance by cancellation, E[x^2] - E[x]^2, goes negative under rsqrt -----------------


@ts.kernel
def standardize_rows(x: ts.Tensor[[8, 256], ts.f32], y: ts.Out[[8, 256], ts.f32]):
    t = ts.load(x, [0, 0], [8, 256])
    m = ts.row_sum(t) * (1.0 / 256)
    var = ts.row_sum(t * t) * (1.0 / 256) - m * m  # the defect: cancellation when the mean is large
    ts.store(y, [0, 0], (t - m) * ts.rsqrt(var + 1e-5))


@ts.jit
def standardize(x: ts.Tensor[[32, 256], ts.f32], y: ts.Out[[32, 256], ts.f32]):
    for r in ts.range(0, 32, 8):
        standardize_rows(x[r : r + 8, :], y[r : r + 8, :])


def standardize_inputs():
    g = torch.Generator().manual_seed(7)
    return {"x": 1000.0 + 0.2 * torch.randn(32, 256, generator=g)}


def standardize_golden(inputs):
    x = inputs["x"].double()
    m = x.mean(dim=-1, keepdim=True)
    v = ((x - m) ** 2).mean(dim=-1, keepdim=True)
    return {"y": ((x - m) / torch.sqrt(v + 1e-5)).float()}


# -- compile error: an Out param that is read (it must be InOut) --------------------------------


@ts.kernel
def accumulate_rows(x: ts.Tensor[[16, 64], ts.f32], y: ts.Out[[16, 64], ts.f32]):
    acc = ts.load(y, [0, 0], [16, 64])  # the defect: y is read, so it is an InOut
    ts.store(y, [0, 0], acc + ts.load(x, [0, 0], [16, 64]))


@ts.jit
def accumulate(x: ts.Tensor[[64, 64], ts.f32], y: ts.InOut[[64, 64], ts.f32]):
    for r in ts.range(0, 64, 16):
        accumulate_rows(x[r : r + 16, :], y[r : r + 16, :])


ACCUMULATE = [
    TensorSpec("x", [64, 64], torch.float32),
    TensorSpec("y", [64, 64], torch.float32, is_output=True, init_value=lambda shape, dtype: torch.ones(shape, dtype=dtype)),
]


def accumulate_golden(t):
    t["y"][:] = t["y"] + t["x"]


# -- unfixable: rows divided by their max where the reference is their L2 norm ------------------


@ts.kernel
def unit_rows(x: ts.Tensor[[8, 32], ts.f32], y: ts.Out[[8, 32], ts.f32]):
    t = ts.load(x, [0, 0], [8, 32])
    norm = ts.row_max(t)  # the defect: the reference divides by the L2 norm, which no sibling gives
    ts.probe(norm, "norm")
    ts.store(y, [0, 0], t / norm)


@ts.jit
def unit(x: ts.Tensor[[32, 32], ts.f32], y: ts.Out[[32, 32], ts.f32]):
    for r in ts.range(0, 32, 8):
        unit_rows(x[r : r + 8, :], y[r : r + 8, :])


UNIT = [
    TensorSpec("x", [32, 32], torch.float32, init_value=lambda shape, dtype: torch.rand(shape, dtype=dtype) + 0.5),
    TensorSpec("y", [32, 32], torch.float32, is_output=True),
]


def unit_golden(t):
    t["norm"] = t["x"].pow(2).sum(dim=-1, keepdim=True).sqrt()
    t["y"][:] = t["x"] / t["norm"]


# -- nan: an online softmax whose running max is a running min (-inf - -inf) -------------------

COLS, CHUNK = 256, 64


@ts.kernel
def online_softmax_rows(x: ts.Tensor[[8, COLS], ts.f32], y: ts.Out[[8, COLS], ts.f32]):
    m = ts.full([8, 1], float("-inf"), ts.f32)  # on purpose: not the culprit
    s = ts.zeros([8, 1], ts.f32)
    for c in ts.range(0, COLS, CHUNK):
        t = ts.load(x, [0, c], [8, CHUNK])
        m_new = ts.minimum(m, ts.row_max(t))  # the defect: a running max
        s = s * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
        m = m_new
    for c in ts.range(0, COLS, CHUNK):
        ts.store(y, [0, c], ts.exp(ts.load(x, [0, c], [8, CHUNK]) - m) / s)


@ts.jit
def online_softmax(x: ts.Tensor[[32, COLS], ts.f32], y: ts.Out[[32, COLS], ts.f32]):
    for r in ts.range(0, 32, 8):
        online_softmax_rows(x[r : r + 8, :], y[r : r + 8, :])


ONLINE_SOFTMAX = [TensorSpec("x", [32, COLS], torch.float32), TensorSpec("y", [32, COLS], torch.float32, is_output=True)]


def online_softmax_golden(t):
    t["y"][:] = torch.softmax(t["x"], dim=-1)


# -- uninitialized: a store loop bounded by names, one chunk short ------------------------------


@ts.kernel
def copy_chunks(x: ts.Tensor[[8, COLS], ts.f32], y: ts.Out[[8, COLS], ts.f32]):
    for c in ts.range(0, COLS - CHUNK, CHUNK):  # the defect: the chunks run to COLS
        ts.store(y, [0, c], ts.load(x, [0, c], [8, CHUNK]) + 1.0)


@ts.jit
def chunked_copy(x: ts.Tensor[[32, COLS], ts.f32], y: ts.Out[[32, COLS], ts.f32]):
    for r in ts.range(0, 32, 8):
        copy_chunks(x[r : r + 8, :], y[r : r + 8, :])


CHUNKED_COPY = [TensorSpec("x", [32, COLS], torch.float32), TensorSpec("y", [32, COLS], torch.float32, is_output=True)]


def chunked_copy_golden(t):
    t["y"][:] = t["x"] + 1.0


# -- precision: a layernorm whose variance cancels (std 1 on a mean of 1000): it drifts, no NaN --


@ts.kernel
def layernorm_rows(x: ts.Tensor[[16, 256], ts.f32], y: ts.Out[[16, 256], ts.f32]):
    t = ts.load(x, [0, 0], [16, 256])
    mean = ts.row_sum(t) * (1.0 / 256)
    var = ts.row_sum(t * t) * (1.0 / 256) - mean * mean  # the defect: cancellation
    ts.store(y, [0, 0], (t - mean) * ts.rsqrt(var + 1e-5))


@ts.jit
def layernorm(x: ts.Tensor[[64, 256], ts.f32], y: ts.Out[[64, 256], ts.f32]):
    for r in ts.range(0, 64, 16):
        layernorm_rows(x[r : r + 16, :], y[r : r + 16, :])


LAYERNORM = [
    TensorSpec("x", [64, 256], torch.float32, init_value=lambda shape, dtype: 1000.0 + torch.randn(shape, dtype=dtype)),
    TensorSpec("y", [64, 256], torch.float32, is_output=True),
]


def layernorm_golden(t):
    t["y"][:] = torch.nn.functional.layer_norm(t["x"], [256], eps=1e-5)


# -- uninitialized: an orchestration loop one block short (every kernel stores its whole region) --


@ts.kernel
def double_rows(x: ts.Tensor[[8, 32], ts.f32], y: ts.Out[[8, 32], ts.f32]):
    ts.store(y, [0, 0], ts.load(x, [0, 0], [8, 32]) * 2.0)


@ts.jit
def double_all(x: ts.Tensor[[32, 32], ts.f32], y: ts.Out[[32, 32], ts.f32]):
    for r in ts.range(0, 32 - 8, 8):  # the defect: the blocks run to 32
        double_rows(x[r : r + 8, :], y[r : r + 8, :])


DOUBLE_ALL = [TensorSpec("x", [32, 32], torch.float32), TensorSpec("y", [32, 32], torch.float32, is_output=True)]


def double_all_golden(t):
    t["y"][:] = t["x"] * 2.0


@ts.kernel
def copy_chunks_to_192(x: ts.Tensor[[8, COLS], ts.f32], y: ts.Out[[8, COLS], ts.f32]):
    for c in ts.range(0, 192, CHUNK):  # the defect: the chunks run to COLS
        ts.store(y, [0, c], ts.load(x, [0, c], [8, CHUNK]) + 1.0)


@ts.jit
def chunked_copy_192(x: ts.Tensor[[32, COLS], ts.f32], y: ts.Out[[32, COLS], ts.f32]):
    for r in ts.range(0, 32, 8):
        copy_chunks_to_192(x[r : r + 8, :], y[r : r + 8, :])


# -- algorithm, two lines: a rotation with sin and cos exchanged in both of its halves ----------

HALF = 32


@ts.kernel
def rotate_rows(
    x: ts.Tensor[[8, 2 * HALF], ts.f32], cs: ts.Tensor[[8, 2 * HALF], ts.f32], y: ts.Out[[8, 2 * HALF], ts.f32]
):
    x1 = ts.load(x, [0, 0], [8, HALF])
    x2 = ts.load(x, [0, HALF], [8, HALF])
    c = ts.load(cs, [0, 0], [8, HALF])
    s = ts.load(cs, [0, HALF], [8, HALF])
    ts.store(y, [0, 0], x1 * s - x2 * c)  # the defect: sin and cos exchanged
    ts.store(y, [0, HALF], x2 * s + x1 * c)  # and here too


@ts.jit
def rotate(x: ts.Tensor[[32, 2 * HALF], ts.f32], cs: ts.Tensor[[32, 2 * HALF], ts.f32], y: ts.Out[[32, 2 * HALF], ts.f32]):
    for r in ts.range(0, 32, 8):
        rotate_rows(x[r : r + 8, :], cs[r : r + 8, :], y[r : r + 8, :])


def _angles(shape, dtype):
    theta = torch.rand(shape[0], HALF, dtype=torch.float64) * 6.28
    return torch.cat([theta.cos(), theta.sin()], dim=1).to(dtype)


ROTATE = [
    TensorSpec("x", [32, 2 * HALF], torch.float32),
    TensorSpec("cs", [32, 2 * HALF], torch.float32, init_value=_angles),
    TensorSpec("y", [32, 2 * HALF], torch.float32, is_output=True),
]


def rotate_golden(t):
    x1, x2 = t["x"][:, :HALF].double(), t["x"][:, HALF:].double()
    c, s = t["cs"][:, :HALF].double(), t["cs"][:, HALF:].double()
    t["y"][:] = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=1).float()


# -- algorithm: a GEMM's K loop overwrites its accumulator instead of adding to it --------------


@ts.kernel
def gemm_block(a: ts.Tensor[[16, 64], ts.f32], b: ts.Tensor[[64, 16], ts.f32], c: ts.Out[[16, 16], ts.f32]):
    acc = ts.zeros([16, 16], ts.f32)
    for k in ts.range(0, 64, 16):
        acc = ts.matmul(ts.load(a, [0, k], [16, 16]), ts.load(b, [k, 0], [16, 16]))  # the defect: overwritten
    ts.store(c, [0, 0], acc)


@ts.jit
def gemm(a: ts.Tensor[[32, 64], ts.f32], b: ts.Tensor[[64, 32], ts.f32], c: ts.Out[[32, 32], ts.f32]):
    for i in ts.range(0, 32, 16):
        for j in ts.range(0, 32, 16):
            gemm_block(a[i : i + 16, :], b[:, j : j + 16], c[i : i + 16, j : j + 16])


GEMM = [
    TensorSpec("a", [32, 64], torch.float32),
    TensorSpec("b", [64, 32], torch.float32),
    TensorSpec("c", [32, 32], torch.float32, is_output=True),
]


def gemm_golden(t):
    t["c"][:] = (t["a"].double() @ t["b"].double()).float()
