"""x @ W.T + b, then ReLU, fused: one task per [32, 64] block of the output, accumulating over
the input features in chunks of 128 (W is nn.Linear's [out, in]: ts.matmul's transpose_b)."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, IN, OUT = 128, 512, 256
BM, BN, BK = 32, 64, 128


@ts.kernel
def gemm_bias_relu_block(
    x: ts.Tensor[[BM, IN], ts.f32],
    w: ts.Tensor[[BN, IN], ts.f32],
    bias: ts.Tensor[[BN], ts.f32],
    y: ts.Out[[BM, BN], ts.f32],
):
    acc = ts.zeros([BM, BN], ts.f32)
    for k in ts.range(0, IN, BK):
        acc = acc + ts.matmul(ts.load(x, [0, k], [BM, BK]), ts.load(w, [0, k], [BN, BK]), transpose_b=True)
    ts.store(y, [0, 0], ts.relu(acc + ts.load(bias, [0], [BN])))


@ts.jit
def gemm_bias_relu(
    x: ts.Tensor[[BATCH, IN], ts.f32],
    w: ts.Tensor[[OUT, IN], ts.f32],
    bias: ts.Tensor[[OUT], ts.f32],
    y: ts.Out[[BATCH, OUT], ts.f32],
):
    for i in ts.range(0, BATCH, BM):
        for j in ts.range(0, OUT, BN):
            gemm_bias_relu_block(
                x[i : i + BM, :], w[j : j + BN, :], bias[j : j + BN], y[i : i + BM, j : j + BN]
            )


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[0], self.gemm.out_features)
        gemm_bias_relu(x, self.gemm.weight, self.gemm.bias, y)
        return y
