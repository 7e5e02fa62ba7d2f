import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 2D convolution: each channel convolved with its own 3x3 kernel (groups = channels)."""

    def __init__(self, channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = True):
        super().__init__()
        self.conv2d = nn.Conv2d(channels, channels, kernel_size, stride=stride, padding=padding, groups=channels, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 4
channels = 32
kernel_size = 3
height = 32
width = 32
stride = 1
padding = 1


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size, stride, padding]
