"""Row-wise, numerically stable softmax.

When a column chunk covers the whole row (``chunk == cols``, ``row_tiling.row_tiling()``'s
choice) each task loads its rows ``step`` at a time, once each, and computes exp once. Otherwise it makes one pass over the row for the statistics (online max and
rescaled sum, carried across column chunks) and one pass to write the output.

    python models/softmax.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(rows: int = 512, cols: int = 1024, block: int = 32, chunk: int = 256, step: int | None = None):
    """The softmax program for a [rows, cols] f32 input, ``block`` rows per task, ``chunk``
    columns at a time (``build(r, c, **row_tiling.row_tiling(r, c))`` is the single-pass kernel);
    with whole rows, ``step`` rows at a time (default: the whole block)."""
    if step is not None and chunk != cols:
        raise ValueError(f"softmax: step ({step} rows) takes whole rows; chunk is {chunk} of {cols} columns")
    step = step or block
    if block % step:
        raise ValueError(f"softmax: step ({step} rows) must divide block ({block} rows)")

    @ts.kernel
    def softmax_rows(x: ts.Tensor[[block, cols], ts.f32], y: ts.Out[[block, cols], ts.f32]):
        if chunk == cols:  # compile-time: whole rows, a step's rows one tile; exp once
            for s in ts.range(0, block, step):
                t = ts.load(x, [s, 0], [step, cols])
                e = ts.exp(t - ts.row_max(t))
                ts.store(y, [s, 0], e * (1.0 / ts.row_sum(e)))
        else:
            m = ts.full([block, 1], float("-inf"), ts.f32)
            s = ts.zeros([block, 1], ts.f32)
            for c in ts.range(0, cols, chunk):
                t = ts.load(x, [0, c], [block, chunk])
                m_new = ts.maximum(m, ts.row_max(t))
                s = s * ts.exp(m - m_new) + ts.row_sum(ts.exp(t - m_new))
                m = m_new
            inv = 1.0 / s
            for c in ts.range(0, cols, chunk):
                t = ts.load(x, [0, c], [block, chunk])
                ts.store(y, [0, c], ts.exp(t - m) * inv)

    @ts.jit
    def softmax(x: ts.Tensor[[rows, cols], ts.f32], y: ts.Out[[rows, cols], ts.f32]):
        for r in ts.range(0, rows, block):
            softmax_rows(x[r : r + block, :], y[r : r + block, :])

    return softmax


def golden(t: dict) -> None:
    t["y"][:] = torch.softmax(t["x"], dim=-1)


def specs(rows: int = 512, cols: int = 1024) -> list:
    return [
        TensorSpec(
            "x",
            [rows, cols],
            torch.float32,
            init_value=lambda shape, dtype: 4 * torch.randn(shape, dtype=dtype),
        ),
        TensorSpec("y", [rows, cols], torch.float32, is_output=True),
    ]


softmax = build()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(softmax, specs(), golden_fn=golden, rtol=1e-5, atol=1e-6, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
