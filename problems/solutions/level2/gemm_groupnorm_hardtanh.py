"""Linear, GroupNorm and HardTanh in one kernel: each task computes one group's 64 features of 16
rows (the gemm tiled by group, so a task holds exactly the values its statistics need), then the
group's mean and variance per row, the affine weight and bias, and the clamp. The 1-D bias and
norm parameters load as [64] tiles, which broadcast along the rows."""

import torch
import torch.nn as nn

import tilescope as ts

BATCH, IN, OUT, G = 128, 256, 512, 8
CG = OUT // G
BM, BK = 16, 64
EPS = 1e-5


def build(lo: float, hi: float):
    @ts.kernel
    def gemm_groupnorm_hardtanh_group(
        x: ts.Tensor[[BM, IN], ts.f32],
        w: ts.Tensor[[CG, IN], ts.f32],
        bias: ts.Tensor[[CG], ts.f32],
        gamma: ts.Tensor[[CG], ts.f32],
        beta: ts.Tensor[[CG], ts.f32],
        y: ts.Out[[BM, CG], ts.f32],
    ):
        acc = ts.zeros([BM, CG], ts.f32)
        for k in ts.range(0, IN, BK):
            acc = acc + ts.matmul(ts.load(x, [0, k], [BM, BK]), ts.load(w, [0, k], [CG, BK]), transpose_b=True)
        h = acc + ts.load(bias, [0], [CG])
        d = h - ts.row_mean(h)
        n = d * ts.rsqrt(ts.row_mean(d * d) + EPS)
        ts.store(y, [0, 0], ts.hardtanh(n * ts.load(gamma, [0], [CG]) + ts.load(beta, [0], [CG]), lo, hi))

    @ts.jit
    def gemm_groupnorm_hardtanh(
        x: ts.Tensor[[BATCH, IN], ts.f32],
        w: ts.Tensor[[OUT, IN], ts.f32],
        bias: ts.Tensor[[OUT], ts.f32],
        gamma: ts.Tensor[[OUT], ts.f32],
        beta: ts.Tensor[[OUT], ts.f32],
        y: ts.Out[[BATCH, OUT], ts.f32],
    ):
        for i in ts.range(0, BATCH, BM):
            for g in ts.range(0, OUT, CG):
                gemm_groupnorm_hardtanh_group(
                    x[i : i + BM, :], w[g : g + CG, :], bias[g : g + CG], gamma[g : g + CG], beta[g : g + CG],
                    y[i : i + BM, g : g + CG],
                )  # fmt: skip

    return gemm_groupnorm_hardtanh


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, num_groups: int, hardtanh_min: float, hardtanh_max: float):
        super().__init__()
        if (in_features, out_features, num_groups) != (IN, OUT, G):
            raise ValueError(f"this solution is written for {IN} -> {OUT} features in {G} groups")
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.program = build(hardtanh_min, hardtanh_max)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty(x.shape[0], OUT)
        gn = self.group_norm
        self.program(x, self.gemm.weight, self.gemm.bias, gn.weight, gn.bias, y)
        return y
