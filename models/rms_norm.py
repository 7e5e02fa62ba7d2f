"""RMS norm over rows: y = x * rsqrt(mean(x^2) + eps) * gamma, one task per 64-row block."""

import argparse

import torch

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit

ROWS, COLS, BLOCK, CHUNK = 512, 512, 64, 128


@ts.kernel
def rms_rows(
    x: ts.Tensor[[BLOCK, COLS], ts.f32],
    gamma: ts.Tensor[[1, COLS], ts.f32],
    y: ts.Out[[BLOCK, COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    acc = ts.zeros([BLOCK, 1], ts.f32)
    for h in ts.range(0, COLS, CHUNK):
        t = ts.load(x, [0, h], [BLOCK, CHUNK])
        acc = acc + ts.row_sum(t * t)
    inv = ts.rsqrt(acc / float(COLS) + eps)
    for h in ts.range(0, COLS, CHUNK):
        t = ts.load(x, [0, h], [BLOCK, CHUNK])
        g = ts.load(gamma, [0, h], [1, CHUNK])
        ts.store(y, [0, h], t * inv * g)


@ts.jit
def rms_norm(
    x: ts.Tensor[[ROWS, COLS], ts.f32],
    gamma: ts.Tensor[[1, COLS], ts.f32],
    y: ts.Out[[ROWS, COLS], ts.f32],
    eps: ts.Scalar[ts.f32],
):
    for r in ts.range(0, ROWS, BLOCK):
        rms_rows(x[r : r + BLOCK, :], gamma, y[r : r + BLOCK, :], eps)


def golden(t: dict) -> None:
    x = t["x"]
    t["y"][:] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + t["eps"]) * t["gamma"]


SPECS = [
    TensorSpec("x", [ROWS, COLS], torch.float32, init_value=torch.randn),
    TensorSpec("gamma", [1, COLS], torch.float32, init_value=torch.rand),
    TensorSpec("y", [ROWS, COLS], torch.float32, is_output=True),
    ScalarSpec("eps", torch.float32, 1e-6),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(rms_norm, SPECS, golden_fn=golden, rtol=1e-5, atol=1e-5, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
