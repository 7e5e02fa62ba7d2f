"""Linear and cross-entropy fused: each task computes the logits of 16 rows (never written to
memory), their logsumexp, the target's logit by an iota == target mask, and the block's loss sum
and count of counted rows into a [16, 2] intermediate; a last task stores the mean into the
0-dim loss (NaN when every target is ignored, as torch)."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, IN, CLASSES = 256, 256, 512
BM, BK = 16, 32
BLOCKS = BATCH // BM
IGNORE = -100


@ts.kernel
def matmul_cross_entropy_rows(
    x: ts.Tensor[[BM, IN], ts.f32],
    w: ts.Tensor[[CLASSES, IN], ts.f32],
    bias: ts.Tensor[[CLASSES], ts.f32],
    target: ts.Tensor[[BM], ts.i64],
    partial: ts.Out[[1, 2], ts.f32],
):
    acc = ts.zeros([BM, CLASSES], ts.f32)
    for k in ts.range(0, IN, BK):
        acc = acc + ts.matmul(ts.load(x, [0, k], [BM, BK]), ts.load(w, [0, k], [CLASSES, BK]), transpose_b=True)
    logits = acc + ts.load(bias, [0], [CLASSES])
    tgt = ts.cast(ts.load(target, [0], [BM], dims=[0, None]), ts.i32)  # target[:, None]
    picked = ts.row_sum(ts.where(ts.iota([BM, CLASSES], dim=1) == tgt, logits, 0.0))
    counted = tgt != IGNORE
    ts.store(partial, [0, 0], ts.col_sum(ts.where(counted, ts.row_logsumexp(logits) - picked, 0.0)))
    ts.store(partial, [0, 1], ts.col_sum(ts.where(counted, 1.0, 0.0)))


@ts.kernel
def cross_entropy_mean(partials: ts.Tensor[[BLOCKS, 2], ts.f32], loss: ts.Out[[], ts.f32]):
    s = ts.col_sum(ts.load(partials, [0, 0], [BLOCKS, 2]))
    ts.store(loss, [], s[:, 0:1] / s[:, 1:2])


@ts.jit
def matmul_cross_entropy(
    x: ts.Tensor[[BATCH, IN], ts.f32],
    w: ts.Tensor[[CLASSES, IN], ts.f32],
    bias: ts.Tensor[[CLASSES], ts.f32],
    target: ts.Tensor[[BATCH], ts.i64],
    loss: ts.Out[[], ts.f32],
):
    partials = ts.create_tensor([BLOCKS, 2], ts.f32)
    for i in ts.range(0, BATCH, BM):
        matmul_cross_entropy_rows(x[i : i + BM, :], w, bias, target[i : i + BM], partials[i // BM : i // BM + 1, :])
    cross_entropy_mean(partials, loss)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        if (in_features, num_classes) != (IN, CLASSES):
            raise ValueError(f"this solution is written for {IN} features and {CLASSES} classes")
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = torch.empty(())
        matmul_cross_entropy(x, self.linear.weight, self.linear.bias, targets, loss)
        return loss
