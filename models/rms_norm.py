"""RMS norm over rows: y = x * rsqrt(mean(x^2) + eps) * gamma, one task per block of rows.

With ``chunk == cols`` (``row_tiling.row_tiling()``'s choice, the fastest at large sizes) a
task takes its rows ``step`` at a time, each step one tile, read once from memory; with a smaller
chunk a task's block is read twice, in column chunks (one pass for the sum of squares, one for
the output).

python models/rms_norm.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(rows: int = 512, cols: int = 512, block: int = 64, chunk: int = 128, step: int | None = None):
    """The rms_norm program for a [rows, cols] f32 input, ``block`` rows per task, ``chunk``
    columns at a time (``build(r, c, **row_tiling.row_tiling(r, c))`` reads each row once); with
    whole rows, ``step`` rows at a time (default: the whole block)."""
    if step is not None and chunk != cols:
        raise ValueError(f"rms_norm: step ({step} rows) takes whole rows; chunk is {chunk} of {cols} columns")
    step = step or block
    if block % step:
        raise ValueError(f"rms_norm: step ({step} rows) must divide block ({block} rows)")

    @ts.kernel
    def rms_rows(
        x: ts.Tensor[[block, cols], ts.f32],
        gamma: ts.Tensor[[1, cols], ts.f32],
        y: ts.Out[[block, cols], ts.f32],
        eps: ts.Scalar[ts.f32],
    ):
        if chunk == cols:  # compile-time: whole rows, a step's rows one tile, read once
            for s in ts.range(0, block, step):
                t = ts.load(x, [s, 0], [step, cols])
                inv = ts.rsqrt(ts.row_sum(t * t) / float(cols) + eps)
                ts.store(y, [s, 0], t * inv * ts.load(gamma, [0, 0], [1, cols]))
        else:
            acc = ts.zeros([block, 1], ts.f32)
            for h in ts.range(0, cols, chunk):
                t = ts.load(x, [0, h], [block, chunk])
                acc = acc + ts.row_sum(t * t)
            inv = ts.rsqrt(acc / float(cols) + eps)
            for h in ts.range(0, cols, chunk):
                t = ts.load(x, [0, h], [block, chunk])
                g = ts.load(gamma, [0, h], [1, chunk])
                ts.store(y, [0, h], t * inv * g)

    @ts.jit
    def rms_norm(
        x: ts.Tensor[[rows, cols], ts.f32],
        gamma: ts.Tensor[[1, cols], ts.f32],
        y: ts.Out[[rows, cols], ts.f32],
        eps: ts.Scalar[ts.f32],
    ):
        for r in ts.range(0, rows, block):
            rms_rows(x[r : r + block, :], gamma, y[r : r + block, :], eps)

    return rms_norm


def golden(t: dict) -> None:
    x = t["x"]
    t["y"][:] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + t["eps"]) * t["gamma"]


def specs(rows: int = 512, cols: int = 512) -> list:
    return [
        TensorSpec("x", [rows, cols], torch.float32, init_value=torch.randn),
        TensorSpec("gamma", [1, cols], torch.float32, init_value=torch.rand),
        TensorSpec("y", [rows, cols], torch.float32, is_output=True),
        ScalarSpec("eps", torch.float32, 1e-6),
    ]


rms_norm = build()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(rms_norm, specs(), golden_fn=golden, rtol=1e-5, atol=1e-5, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
