import torch
import torch.nn as nn


class Model(nn.Module):
    """Performs batched matrix multiplication (C = A * B) where A, B and C have the same batch dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 8
m = 64
k = 128
n = 96


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []
