import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs Group Normalization."""

    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 8
features = 64
num_groups = 8
dim1 = 32
dim2 = 32


def get_inputs():
    x = 1 + 2 * torch.randn(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [features, num_groups]
