"""A 3x3 convolution with stride 2, dilation 2 and padding 2, no bias: one task per image. For each
output row and tap (i, j), one padded, strided load reads the tap's input row as a [C_in, OW] tile
(every second column from 2*j - 2: element [c, o] is x[c, 2*oh - 2 + 2*i, 2*o - 2 + 2*j], zero in
the padding), and a [C_out, C_in] @ [C_in, OW] matmul adds the tap."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, CIN, COUT, H, W, K = 4, 8, 16, 33, 47, 3
STRIDE, PAD, DIL = 2, 2, 2
OH = (H + 2 * PAD - DIL * (K - 1) - 1) // STRIDE + 1
OW = (W + 2 * PAD - DIL * (K - 1) - 1) // STRIDE + 1


@ts.kernel
def conv_image(
    x: ts.Tensor[[CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    y: ts.Out[[COUT, OH, OW], ts.f32],
):
    for oh in ts.range(0, OH):
        acc = ts.zeros([COUT, OW], ts.f32)
        for i in ts.range(0, K):
            for j in ts.range(0, K):
                at = [0, oh * STRIDE - PAD + i * DIL, j * DIL - PAD]
                win = ts.load(x, at, [CIN, 1, OW], dims=[0, 2], strides=[1, 1, STRIDE], pad=0.0)
                acc = acc + ts.matmul(ts.load(w, [0, 0, i, j], [COUT, CIN, 1, 1], dims=[0, 1]), win)
        ts.store(y, [0, oh, 0], acc, dims=[0, 2])


@ts.jit
def conv2d(
    x: ts.Tensor[[BATCH, CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    y: ts.Out[[BATCH, COUT, OH, OW], ts.f32],
):
    for n in ts.range(0, BATCH):
        conv_image(x[n, :, :, :], w, y[n, :, :, :])


class ModelNew(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        if bias:
            raise ValueError("this solution is written for the reference's convolution, which has no bias")
        self.conv2d = nn.Conv2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation, bias=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[0], self.conv2d.out_channels, OH, OW)
        conv2d(x, self.conv2d.weight, y)
        return y
