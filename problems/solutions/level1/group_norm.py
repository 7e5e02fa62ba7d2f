"""GroupNorm of [8, 64, 32, 32] in 8 groups: one task per (sample, group), walking the group's 8
channels one [32, 32] tile at a time (x[n, c, :, :] of the 4-D tensor): the mean, then the
variance of the centred values, then each channel normalized with its weight and bias."""

import torch
import torch.nn as nn

import tilescope as ts

N, C, H, W, G = 8, 64, 32, 32, 8
CG = C // G
EPS = 1e-5
INV_COUNT = 1.0 / (CG * H * W)


@ts.kernel
def group_norm_group(
    x: ts.Tensor[[1, CG, H, W], ts.f32],
    weight: ts.Tensor[[CG], ts.f32],
    bias: ts.Tensor[[CG], ts.f32],
    y: ts.Out[[1, CG, H, W], ts.f32],
):
    total = ts.zeros([1, 1], ts.f32)
    for c in ts.range(0, CG):
        total = total + ts.row_sum(ts.col_sum(ts.load(x, [0, c, 0, 0], [1, 1, H, W])))
    mean = total * INV_COUNT
    sq = ts.zeros([1, 1], ts.f32)
    for c in ts.range(0, CG):
        d = ts.load(x, [0, c, 0, 0], [1, 1, H, W]) - mean
        sq = sq + ts.row_sum(ts.col_sum(d * d))
    inv = ts.rsqrt(sq * INV_COUNT + EPS)
    for c in ts.range(0, CG):
        d = ts.load(x, [0, c, 0, 0], [1, 1, H, W]) - mean
        ts.store(y, [0, c, 0, 0], d * inv * ts.load(weight, [c], [1]) + ts.load(bias, [c], [1]))


@ts.jit
def group_norm(
    x: ts.Tensor[[N, C, H, W], ts.f32],
    weight: ts.Tensor[[C], ts.f32],
    bias: ts.Tensor[[C], ts.f32],
    y: ts.Out[[N, C, H, W], ts.f32],
):
    for n in ts.range(0, N):
        for c in ts.range(0, C, CG):
            group_norm_group(x[n : n + 1, c : c + CG, :, :], weight[c : c + CG], bias[c : c + CG], y[n : n + 1, c : c + CG, :, :])


class ModelNew(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        if (num_features, num_groups) != (C, G):
            raise ValueError(f"this solution is written for {C} channels in {G} groups, got {num_features}, {num_groups}")
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        group_norm(x, self.gn.weight, self.gn.bias, y)
        return y
