import torch
import torch.nn as nn


class Model(nn.Module):
    """Cross-entropy loss of multi-class logits, the mean over the targets that are not ignored
    (ignore_index -100 marks padding)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets, ignore_index=-100)


batch_size = 512
num_classes = 1000


def get_inputs():
    targets = torch.randint(0, num_classes, (batch_size,))
    targets[torch.rand(batch_size) < 0.1] = -100
    return [3 * torch.randn(batch_size, num_classes), targets]


def get_init_inputs():
    return []
