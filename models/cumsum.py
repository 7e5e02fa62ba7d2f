"""Running sum along the last dim of a [rows, cols] f32 input, as torch.cumsum(x, dim=-1), with
the reverse (``x.flip(-1).cumsum(-1).flip(-1)``) and exclusive (each element left out of its
own sum) forms as options.

One task per block of rows; a row longer than one tile is scanned in column chunks with
``ts.cumsum``, the running total of the chunks before carried into the next (from the end
for ``reverse``). The chunk's scan and the carry are float64, each output rounded to f32 once,
as torch's CPU cumsum of f32 accumulates in double, so the result does not drift with the
number of chunks.

Default size: [256, 4096] f32, 32 rows per task, 256 columns at a time.

python models/cumsum.py -p sim      # or -p interp; --reverse, --exclusive
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(
    rows: int = 256, cols: int = 4096, block: int = 32, chunk: int = 256, reverse: bool = False, exclusive: bool = False
):
    """The cumsum program for a [rows, cols] f32 input, ``block`` rows per task and ``chunk``
    columns at a time (each must divide its dim)."""
    if rows % block or cols % chunk:
        raise ValueError(f"block ({block}) must divide rows ({rows}) and chunk ({chunk}) cols ({cols})")

    @ts.kernel
    def cumsum_rows(x: ts.Tensor[[block, cols], ts.f32], y: ts.Out[[block, cols], ts.f32]):
        carry = ts.zeros([block, 1], ts.f64)
        for i in ts.range(0, cols, chunk):
            c = cols - chunk - i if reverse else i
            t = ts.cast(ts.load(x, [0, c], [block, chunk]), ts.f64)
            ts.store(y, [0, c], ts.cast(ts.cumsum(t, dim=-1, reverse=reverse, exclusive=exclusive) + carry, ts.f32))
            carry = carry + ts.row_sum(t)

    @ts.jit
    def cumsum(x: ts.Tensor[[rows, cols], ts.f32], y: ts.Out[[rows, cols], ts.f32]):
        for r in ts.range(0, rows, block):
            cumsum_rows(x[r : r + block, :], y[r : r + block, :])

    return cumsum


def specs(rows: int = 256, cols: int = 4096) -> list:
    return [
        TensorSpec("x", [rows, cols], torch.float32),
        TensorSpec("y", [rows, cols], torch.float32, is_output=True),
    ]


def golden_for(reverse: bool = False, exclusive: bool = False):
    """The golden of a program built with ``reverse`` and ``exclusive`` (torch has no exclusive
    scan: the inclusive one of the input shifted by one, a zero first)."""

    def golden(t: dict) -> None:
        x = t["x"].flip(-1) if reverse else t["x"]
        if exclusive:
            x = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=-1)
        y = torch.cumsum(x, dim=-1)
        t["y"][:] = y.flip(-1) if reverse else y

    return golden


TOLERANCE = (1e-5, 1e-5)
cumsum = build()
golden = golden_for()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reverse", action="store_true", help="sum from the end of each row")
    parser.add_argument("--exclusive", action="store_true", help="leave each element out of its own sum")
    add_harness_args(parser)
    args = parser.parse_args(argv)
    fn = build(reverse=args.reverse, exclusive=args.exclusive) if args.reverse or args.exclusive else cumsum
    result = run_jit(
        fn, specs(), golden_fn=golden_for(args.reverse, args.exclusive), rtol=TOLERANCE[0], atol=TOLERANCE[1],
        **harness_kwargs(args),
    )  # fmt: skip
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
