import torch
import torch.nn as nn


class Model(nn.Module):
    """Standard 2D convolution: a square 3x3 kernel, stride 1, padding 1 (the output keeps the input's
    height and width)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int = 1, bias: bool = True):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 4
in_channels = 16
out_channels = 32
kernel_size = 3
height = 32
width = 32


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
