"""Model compression: a quantization-aware linear layer with min/max observers, magnitude pruning."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MinMaxObserver(nn.Module):
    """Tracks the running range of what passes through it, as Python floats."""

    def __init__(self) -> None:
        super().__init__()
        self.min_val = float("inf")
        self.max_val = float("-inf")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.min_val = min(self.min_val, x.detach().min().item())  # BREAK: keep the running min in a buffer (torch.minimum)
        self.max_val = max(self.max_val, x.detach().max().item())  # BREAK: keep the running max in a buffer (torch.maximum)
        return x

    def calculate_qparams(self):
        scale = max(self.max_val - self.min_val, 1e-8) / 255.0
        zero_point = min(255, max(0, round(-self.min_val / scale)))
        return scale, zero_point


def fake_quantize(x: torch.Tensor, scale, zero_point) -> torch.Tensor:
    q = torch.clamp(torch.round(x / scale) + zero_point, 0, 255)
    return x + ((q - zero_point) * scale - x).detach()  # straight-through estimator


class QATLinear(nn.Module):
    def __init__(self, in_f: int, out_f: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_f, out_f)
        self.act_observer = MinMaxObserver()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.act_observer(x)
        x_q = fake_quantize(x, *self.act_observer.calculate_qparams())
        return self.linear(x_q)


class QATMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = QATLinear(8, 16), QATLinear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def build_quant_observer():
    torch.manual_seed(15)
    return QATMLP(), (torch.randn(6, 8),)


class MagnitudePrunedLinear(nn.Module):
    """Prunes the smallest-magnitude fraction of its weight on every forward (gradual pruning)."""

    def __init__(self, in_f: int, out_f: int, amount: float = 0.5) -> None:
        super().__init__()
        self.amount = amount
        self.weight = nn.Parameter(torch.randn(out_f, in_f) * 0.4)
        self.bias = nn.Parameter(torch.zeros(out_f))

    def forward(self, x: torch.Tensor):
        w = self.weight.detach().abs().flatten()
        k = int(self.amount * w.numel())
        threshold = w.kthvalue(k).values.item()  # BREAK: compare against the kthvalue tensor
        mask = (self.weight.abs() > threshold).to(self.weight.dtype)
        sparsity = float((mask == 0).float().mean())  # BREAK must-not: the sparsity is returned as a Python float for the schedule
        return F.linear(x, self.weight * mask, self.bias), sparsity


class PrunedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = MagnitudePrunedLinear(8, 12)
        self.fc2 = nn.Linear(12, 2)

    def forward(self, x: torch.Tensor):
        h, sparsity = self.fc1(x)
        return self.fc2(torch.relu(h)), sparsity


def build_magnitude_pruning():
    torch.manual_seed(16)
    return PrunedNet(), (torch.randn(5, 8),)
