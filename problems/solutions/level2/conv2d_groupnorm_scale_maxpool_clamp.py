"""Conv2d, GroupNorm, a per-channel scale, 2x2 max pooling and a clamp, in two kernels:

- conv_rows (one task per 10 output rows of an image) writes the convolution into an intermediate
  tensor: each output row sums the 9 taps' [C_out, C_in] @ [C_in, OW] matmuls of input rows;
- norm_pool (one task per group of an image) takes the group's mean and variance over its
  [C/G, OH, OW] values (two passes, one [OH, OW] tile per channel), then for each channel reads the
  four taps of the 2x2 pool as strided [OH/2, OW/2] tiles, normalizes, scales, and keeps their
  maximum, clamped.

The second kernel's tasks wait for the conv tasks that write their group's rows (inferred from the
regions)."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, CIN, COUT, H, W, K, GROUPS, POOL = 4, 8, 16, 32, 32, 3, 4, 2
OH, OW = H - K + 1, W - K + 1
PH, PW = OH // POOL, OW // POOL
CPG = COUT // GROUPS  # channels per group
BH = 10  # conv output rows per task


@ts.kernel
def conv_rows(
    x: ts.Tensor[[CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    bias: ts.Tensor[[COUT], ts.f32],
    y: ts.Out[[COUT, BH, OW], ts.f32],
    oh0: ts.Scalar[ts.i32],
):
    b = ts.load(bias, [0], [COUT], dims=[0, None])
    for r in ts.range(0, BH):
        acc = ts.zeros([COUT, OW], ts.f32)
        for i in ts.range(0, K):
            for j in ts.range(0, K):
                win = ts.load(x, [0, oh0 + r + i, j], [CIN, 1, OW], dims=[0, 2])
                acc = acc + ts.matmul(ts.load(w, [0, 0, i, j], [COUT, CIN, 1, 1], dims=[0, 1]), win)
        ts.store(y, [0, r, 0], acc + b, dims=[0, 2])


@ts.kernel
def norm_pool(
    h: ts.Tensor[[CPG, OH, OW], ts.f32],
    gamma: ts.Tensor[[CPG], ts.f32],
    beta: ts.Tensor[[CPG], ts.f32],
    scale: ts.Tensor[[CPG, 1, 1], ts.f32],
    y: ts.Out[[CPG, PH, PW], ts.f32],
    eps: ts.Scalar[ts.f32],
    lo: ts.Scalar[ts.f32],
    hi: ts.Scalar[ts.f32],
):
    total = ts.zeros([1, 1], ts.f32)
    for c in ts.range(0, CPG):
        total = total + ts.row_sum(ts.col_sum(ts.load(h, [c, 0, 0], [1, OH, OW], dims=[1, 2])))
    mean = total / float(CPG * OH * OW)
    sq = ts.zeros([1, 1], ts.f32)
    for c in ts.range(0, CPG):
        d = ts.load(h, [c, 0, 0], [1, OH, OW], dims=[1, 2]) - mean
        sq = sq + ts.row_sum(ts.col_sum(d * d))
    inv = ts.rsqrt(sq / float(CPG * OH * OW) + eps)
    for c in ts.range(0, CPG):
        g = ts.load(gamma, [c], [1])
        b = ts.load(beta, [c], [1])
        s = ts.load(scale, [c, 0, 0], [1, 1, 1])
        m = ts.full([PH, PW], float("-inf"), ts.f32)
        for i in ts.range(0, POOL):
            for j in ts.range(0, POOL):
                t = ts.load(h, [c, i, j], [1, PH, PW], dims=[1, 2], strides=[1, POOL, POOL])
                m = ts.maximum(m, ((t - mean) * inv * g + b) * s)
        ts.store(y, [c, 0, 0], ts.clamp(m, lo, hi), dims=[1, 2])


@ts.jit
def conv2d_groupnorm_scale_maxpool_clamp(
    x: ts.Tensor[[BATCH, CIN, H, W], ts.f32],
    w: ts.Tensor[[COUT, CIN, K, K], ts.f32],
    bias: ts.Tensor[[COUT], ts.f32],
    gamma: ts.Tensor[[COUT], ts.f32],
    beta: ts.Tensor[[COUT], ts.f32],
    scale: ts.Tensor[[COUT, 1, 1], ts.f32],
    y: ts.Out[[BATCH, COUT, PH, PW], ts.f32],
    eps: ts.Scalar[ts.f32],
    lo: ts.Scalar[ts.f32],
    hi: ts.Scalar[ts.f32],
):
    conv = ts.create_tensor([BATCH, COUT, OH, OW], ts.f32)
    for n in ts.range(0, BATCH):
        for r in ts.range(0, OH, BH):
            conv_rows(x[n, :, :, :], w, bias, conv[n, :, r : r + BH, :], r)
    for n in ts.range(0, BATCH):
        for g in ts.range(0, COUT, CPG):
            norm_pool(
                conv[n, g : g + CPG, :, :],
                gamma[g : g + CPG],
                beta[g : g + CPG],
                scale[g : g + CPG, :, :],
                y[n, g : g + CPG, :, :],
                eps,
                lo,
                hi,
            )


class ModelNew(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        num_groups: int,
        scale_shape: tuple,
        maxpool_kernel_size: int,
        clamp_min: float,
        clamp_max: float,
    ):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gn = self.group_norm
        y = torch.empty(x.shape[0], self.conv.out_channels, PH, PW)
        conv2d_groupnorm_scale_maxpool_clamp(
            x,
            self.conv.weight,
            self.conv.bias,
            gn.weight,
            gn.bias,
            self.scale,
            y,
            gn.eps,
            self.clamp_min,
            self.clamp_max,
        )
        return y
