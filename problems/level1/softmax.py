import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a Softmax over the features."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 128
dim = 1024


def get_inputs():
    x = 4 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
