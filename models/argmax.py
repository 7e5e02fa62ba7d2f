"""Argmax along the last dim of a [rows, cols] f32 input, as torch.argmax(x, dim=-1): the index
of each row's first maximum, a NaN counting as the maximum (the first NaN wins).

One task per block of rows; a row longer than one tile is read in column chunks, the best value
and its index carried across them: a chunk's ``ts.row_argmax`` replaces the carried index only
when its maximum is greater (or is the row's first NaN), so a tie keeps the earlier index as
torch does. The indices are i32 (torch's are int64: the golden converts them).

Default size: [512, 8192] f32 (a vocabulary-sized row), 32 rows per task, 1024 columns at a
time; the input's maxima repeat across chunks (ties), and some rows hold NaNs or only -inf.

python models/argmax.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(rows: int = 512, cols: int = 8192, block: int = 32, chunk: int = 1024):
    """The argmax program for a [rows, cols] f32 input, ``block`` rows per task and ``chunk``
    columns at a time (each must divide its dim)."""
    if rows % block or cols % chunk:
        raise ValueError(f"block ({block}) must divide rows ({rows}) and chunk ({chunk}) cols ({cols})")

    @ts.kernel
    def argmax_rows(x: ts.Tensor[[block, cols], ts.f32], y: ts.Out[[block], ts.i32]):
        best = ts.full([block, 1], float("-inf"), ts.f32)
        index = ts.zeros([block, 1], ts.i32)
        for c in ts.range(0, cols, chunk):
            t = ts.load(x, [0, c], [block, chunk])
            m = ts.row_max(t)  # NaN when the chunk holds one
            # NOTE: strictly greater, so a tie keeps the earlier chunk's index; a NaN beats any number
            better = ts.logical_or(m > best, ts.logical_and(m != m, best == best))
            index = ts.where(better, ts.row_argmax(t) + c, index)
            best = ts.where(better, m, best)
        ts.store(y, [0], index[:, 0])

    @ts.jit
    def argmax(x: ts.Tensor[[rows, cols], ts.f32], y: ts.Out[[rows], ts.i32]):
        for r in ts.range(0, rows, block):
            argmax_rows(x[r : r + block, :], y[r : r + block])

    return argmax


def values_with_ties(shape, dtype):
    """Normal values on a grid of 0.5, so a row's maximum is often repeated, anywhere in the row;
    with planted NaNs (rows 3 and 5, twice each: the first wins) and a row of -inf (index 0)."""
    rows, cols = shape
    x = torch.round(torch.randn(shape) * 2) / 2
    x[3, cols // 2], x[3, cols - 1] = float("nan"), float("nan")
    x[5, 1], x[5, cols // 3] = float("nan"), float("nan")
    x[7] = float("-inf")
    return x.to(dtype)


def specs(rows: int = 512, cols: int = 8192) -> list:
    return [
        TensorSpec("x", [rows, cols], torch.float32, init_value=values_with_ties),
        TensorSpec("y", [rows], torch.int32, is_output=True),
    ]


def golden(t: dict) -> None:
    t["y"][:] = torch.argmax(t["x"], dim=-1).to(torch.int32)


argmax = build()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(argmax, specs(), golden_fn=golden, rtol=0, atol=0, **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
