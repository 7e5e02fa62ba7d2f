import torch
import torch.nn as nn


class Model(nn.Module):
    """A reverse cumulative sum along a dimension (from the end)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x.flip(self.dim), self.dim).flip(self.dim)


batch_size = 128
input_shape = (1024,)
dim = 1


def get_inputs():
    return [torch.randn(batch_size, *input_shape)]


def get_init_inputs():
    return [dim]
