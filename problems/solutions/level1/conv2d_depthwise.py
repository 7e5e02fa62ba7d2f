"""A depthwise 3x3 convolution (padding 1): one task per 8 output rows of an image, every channel at
once. For each output row and tap (i, j), a padded load reads the [C, W] input row i - 1 below it,
shifted by j - 1 (zero where it leaves the image), scaled by the tap's [C, 1] column of weights."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, C, H, W, K, PAD = 4, 32, 32, 32, 3, 1
OH, OW = H + 2 * PAD - K + 1, W + 2 * PAD - K + 1
BH = 8  # output rows per task


@ts.kernel
def depthwise_rows(
    x: ts.Tensor[[C, H, W], ts.f32],
    w: ts.Tensor[[C, 1, K, K], ts.f32],
    bias: ts.Tensor[[C], ts.f32],
    y: ts.Out[[C, BH, OW], ts.f32],
    oh0: ts.Scalar[ts.i32],
):
    b = ts.load(bias, [0], [C], dims=[0, None])
    for r in ts.range(0, BH):
        acc = ts.zeros([C, OW], ts.f32)
        for i in ts.range(0, K):
            for j in ts.range(0, K):
                win = ts.load(x, [0, oh0 + r - PAD + i, j - PAD], [C, 1, OW], dims=[0, 2], pad=0.0)
                acc = acc + win * ts.load(w, [0, 0, i, j], [C, 1, 1, 1], dims=[0, 1])
        ts.store(y, [0, r, 0], acc + b, dims=[0, 2])


@ts.jit
def conv2d_depthwise(
    x: ts.Tensor[[BATCH, C, H, W], ts.f32],
    w: ts.Tensor[[C, 1, K, K], ts.f32],
    bias: ts.Tensor[[C], ts.f32],
    y: ts.Out[[BATCH, C, OH, OW], ts.f32],
):
    for n in ts.range(0, BATCH):
        for r in ts.range(0, OH, BH):
            depthwise_rows(x[n, :, :, :], w, bias, y[n, :, r : r + BH, :], r)


class ModelNew(nn.Module):
    def __init__(self, channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = True):
        super().__init__()
        self.conv2d = nn.Conv2d(
            channels, channels, kernel_size, stride=stride, padding=padding, groups=channels, bias=bias
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv2d
        bias = c.bias if c.bias is not None else torch.zeros(c.out_channels)
        y = torch.empty(x.shape[0], C, OH, OW)
        conv2d_depthwise(x, c.weight, bias, y)
        return y
