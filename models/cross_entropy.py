"""Cross-entropy loss of [N, C] f32 logits against [N] int64 class targets, as
torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="mean"): a 0-dim
f32 loss, the mean over the rows whose target is not ``ignore_index`` of
``logsumexp(row) - row[target]``. When every target is ignored the loss is NaN (0 / 0), as torch's.

One task per block of rows: ``ts.row_logsumexp`` (stable, carried across column chunks when a row
does not fit one tile), the target's logit picked by an ``iota == target`` mask, and the block's
sum of losses and count of counted rows stored into an intermediate [blocks, 2] tensor. A last
task sums the partials and stores ``sum / count`` into the 0-dim output. ``reduction="sum"``
stores the sum. A target outside [0, C) that is not ``ignore_index`` contributes
``logsumexp(row)`` (torch raises instead).

Default size: 512 rows of 1000 classes (ImageNet's), 32 rows per task, 256 columns at a time
(the last chunk ragged), with about 1 target in 8 ignored.

python models/cross_entropy.py -p sim      # or -p interp
"""

import argparse

import torch

import tilescope as ts
from tilescope.harness import TensorSpec, add_harness_args, harness_kwargs, run_jit

IGNORE_INDEX = -100


def build(
    rows: int = 512,
    classes: int = 1000,
    block: int = 32,
    chunk: int | None = 256,
    ignore_index: int = IGNORE_INDEX,
    reduction: str = "mean",
):
    """The cross-entropy program for [rows, classes] logits, ``block`` rows per task (it must divide
    ``rows``) and ``chunk`` classes at a time (None: the whole row in one tile; a chunk that does not
    divide ``classes`` leaves a ragged last one)."""
    if rows % block:
        raise ValueError(f"block ({block}) must divide rows ({rows})")
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    chunk = chunk or classes
    blocks = rows // block

    @ts.kernel
    def cross_entropy_rows(
        logits: ts.Tensor[[block, classes], ts.f32],
        target: ts.Tensor[[block], ts.i64],
        partial: ts.Out[[1, 2], ts.f32],
    ):
        tgt = ts.cast(ts.load(target, [0], [block], dims=[0, None]), ts.i32)  # target[:, None]
        if chunk == classes:
            t = ts.load(logits, [0, 0], [block, classes])
            lse = ts.row_logsumexp(t)
            picked = ts.row_sum(ts.where(ts.iota([block, classes], dim=1) == tgt, t, 0.0))
        else:
            lse = ts.full([block, 1], float("-inf"), ts.f32)
            picked = ts.zeros([block, 1], ts.f32)
            for c in ts.range(0, classes, chunk):
                n = ts.minimum(classes - c, chunk)
                t = ts.load(logits, [0, c], [block, chunk], valid=(block, n), fill=float("-inf"))
                part = ts.row_logsumexp(t)
                hi = ts.maximum(lse, part)  # log(e^a + e^b) = max + log1p(e^-|a - b|); -inf + x is x
                lse = hi + ts.log1p(ts.exp(-ts.abs(lse - part)))
                hit = (ts.iota([block, chunk], dim=1) + c) == tgt
                picked = picked + ts.row_sum(ts.where(hit, t, 0.0))
        counted = tgt != ignore_index
        total = ts.col_sum(ts.where(counted, lse - picked, 0.0))
        count = ts.col_sum(ts.where(counted, 1.0, 0.0))
        ts.store(partial, [0, 0], total)
        ts.store(partial, [0, 1], count)

    @ts.kernel
    def cross_entropy_total(partials: ts.Tensor[[blocks, 2], ts.f32], loss: ts.Out[[], ts.f32]):
        s = ts.col_sum(ts.load(partials, [0, 0], [blocks, 2]))  # [1, 2]: the loss sum, the count
        if reduction == "mean":
            ts.store(loss, [], s[:, 0:1] / s[:, 1:2])
        else:
            ts.store(loss, [], s[:, 0:1])

    @ts.jit
    def cross_entropy(
        logits: ts.Tensor[[rows, classes], ts.f32],
        target: ts.Tensor[[rows], ts.i64],
        loss: ts.Out[[], ts.f32],
    ):
        partials = ts.create_tensor([blocks, 2], ts.f32)
        for r in ts.range(0, rows, block):
            cross_entropy_rows(logits[r : r + block, :], target[r : r + block], partials[r // block : r // block + 1, :])
        cross_entropy_total(partials, loss)

    return cross_entropy


def targets(rows: int, classes: int, ignored: float = 0.125, ignore_index: int = IGNORE_INDEX):
    """An ``init_value`` for the target: classes drawn uniformly, about ``ignored`` of them
    ``ignore_index`` (1.0: every one)."""

    def make(shape, dtype):
        t = torch.randint(0, classes, shape, dtype=dtype)
        return torch.where(torch.rand(shape) < ignored, torch.full_like(t, ignore_index), t)

    return make


def specs(rows: int = 512, classes: int = 1000, ignored: float = 0.125) -> list:
    return [
        TensorSpec("logits", [rows, classes], torch.float32,
                   init_value=lambda s, dtype: 3 * torch.randn(s, dtype=dtype)),  # fmt: skip
        TensorSpec("target", [rows], torch.int64, init_value=targets(rows, classes, ignored)),
        TensorSpec("loss", [], torch.float32, is_output=True),
    ]


def golden_for(ignore_index: int = IGNORE_INDEX, reduction: str = "mean"):
    """The golden of a program built with ``ignore_index`` and ``reduction``."""

    def golden(t: dict) -> None:
        t["loss"].copy_(
            torch.nn.functional.cross_entropy(t["logits"], t["target"], ignore_index=ignore_index, reduction=reduction)
        )

    return golden


TOLERANCE = (1e-5, 1e-6)
cross_entropy = build()
golden = golden_for()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_harness_args(parser)
    args = parser.parse_args(argv)
    result = run_jit(cross_entropy, specs(), golden_fn=golden, rtol=TOLERANCE[0], atol=TOLERANCE[1], **harness_kwargs(args))
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
