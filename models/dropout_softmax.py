"""Row softmax followed by dropout(p): each element of the softmax is kept with probability
1 - p and scaled by 1 / (1 - p), or zeroed, as torch.nn.functional.dropout(torch.softmax(x, -1),
p) in training mode, with tilescope's own random numbers.

One task per block of whole rows. The mask is ``ts.rand(...) >= p`` with the task's offset the
index of its first element in the whole tensor (``r * cols``), so element ``[i, j]`` draws
counter ``i * cols + j`` whatever the block: the mask depends on the seed only, not on the
tiling, the schedule or the platform (sim and interp draw the same bits).

torch's generator is not reproduced, so no golden holds the exact output: the golden is the
undropped ``softmax(x) / (1 - p)``, and the comparison checks every element is 0 or that value,
and that the share of zeros is p within 5 standard deviations of a binomial draw
(tests/system/test_dropout_softmax.py checks the masks across platforms, seeds and tilings).

Default size: [512, 1024] f32, 16 rows per task, p = 0.1, seed 1234.

python models/dropout_softmax.py -p sim      # or -p interp; --dropout-p 0.5, --dropout-seed 7
"""

import argparse
import math

import torch

import tilescope as ts
from tilescope.harness import ScalarSpec, TensorSpec, add_harness_args, harness_kwargs, run_jit


def build(rows: int = 512, cols: int = 1024, block: int = 16):
    """The dropout-softmax program for a [rows, cols] f32 input, ``block`` whole rows per task
    (it must divide ``rows``); the seed and p are run-time scalars."""
    if rows % block:
        raise ValueError(f"block ({block}) must divide rows ({rows})")

    @ts.kernel
    def dropout_softmax_rows(
        x: ts.Tensor[[block, cols], ts.f32],
        y: ts.Out[[block, cols], ts.f32],
        row: ts.Scalar[ts.i64],
        seed: ts.Scalar[ts.i64],
        p: ts.Scalar[ts.f32],
    ):
        t = ts.load(x, [0, 0], [block, cols])
        e = ts.exp(t - ts.row_max(t))
        scale = (1.0 / (1.0 - p)) / ts.row_sum(e)  # the softmax's normalization and dropout's scale
        keep = ts.rand([block, cols], seed, row * cols) >= p
        ts.store(y, [0, 0], ts.where(keep, e * scale, 0.0))

    @ts.jit
    def dropout_softmax(
        x: ts.Tensor[[rows, cols], ts.f32],
        y: ts.Out[[rows, cols], ts.f32],
        seed: ts.Scalar[ts.i64],
        p: ts.Scalar[ts.f32],
    ):
        for r in ts.range(0, rows, block):
            dropout_softmax_rows(x[r : r + block, :], y[r : r + block, :], r, seed, p)

    return dropout_softmax


def specs(rows: int = 512, cols: int = 1024, seed: int = 1234, p: float = 0.1) -> list:
    return [
        TensorSpec("x", [rows, cols], torch.float32, init_value=lambda s, dtype: 4 * torch.randn(s, dtype=dtype)),
        TensorSpec("y", [rows, cols], torch.float32, is_output=True),
        ScalarSpec("seed", torch.int64, seed),
        ScalarSpec("p", torch.float32, p),
    ]


def golden(t: dict) -> None:
    """The undropped output, softmax(x) / (1 - p): what every kept element must be."""
    t["y"][:] = torch.softmax(t["x"], dim=-1) / (1 - t["p"])


def check_dropout(y: torch.Tensor, kept_value: torch.Tensor, p: float, rtol: float = 1e-5, atol: float = 1e-6,
                  sigmas: float = 5.0) -> tuple[bool, str]:  # fmt: skip
    """Whether ``y`` is a dropout of ``kept_value`` with rate ``p``: every element 0 or within
    rtol/atol of ``kept_value``, and the share of zeros (among elements whose value is not 0
    itself) within ``sigmas`` standard deviations of a binomial draw of rate p."""
    nonzero = kept_value != 0
    dropped = (y == 0) & nonzero
    kept = ~dropped & nonzero
    wrong = int((~torch.isclose(y[kept], kept_value[kept], rtol=rtol, atol=atol)).sum())
    n = int(nonzero.sum())
    rate = int(dropped.sum()) / n
    sd = math.sqrt(p * (1 - p) / n)
    ok = wrong == 0 and abs(rate - p) <= sigmas * sd
    return ok, (f"{wrong} kept elements differ from softmax / (1 - p); drop rate {rate:.5f} of {n} elements "
                f"(p = {p}, {abs(rate - p) / sd if sd else 0.0:.2f} standard deviations off)")  # fmt: skip


dropout_softmax = build()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dropout-p", type=float, default=0.1, help="the drop probability (default: 0.1)")
    parser.add_argument("--dropout-seed", type=int, default=1234, help="the seed of the mask (default: 1234)")
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(
        dropout_softmax, specs(seed=args.dropout_seed, p=args.dropout_p), golden_fn=golden,
        compare_fn=lambda y, kept_value: check_dropout(y, kept_value, args.dropout_p), **harness_kwargs(args),
    )  # fmt: skip
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
