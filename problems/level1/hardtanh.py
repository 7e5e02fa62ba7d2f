import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Simple model that performs a HardTanh activation (clamped to [-1, 1])."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(x, min_val=-1.0, max_val=1.0)


batch_size = 128
dim = 1024


def get_inputs():
    x = 3 * torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
