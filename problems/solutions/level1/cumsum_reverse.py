"""A running sum along each row from its end ([128, 1024], dim 1): one task per block of rows."""

import torch
import torch.nn as nn

import tilescope as ts

ROWS, COLS, BLOCK = 128, 1024, 16


@ts.kernel
def cumsum_reverse_rows(x: ts.Tensor[[BLOCK, COLS], ts.f32], y: ts.Out[[BLOCK, COLS], ts.f32]):
    t = ts.load(x, [0, 0], [BLOCK, COLS])
    ts.store(y, [0, 0], ts.cumsum(t, dim=-1, reverse=True))


@ts.jit
def cumsum_reverse(x: ts.Tensor[[ROWS, COLS], ts.f32], y: ts.Out[[ROWS, COLS], ts.f32]):
    for r in ts.range(0, ROWS, BLOCK):
        cumsum_reverse_rows(x[r : r + BLOCK, :], y[r : r + BLOCK, :])


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim != 1:
            raise ValueError(f"this solution scans dim 1, got dim={dim}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        cumsum_reverse(x, y)
        return y
