"""Tabular and federated: a CTR model calibrated by histogram binning, a normaliser whose running stats and
per-column scale are set up from the first batch, FedAvg with clipped client updates, and an MC-dropout
regressor whose uncertainty is bucketed with numpy."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import nan_guard


class HistogramBinningCTR(nn.Module):
    """Logistic CTR model; its scores are calibrated by histogram binning fitted on the batch (each bin's score
    is replaced by the bin's click rate).  Returns calibrated and raw probabilities and the ECE as a float."""

    def __init__(self, n_features: int = 6, n_bins: int = 5) -> None:
        super().__init__()
        self.ctr = nn.Sequential(nn.Linear(n_features, 8), nn.ReLU(), nn.Linear(8, 1))
        self.n_bins = n_bins

    def _bin_stats(self, p: torch.Tensor, clicks: torch.Tensor, bins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rates, conf = p.new_zeros(self.n_bins), p.new_zeros(self.n_bins)
        for b in range(self.n_bins):
            in_bin = bins == b
            if in_bin.any():  # BREAK: bincount and scatter_add give every bin's rate and mean score at once
                rates[b] = clicks[in_bin].mean()
                conf[b] = p[in_bin].mean()
        return rates, conf

    def forward(self, x: torch.Tensor, clicks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
        p = torch.sigmoid(self.ctr(x)).squeeze(-1)
        bins = (p.detach() * self.n_bins).long().clamp(max=self.n_bins - 1)
        rates, conf = self._bin_stats(p, clicks, bins)
        frac = F.one_hot(bins, self.n_bins).sum(0).to(p.dtype) / len(p)
        ece = (frac * (conf - rates).abs()).sum()
        return rates[bins], p, float(ece)  # BREAK must-not: the caller gets the ECE as a Python float


def build_ctr_calib() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(613)
    x = torch.randn(40, 6) * 2
    model = HistogramBinningCTR()
    with torch.no_grad():
        model.ctr[2].weight.mul_(4.0)  # a trained model's scores spread over most bins
    return model, (x, (torch.rand(40) < torch.sigmoid(x[:, 0])).float())


class LazyTabularNormalizer(nn.Module):
    """Numeric-column standardiser for a tabular MLP that is built without knowing the number of columns: the
    running stats and a per-column scale are created from the first batch; missing cells are zero-filled."""

    def __init__(self, hidden: int = 8, momentum: float = 0.1) -> None:
        super().__init__()
        self.register_buffer("running_mean", None)
        self.register_buffer("running_var", None)
        self.col_scale: nn.Parameter | None = None
        self.momentum = momentum
        self.head = nn.Sequential(nn.LazyLinear(hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nan_guard(x)
        if self.running_mean is None:
            self.running_mean = x.mean(0).detach()
            self.running_var = x.var(0).detach()
            self.col_scale = nn.Parameter(torch.ones(x.shape[1]))  # BREAK: the parameter can be made in __init__ from the column count
        else:
            self.running_mean.lerp_(x.mean(0).detach(), self.momentum)
            self.running_var.lerp_(x.var(0).detach(), self.momentum)
        z = (x - self.running_mean) / (self.running_var + 1e-5).sqrt() * self.col_scale
        return self.head(z)


def build_tab_norm() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(614)
    x = torch.randn(16, 5) * torch.tensor([1.0, 10.0, 0.1, 3.0, 1.0]) + 2
    x[3, 1], x[9, 4] = float("nan"), float("nan")
    return LazyTabularNormalizer(), x


class FedAvgServer(nn.Module):
    """FedAvg on the server: client updates weighted by their sample counts, each update clipped to a norm
    bound first (DP-FedAvg), applied with a learned server learning rate."""

    def __init__(self, dim: int = 10, clip: float = 1.0) -> None:
        super().__init__()
        self.global_w = nn.Parameter(torch.randn(dim))
        self.server_lr = nn.Parameter(torch.tensor(0.8))
        self.clip = clip

    def forward(self, deltas: torch.Tensor, n_samples: torch.Tensor) -> torch.Tensor:
        counts = [int(n) for n in n_samples]  # BREAK: the weights can be the count tensor over its sum
        total = sum(counts)
        agg = torch.zeros_like(self.global_w)
        for delta, c in zip(deltas, counts, strict=True):
            norm = float(delta.norm())  # BREAK: a clamped scale factor over the norm tensor clips the same updates
            if norm > self.clip:
                delta = delta * (self.clip / norm)
            agg = agg + (c / total) * delta
        return self.global_w + self.server_lr * agg


def build_fed_avg() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(615)
    return FedAvgServer(), (torch.randn(4, 10) * torch.tensor([[0.1], [0.5], [1.0], [0.2]]), torch.tensor([120, 40, 300, 75]))


class MCDropoutRegressor(nn.Module):
    """MC-dropout: several stochastic passes give the predictive mean; each input's log spread is bucketed
    (np.digitize) into referral levels."""

    def __init__(self, n_in: int = 5, hidden: int = 16, passes: int = 6, p: float = 0.3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(p), nn.Linear(hidden, 2))
        self.passes = passes
        self.edges = np.array([-3.0, -2.0, -1.0, 0.0])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        samples = torch.stack([self.net(x) for _ in range(self.passes)])
        spread = np.log(samples.std(0).detach().numpy() + 1e-6).mean(axis=-1)
        level = torch.from_numpy(np.digitize(spread, self.edges))  # BREAK: torch.bucketize(right=True) is np.digitize
        return samples.mean(0), level


def build_mc_dropout() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(616)
    return MCDropoutRegressor(), torch.randn(10, 5)
