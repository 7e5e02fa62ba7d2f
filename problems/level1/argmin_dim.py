import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a Argmin over one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmin(x, dim=self.dim)


batch_size = 128
dim1 = 1024


def get_inputs():
    x = torch.randn(batch_size, dim1)
    return [x]


def get_init_inputs():
    return [1]
