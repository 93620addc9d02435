"""Time series: a DLinear forecaster (trend/seasonal split by moving average) wrapped in RevIN
instance normalisation, fed by sensors that drop samples (NaN) and channels that flat-line."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import nan_guard, seeded


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al. 2022) with a floor on the per-series scale."""

    def __init__(self, n_vars: int, eps: float = 1e-5, min_std: float = 1e-2) -> None:
        super().__init__()
        self.eps = eps
        self.min_std = min_std
        self.affine_weight = nn.Parameter(torch.ones(n_vars))
        self.affine_bias = nn.Parameter(torch.zeros(n_vars))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        self.mean = x.mean(1, keepdim=True).detach()
        std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + self.eps)
        if (std < self.min_std).any():  # BREAK: clamp(min=self.min_std) unconditionally: a no-op for series above the floor
            std = std.clamp(min=self.min_std)
        self.stdev = std.detach()
        return (x - self.mean) / self.stdev * self.affine_weight + self.affine_bias

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        y = (y - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return y * self.stdev + self.mean


class DLinear(nn.Module):
    def __init__(self, seq_len: int = 24, pred_len: int = 6, n_vars: int = 3, kernel: int = 5) -> None:
        super().__init__()
        self.revin = RevIN(n_vars)
        self.kernel = kernel
        self.linear_seasonal = nn.Linear(seq_len, pred_len)
        self.linear_trend = nn.Linear(seq_len, pred_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, pred_len, C)
        x = nan_guard(x)
        x = self.revin.normalize(x)
        pad = (self.kernel - 1) // 2
        padded = torch.cat([x[:, :1].expand(-1, pad, -1), x, x[:, -1:].expand(-1, pad, -1)], dim=1)
        trend = F.avg_pool1d(padded.transpose(1, 2), self.kernel, stride=1).transpose(1, 2)
        seasonal = x - trend
        y = self.linear_seasonal(seasonal.transpose(1, 2)) + self.linear_trend(trend.transpose(1, 2))
        return self.revin.denormalize(y.transpose(1, 2))


def build_revin_dlinear() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(130)
    model = DLinear()
    g = seeded(131)
    t = torch.arange(24, dtype=torch.float32)
    x = torch.sin(t / 3.0)[None, :, None] + 0.1 * torch.randn(4, 24, 3, generator=g)
    x[1, :, 2] = 7.5  # a flat-lined channel
    x[2, 10, 0] = float("nan")  # a dropped sample
    return model, x
