"""Conv2d (3x3, no padding, with its bias), ReLU, then the model's per-channel bias, fused: one
task per 10 output rows of an image. Each output row sums the 9 taps' [C_out, C_in] @ [C_in, OW]
matmuls of input rows (row oh + i, columns from j), then adds both biases around the ReLU."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, CIN, COUT, H, W, K = 4, 8, 16, 32, 32, 3
OH, OW = H - K + 1, W - K + 1
BH = 10  # output rows per task


@ts.kernel
def conv_relu_bias_rows(
    x: ts.Tensor[[CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    conv_bias: ts.Tensor[[COUT], ts.f32],
    bias: ts.Tensor[[COUT, 1, 1], ts.f32],
    y: ts.Out[[COUT, BH, OW], ts.f32],
    oh0: ts.Scalar[ts.i32],
):
    cb = ts.load(conv_bias, [0], [COUT], dims=[0, None])
    b = ts.load(bias, [0, 0, 0], [COUT, 1, 1], dims=[0, 2])  # bias[:, :, 0]
    for r in ts.range(0, BH):
        acc = ts.zeros([COUT, OW], ts.f32)
        for i in ts.range(0, K):
            for j in ts.range(0, K):
                win = ts.load(x, [0, oh0 + r + i, j], [CIN, 1, OW], dims=[0, 2])
                acc = acc + ts.matmul(ts.load(w, [0, 0, i, j], [COUT, CIN, 1, 1], dims=[0, 1]), win)
        ts.store(y, [0, r, 0], ts.relu(acc + cb) + b, dims=[0, 2])


@ts.jit
def conv2d_relu_bias_add(
    x: ts.Tensor[[BATCH, CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    conv_bias: ts.Tensor[[COUT], ts.f32],
    bias: ts.Tensor[[COUT, 1, 1], ts.f32],
    y: ts.Out[[BATCH, COUT, OH, OW], ts.f32],
):
    for n in ts.range(0, BATCH):
        for r in ts.range(0, OH, BH):
            conv_relu_bias_rows(x[n, :, :, :], w, conv_bias, bias, y[n, :, r : r + BH, :], r)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, bias_shape: tuple):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[0], self.conv.out_channels, OH, OW)
        conv2d_relu_bias_add(x, self.conv.weight, self.conv.bias, self.bias, y)
        return y
