"""A transposed 4x4 convolution, stride 2, padding 1 (a 2x upsampling): one task per 8 output rows
of an image. Output row 2*i + rh takes the kernel rows kh = (rh + 1) % 2, + 2 from input rows
i + (rh + 1 - kh) / 2, and output columns 2*j + rw the kernel columns kw = (rw + 1) % 2, + 2 from
input columns j + (rw + 1 - kw) / 2. So each phase (rh, rw) of an output row is four
[C_out, C_in] @ [C_in, W] matmuls of input rows read with padded loads (zero outside the image),
written into every second output column by a strided store."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, CIN, COUT, H, W, K, S, PAD = 4, 32, 16, 16, 16, 4, 2, 1
OH, OW = (H - 1) * S - 2 * PAD + K, (W - 1) * S - 2 * PAD + K
BI = 4  # input rows per task: BI * S output rows


@ts.kernel
def conv_t_rows(
    x: ts.Tensor[[CIN, H, W], ts.f32],
    w: ts.Tensor[[CIN, COUT, K, K], ts.f32],
    bias: ts.Tensor[[COUT], ts.f32],
    y: ts.Out[[COUT, BI * S, OW], ts.f32],
    i0: ts.Scalar[ts.i32],
):
    b = ts.load(bias, [0], [COUT], dims=[0, None])
    for i in ts.range(0, BI):
        for rh in ts.range(0, S):  # output row S * (i0 + i) + rh
            for rw in ts.range(0, S):  # output columns rw, rw + S, ...
                acc = ts.zeros([COUT, OW // S], ts.f32)
                for kh in ts.range((rh + PAD) % S, K, S):
                    ih = i0 + i + (rh + PAD - kh) // S
                    for kw in ts.range((rw + PAD) % S, K, S):
                        rows = ts.load(x, [0, ih, (rw + PAD - kw) // S], [CIN, 1, OW // S], dims=[0, 2], pad=0.0)
                        tap = ts.load(w, [0, 0, kh, kw], [CIN, COUT, 1, 1], dims=[0, 1])
                        acc = acc + ts.matmul(tap, rows, transpose_a=True)
                ts.store(y, [0, i * S + rh, rw], acc + b, dims=[0, 2], strides=[1, 1, S])


@ts.jit
def conv_transpose2d(
    x: ts.Tensor[[BATCH, CIN, H, W], ts.f32],
    w: ts.Tensor[[CIN, COUT, K, K], ts.f32],
    bias: ts.Tensor[[COUT], ts.f32],
    y: ts.Out[[BATCH, COUT, OH, OW], ts.f32],
):
    for n in ts.range(0, BATCH):
        for i in ts.range(0, H, BI):
            conv_t_rows(x[n, :, :, :], w, bias, y[n, :, i * S : i * S + BI * S, :], i)


class ModelNew(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = True
    ):
        super().__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv_transpose2d
        bias = c.bias if c.bias is not None else torch.zeros(c.out_channels)
        y = torch.empty(x.shape[0], c.out_channels, OH, OW)
        conv_transpose2d(x, c.weight, bias, y)
        return y
