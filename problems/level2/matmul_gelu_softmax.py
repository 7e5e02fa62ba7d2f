import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication (nn.Linear), GELU, then Softmax over the features."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = F.gelu(x)
        x = F.softmax(x, dim=1)
        return x


batch_size = 128
in_features = 256
out_features = 256


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
