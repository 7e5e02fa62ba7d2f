import torch
import torch.nn as nn


class Model(nn.Module):
    """A matrix multiplication (nn.Linear), a scaling, and a residual addition of the unscaled result."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.matmul(x)
        original_x = x.clone().detach()
        x = x * self.scaling_factor
        x = x + original_x
        return x


batch_size = 128
in_features = 256
out_features = 256
scaling_factor = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
