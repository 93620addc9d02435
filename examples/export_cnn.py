"""Will it export? A small CNN with a batch Dim, and one whose code fixes the batch
(docs/export.md).

Run: python examples/export_cnn.py
or:  dynscope export examples/export_cnn.py:build
"""

from __future__ import annotations

import torch

import dynscope


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class FixedBatch(SmallCNN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return out.reshape(4, 10)  # fixes the batch to 4: a batch Dim cannot stay dynamic


def build() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[str, dict[int, object]]]:
    """What `dynscope export` runs: (model, inputs, dynamic_shapes)."""
    batch = torch.export.Dim("batch", min=2, max=256)
    return SmallCNN().eval(), (torch.randn(4, 3, 16, 16),), {"x": {0: batch}}


def main() -> tuple[dynscope.ExportReport, dynscope.ExportReport]:
    model, inputs, shapes = build()
    good = dynscope.export_report(model, inputs, dynamic_shapes=shapes)
    print(good)
    bad = dynscope.export_report(FixedBatch().eval(), inputs, dynamic_shapes=shapes)
    print(bad)
    return good, bad


if __name__ == "__main__":
    main()
