"""Seeded bugs that ``tilescope triage --fix`` proposes a verified edit for, besides those of
tests/localize_programs.py and tests/triage_programs.py (tests/test_fix.py asserts the edit)."""

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
