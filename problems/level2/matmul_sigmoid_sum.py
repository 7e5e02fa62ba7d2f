import torch
import torch.nn as nn


class Model(nn.Module):
    """A matrix multiplication (nn.Linear), a sigmoid, and a sum over the hidden features (kept)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(input_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = torch.sigmoid(x)
        x = torch.sum(x, dim=1, keepdim=True)
        return x


batch_size = 128
input_size = 256
hidden_size = 128


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
