import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A matrix multiplication (nn.Linear), Layer Normalization over its features, then GELU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.ln = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = self.ln(x)
        return F.gelu(x)


batch_size = 128
in_features = 256
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
