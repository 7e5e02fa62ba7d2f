import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a matrix multiplication of bf16 matrices (C = A * B), in bf16."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 128
K = 256
N = 128


def get_inputs():
    A = torch.randn(M, K, dtype=torch.bfloat16)
    B = torch.randn(K, N, dtype=torch.bfloat16)
    return [A, B]


def get_init_inputs():
    return []
