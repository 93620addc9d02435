"""Metrics computed inside the model's forward: the binned expected calibration error of a temperature-scaled
classifier (the loop from the temperature-scaling reference code), and a binary AUROC the sklearn way
(distinct thresholds, cumulative counts, trapezoid) next to the training loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- ECE of a temperature-scaled model


class TemperatureScaledECE(nn.Module):
    def __init__(self, n_bins: int = 10) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(1.5))
        boundaries = torch.linspace(0, 1, n_bins + 1)
        self.register_buffer("bin_lowers", boundaries[:-1])
        self.register_buffer("bin_uppers", boundaries[1:])

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scaled = logits / self.temperature
        nll = F.cross_entropy(scaled, labels)
        confidences, predictions = torch.max(F.softmax(scaled, dim=1), 1)
        accuracies = predictions.eq(labels)
        ece = torch.zeros(1)
        for bin_lower, bin_upper in zip(self.bin_lowers, self.bin_uppers, strict=True):
            in_bin = confidences.gt(bin_lower.item()) * confidences.le(bin_upper.item())  # BREAK: compare against all bins at once as (n_bins, N) masks; per-bin counts/sums, torch.where for empty bins
            prop_in_bin = in_bin.float().mean()
            if prop_in_bin.item() > 0:
                accuracy_in_bin = accuracies[in_bin].float().mean()
                avg_confidence_in_bin = confidences[in_bin].mean()
                ece += torch.abs(avg_confidence_in_bin - accuracy_in_bin) * prop_in_bin
        return nll, ece


def build_ece_binned() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(170)
    model = TemperatureScaledECE()
    g = seeded(171)
    labels = torch.randint(0, 5, (64,), generator=g)
    logits = torch.randn(64, 5, generator=g) * 2.0 + 2.5 * F.one_hot(labels, 5)
    return model, (logits, labels)


# --------------------------------------------------------------------------- AUROC


def binary_auroc(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """sklearn.metrics.roc_auc_score for one binary task."""
    order = torch.argsort(scores, descending=True)
    s = scores[order]
    y = labels[order].float()
    distinct = torch.where(s[1:] != s[:-1])[0]  # BREAK: count pairs instead: AUROC = P(score_pos > score_neg) + P(tie) / 2 over all positive/negative pairs
    threshold_idxs = torch.cat([distinct, torch.tensor([y.numel() - 1])])
    tps = torch.cumsum(y, 0)[threshold_idxs]
    fps = 1 + threshold_idxs - tps
    tps = torch.cat([tps.new_zeros(1), tps])
    fps = torch.cat([fps.new_zeros(1), fps])
    return torch.trapezoid(tps / tps[-1], fps / fps[-1])


class ScorerWithAUROC(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(x).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(logits, y.float())
        scores = torch.round(torch.sigmoid(logits) * 50) / 50  # scores are reported at 0.02 resolution
        return loss, binary_auroc(scores.detach(), y)


def build_auroc() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(172)
    model = ScorerWithAUROC()
    g = seeded(173)
    y = torch.randint(0, 2, (40,), generator=g)
    x = torch.randn(40, 5, generator=g) + y[:, None].float() * 0.8
    return model, (x, y)
