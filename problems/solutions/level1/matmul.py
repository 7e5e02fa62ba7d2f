"""Square matmul: one task per [64, 64] block of C, accumulating over K in chunks of 64."""

import torch
import torch.nn as nn

import tilescope as ts

N, BM, BN, BK = 256, 64, 64, 64


@ts.kernel
def matmul_block(a: ts.Tensor[[BM, N], ts.f32], b: ts.Tensor[[N, BN], ts.f32], c: ts.Out[[BM, BN], ts.f32]):
    acc = ts.zeros([BM, BN], ts.f32)
    for k in ts.range(0, N, BK):
        acc = acc + ts.matmul(ts.load(a, [0, k], [BM, BK]), ts.load(b, [k, 0], [BK, BN]))
    ts.store(c, [0, 0], acc)


@ts.jit
def matmul(a: ts.Tensor[[N, N], ts.f32], b: ts.Tensor[[N, N], ts.f32], c: ts.Out[[N, N], ts.f32]):
    for i in ts.range(0, N, BM):
        for j in ts.range(0, N, BN):
            matmul_block(a[i : i + BM, :], b[:, j : j + BN], c[i : i + BM, j : j + BN])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        C = torch.empty(A.shape[0], B.shape[1])
        matmul(A, B, C)
        return C
