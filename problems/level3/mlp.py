import torch
import torch.nn as nn


class Model(nn.Module):
    """A multi-layer perceptron: Linear and ReLU per hidden layer, then a Linear output layer."""

    def __init__(self, input_size: int, layer_sizes: list, output_size: int):
        super().__init__()
        layers = []
        current = input_size
        for size in layer_sizes:
            layers.append(nn.Linear(current, size))
            layers.append(nn.ReLU())
            current = size
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


batch_size = 64
input_size = 256
layer_sizes = [512]
output_size = 128


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]
