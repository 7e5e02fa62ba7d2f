"""Cross-entropy of [512, 1000] logits, ignore_index -100, the mean into a 0-dim loss: one task per
16 rows (the row's logsumexp, the target's logit by an iota == target mask, the block's loss sum
and count of counted rows into a [32, 2] intermediate), then one task that divides the sums."""

import torch
import torch.nn as nn

import tilescope as ts

N, C, B = 512, 1000, 16
BLOCKS = N // B
IGNORE = -100


@ts.kernel
def cross_entropy_rows(
    logits: ts.Tensor[[B, C], ts.f32], target: ts.Tensor[[B], ts.i64], partial: ts.Out[[1, 2], ts.f32]
):
    tgt = ts.cast(ts.load(target, [0], [B], dims=[0, None]), ts.i32)  # target[:, None]
    t = ts.load(logits, [0, 0], [B, C])
    picked = ts.row_sum(ts.where(ts.iota([B, C], dim=1) == tgt, t, 0.0))
    counted = tgt != IGNORE
    ts.store(partial, [0, 0], ts.col_sum(ts.where(counted, ts.row_logsumexp(t) - picked, 0.0)))
    ts.store(partial, [0, 1], ts.col_sum(ts.where(counted, 1.0, 0.0)))


@ts.kernel
def cross_entropy_mean(partials: ts.Tensor[[BLOCKS, 2], ts.f32], loss: ts.Out[[], ts.f32]):
    s = ts.col_sum(ts.load(partials, [0, 0], [BLOCKS, 2]))
    ts.store(loss, [], s[:, 0:1] / s[:, 1:2])  # 0 / 0 = NaN when every target is ignored, as torch


@ts.jit
def cross_entropy(logits: ts.Tensor[[N, C], ts.f32], target: ts.Tensor[[N], ts.i64], loss: ts.Out[[], ts.f32]):
    partials = ts.create_tensor([BLOCKS, 2], ts.f32)
    for r in ts.range(0, N, B):
        cross_entropy_rows(logits[r : r + B, :], target[r : r + B], partials[r // B : r // B + 1, :])
    cross_entropy_mean(partials, loss)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = torch.empty(())
        cross_entropy(predictions, targets, loss)
        return loss
