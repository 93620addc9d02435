"""Training-loop pieces: a self-paced curriculum loss with a percentile threshold, a WGAN critic with weight
clipping every few steps, FGSM adversarial training, a LoRA adapter warmed up on a step counter, and a
Gumbel-softmax quantiser whose temperature is annealed with the step."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean, warmup_factor


class SelfPacedLoss(nn.Module):
    """Self-paced learning: per-sample cross-entropy, only samples under a loss percentile that grows with the
    epoch count; every call's loss is appended to ``loss_log`` for the trainer's progress bar."""

    def __init__(self, n_in: int = 6, n_cls: int = 3, start_pct: float = 50.0, growth: float = 10.0) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(n_in, 12), nn.ReLU(), nn.Linear(12, n_cls))
        self.start_pct, self.growth = start_pct, growth
        self.register_buffer("epoch", torch.tensor(2))
        self.loss_log: list[float] = []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        per = F.cross_entropy(self.model(x), y, reduction="none")
        pct = min(100.0, self.start_pct + self.growth * self.epoch.item())  # BREAK: the percentile can stay a tensor, clamped at 100
        thr = torch.quantile(per.detach(), pct / 100.0)
        loss = masked_mean(per, per <= thr)
        self.loss_log.append(loss.item())  # BREAK must-not: the trainer reads the log as Python floats
        return loss


def build_curriculum() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(617)
    return SelfPacedLoss(), (torch.randn(16, 6), torch.randint(0, 3, (16,)))


class ClippedCritic(nn.Module):
    """WGAN critic loss; every ``clip_every``-th call first clips the critic's weights to [-c, c]."""

    def __init__(self, dim: int = 6, c: float = 0.05, clip_every: int = 5) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        self.c, self.clip_every = c, clip_every
        self.register_buffer("step", torch.tensor(10))

    def forward(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        if self.step.item() % self.clip_every == 0:  # BREAK: a torch.where on the step test clips (or keeps) each weight the same way
            for p in self.net.parameters():
                p.data.clamp_(-self.c, self.c)
        self.step += 1
        return self.net(fake).mean() - self.net(real).mean()


def build_wgan_clip() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(618)
    return ClippedCritic(), (torch.randn(8, 6) + 1, torch.randn(8, 6))


class FGSMTraining(nn.Module):
    """Fast adversarial training: an FGSM perturbation from the input gradient, then the clean plus
    adversarial cross-entropy."""

    def __init__(self, n_in: int = 8, n_cls: int = 4, eps: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 16), nn.ReLU(), nn.Linear(16, n_cls))
        self.eps = eps

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_adv = x.clone().detach().requires_grad_(True)  # BREAK: torch.func.grad takes the input gradient without a leaf that requires grad
        grad, = torch.autograd.grad(F.cross_entropy(self.net(x_adv), y), x_adv)  # BREAK: torch.func.grad gives the same input gradient
        x_adv = (x + self.eps * grad.sign()).clamp(0, 1)
        return F.cross_entropy(self.net(x), y) + F.cross_entropy(self.net(x_adv), y)


def build_fgsm() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(619)
    return FGSMTraining(), (torch.rand(10, 8), torch.randint(0, 4, (10,)))


class WarmupLoRA(nn.Module):
    """A frozen-size linear layer plus a low-rank adapter whose residual is scaled by a linear warm-up on a
    step counter that stops counting once the warm-up is over."""

    def __init__(self, dim: int = 10, rank: int = 2, warmup: int = 6) -> None:
        super().__init__()
        self.base = nn.Linear(dim, dim)
        self.down, self.up = nn.Linear(dim, rank, bias=False), nn.Linear(rank, dim, bias=False)
        self.warmup = warmup
        self.register_buffer("step", torch.tensor(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x) + warmup_factor(self.step, self.warmup) * self.up(self.down(x))
        if self.step < self.warmup:  # BREAK: adding the comparison as 0/1 counts the same steps
            self.step += 1
        return out


def build_warmup_lora() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(620)
    return WarmupLoRA(), torch.randn(4, 10)


class AnnealedGumbelQuantizer(nn.Module):
    """Gumbel-softmax style code assignment (relaxed, noiseless for evaluation) with tau = max(tau_min,
    tau0 * exp(-rate * step)), plus a diversity bonus warmed up over the first steps."""

    def __init__(self, dim: int = 8, n_codes: int = 6, tau0: float = 2.0, tau_min: float = 0.5,
                 rate: float = 0.1, warmup: int = 10) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, n_codes)
        self.codes = nn.Parameter(torch.randn(n_codes, dim))
        self.tau0, self.tau_min, self.rate, self.warmup = tau0, tau_min, rate, warmup
        self.register_buffer("step", torch.tensor(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tau = max(self.tau_min, self.tau0 * math.exp(-self.rate * self.step.item()))  # BREAK: tau can be a tensor clamped at tau_min
        probs = F.softmax(self.proj(x) / tau, -1)
        avg = probs.mean(0)
        diversity = (avg * torch.log(avg + 1e-9)).sum()
        return probs @ self.codes, warmup_factor(self.step, self.warmup) * diversity


def build_temp_anneal() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(621)
    return AnnealedGumbelQuantizer(), torch.randn(9, 8)
