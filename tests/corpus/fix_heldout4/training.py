"""Training-loop pieces: uncertainty-weighted multi-task loss, a sparse autoencoder that resamples dead
latents, a reconstruction anomaly detector that logs alarms."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


class MultiTaskNet(nn.Module):
    """Kendall et al. homoscedastic-uncertainty weighting; log-variances capped to keep exp() sane."""

    def __init__(self, dim: int = 10, n_cls: int = 4) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, 16), nn.ReLU())
        self.reg_head = nn.Linear(16, 2)
        self.cls_head = nn.Linear(16, n_cls)
        self.log_vars = nn.Parameter(torch.tensor([0.5, 3.0, -0.2]))
        self.max_log_var = 2.0

    def combine(self, losses: list[torch.Tensor]) -> torch.Tensor:
        total = losses[0].new_zeros(())
        for i, task_loss in enumerate(losses):
            s = self.log_vars[i]
            if s.item() > self.max_log_var:  # BREAK: clamp(max=...) is the same value and gradient
                s = s.clamp(max=self.max_log_var)
            total = total + torch.exp(-s) * task_loss + s
        return total

    def forward(self, x: torch.Tensor, y_reg: torch.Tensor, y_cls: torch.Tensor) -> dict:
        h = self.trunk(x)
        reg = self.reg_head(h)
        logits = self.cls_head(h)
        losses = [F.mse_loss(reg, y_reg), F.cross_entropy(logits, y_cls), reg.pow(2).mean()]
        return {"loss": self.combine(losses), "task_losses": torch.stack(losses).detach()}


def build_multitask_uncertainty() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(12)
    return MultiTaskNet(), (torch.randn(6, 10), torch.randn(6, 2), torch.randint(0, 4, (6,)))


class SparseAutoencoder(nn.Module):
    """A dictionary-learning SAE; latents that have not fired for too long are re-initialised."""

    def __init__(self, d: int = 8, n_latents: int = 16, dead_after: int = 10) -> None:
        super().__init__()
        self.W_enc = nn.Parameter(torch.randn(d, n_latents) * 0.3)
        self.b_enc = nn.Parameter(torch.zeros(n_latents) - 0.1)
        self.W_dec = nn.Parameter(torch.randn(n_latents, d) * 0.3)
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.dead_after, self.l1 = dead_after, 1e-2
        self.register_buffer("since_fired", torch.randint(0, 20, (n_latents,)))

    @torch.no_grad()
    def resample(self, dead: torch.Tensor) -> None:
        idx = dead.nonzero().squeeze(1)  # BREAK: torch.where over the whole weights with the dead mask
        direction = F.normalize(self.W_dec.mean(0), dim=0) * 0.2
        self.W_enc[:, idx] = direction[:, None]
        self.b_enc[idx] = 0.0
        self.since_fired[idx] = 0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        dead = self.since_fired > self.dead_after
        n_dead = int(dead.sum())  # BREAK must-not: the dead count is returned as a Python int
        if n_dead > 0:
            self.resample(dead)
        acts = F.relu((x - self.b_dec) @ self.W_enc + self.b_enc)
        recon = acts @ self.W_dec + self.b_dec
        self.since_fired.add_(1).masked_fill_((acts > 0).any(0), 0)
        loss = F.mse_loss(recon, x) + self.l1 * acts.abs().sum(-1).mean()
        return recon, loss, n_dead


def build_sae_resample() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(13)
    return SparseAutoencoder(), torch.randn(5, 8)


class ReconAnomaly(nn.Module):
    """Autoencoder reconstruction error as an anomaly score; logs and flags batches above a threshold."""

    def __init__(self, dim: int = 12, threshold: float = 0.5) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(dim, 4), nn.Tanh())
        self.dec = nn.Linear(4, dim)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        score = (self.dec(self.enc(x)) - x).pow(2).mean(-1)
        worst = score.max().item()  # BREAK must-not: the flag returned is a Python bool decided by this value
        flagged = worst > self.threshold
        if flagged:
            logger.warning("anomaly score %.4f above threshold %.4f", worst, self.threshold)  # BREAK must-not: logs the host value
        return score, flagged


def build_anomaly_threshold() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(14)
    return ReconAnomaly(), torch.randn(6, 12) * 1.5
