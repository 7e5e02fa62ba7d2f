"""Batched matmul: one task per batch element (A[b] is a [64, 128] region: an integer index drops
the batch dimension)."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, M, K, N = 8, 64, 128, 96


@ts.kernel
def matmul_one(a: ts.Tensor[[M, K], ts.f32], b: ts.Tensor[[K, N], ts.f32], c: ts.Out[[M, N], ts.f32]):
    ts.store(c, [0, 0], ts.matmul(ts.load(a, [0, 0], [M, K]), ts.load(b, [0, 0], [K, N])))


@ts.jit
def bmm(
    a: ts.Tensor[[BATCH, M, K], ts.f32], b: ts.Tensor[[BATCH, K, N], ts.f32], c: ts.Out[[BATCH, M, N], ts.f32]
):
    for i in ts.range(0, BATCH):
        matmul_one(a[i, :, :], b[i, :, :], c[i, :, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        C = torch.empty(A.shape[0], A.shape[1], B.shape[2])
        bmm(A, B, C)
        return C
