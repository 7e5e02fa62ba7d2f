import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Simple model that performs a LogSigmoid activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.logsigmoid(x)


batch_size = 128
dim = 1024


def get_inputs():
    x = 3 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
