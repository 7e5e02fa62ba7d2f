import torch
import torch.nn as nn


class Model(nn.Module):
    """A classifier head (nn.Linear) and its cross-entropy loss against class targets, the mean over
    the targets that are not ignored (ignore_index -100 marks padding)."""

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.linear(x), targets, ignore_index=-100)


batch_size = 256
in_features = 256
num_classes = 512


def get_inputs():
    targets = torch.randint(0, num_classes, (batch_size,))
    targets[torch.rand(batch_size) < 0.1] = -100
    return [torch.randn(batch_size, in_features), targets]


def get_init_inputs():
    return [in_features, num_classes]
