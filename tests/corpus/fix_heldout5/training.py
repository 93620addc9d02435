"""Training machinery: a learned-rate update rule, a weight-decay schedule, an EMA teacher with centring,
quantile clipping of activations, stochastic depth with a linear drop-rate ramp."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import clip_coef, cosine_schedule, drop_path, robust_threshold


class LearnedLR(nn.Module):
    """Per-tensor learned step sizes with linear warm-up and global-norm clipping; returns the query loss
    after one update of a linear probe, so the step sizes get hypergradients."""

    def __init__(self, n_tensors: int = 2, warmup: int = 5, max_norm: float = 1.0) -> None:
        super().__init__()
        self.log_lr = nn.Parameter(torch.full((n_tensors,), -2.0))
        self.register_buffer("step", torch.tensor(2))
        self.warmup, self.max_norm = warmup, max_norm

    def forward(self, weights: list[torch.Tensor], grads: list[torch.Tensor], x: torch.Tensor,
                y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        coef = clip_coef(grads, self.max_norm)
        lr = self.log_lr.exp()
        if self.step < self.warmup:  # BREAK: the warm-up factor is clamp((step + 1) / warmup, max=1)
            lr = lr * (self.step + 1) / self.warmup
        new = [w - lr[i] * coef * g for i, (w, g) in enumerate(zip(weights, grads, strict=True))]
        self.step += 1
        return F.mse_loss(x @ new[0].T + new[1], y), new


def build_learned_lr() -> tuple[nn.Module, tuple]:
    torch.manual_seed(51)
    weights = [torch.randn(3, 4), torch.randn(3)]
    grads = [torch.randn(3, 4), torch.randn(3)]
    return LearnedLR(), (weights, grads, torch.randn(6, 4), torch.randn(6, 3))


class DecayedClassifier(nn.Module):
    """Training loss with L2 decay on weight matrices only, its coefficient on a cosine schedule."""

    def __init__(self, d: int = 6, hidden: int = 10, c: int = 3, total: int = 20) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.ReLU(), nn.Linear(hidden, c))
        self.total, self.wd_start, self.wd_end = total, 1e-2, 1e-4
        self.register_buffer("step", torch.tensor(7))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        logits = self.net(x)
        task = F.cross_entropy(logits, y)
        wd = cosine_schedule(self.step, self.total, self.wd_start, self.wd_end)
        decayed = [p for name, p in self.named_parameters() if p.ndim > 1 and not name.endswith("bias")]
        l2 = sum(p.pow(2).sum() for p in decayed)
        self.step += 1
        return {"loss": task + 0.5 * wd * l2, "logits": logits}


def build_wd_schedule() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(52)
    return DecayedClassifier(), (torch.randn(8, 6), torch.randint(0, 3, (8,)))


class EMATeacher(nn.Module):
    """Self-distillation: a momentum teacher (cosine momentum ramp) with centred, sharpened targets."""

    def __init__(self, d: int = 6, hidden: int = 12, c: int = 5, total: int = 40, base: float = 0.99) -> None:
        super().__init__()
        self.student = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, c))
        self.teacher = copy.deepcopy(self.student).requires_grad_(False)
        self.total, self.base = total, base
        self.register_buffer("step", torch.tensor(6))
        self.register_buffer("center", torch.zeros(c))
        self.register_buffer("center_ready", torch.tensor(False))

    @torch.no_grad()
    def _momentum_update(self) -> None:
        m = 1 - (1 - self.base) * (math.cos(math.pi * self.step.item() / self.total) + 1) / 2  # BREAK: torch.cos of the step tensor; add (1 - m) * p
        for pt, ps in zip(self.teacher.parameters(), self.student.parameters(), strict=True):
            pt.mul_(m).add_(ps, alpha=1 - m)
        self.step += 1

    def forward(self, x_weak: torch.Tensor, x_strong: torch.Tensor) -> dict:
        self._momentum_update()
        s = self.student(x_strong)
        with torch.no_grad():
            t = self.teacher(x_weak)
            if self.center_ready:  # BREAK: a where on the flag picks the running or the first centre
                self.center.mul_(0.9).add_(0.1 * t.mean(0))
            else:
                self.center.copy_(t.mean(0))
                self.center_ready.fill_(True)
            targets = F.softmax((t - self.center) / 0.04, -1)
        loss = -(targets * F.log_softmax(s / 0.1, -1)).sum(-1).mean()
        return {"loss": loss, "targets": targets}


def build_ema_teacher() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(53)
    model = EMATeacher()
    with torch.no_grad():  # a few optimiser steps in: the student has moved away from the teacher
        for p in model.student.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(8, 6)
    return model, (x, x + 0.1 * torch.randn(8, 6))


class QuantileClippedMLP(nn.Module):
    """Hidden activations are clipped at a batch quantile of their magnitude; the clip count is tracked."""

    def __init__(self, d: int = 8, hidden: int = 16, q: float = 0.9) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, 2)
        self.q = q
        self.register_buffer("clip_count", torch.tensor(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc1(x))
        thr = robust_threshold(h, self.q)
        self.clip_count += int((h.abs() > thr).sum())  # BREAK: the buffer can add the count tensor
        return self.fc2(h.clamp(-thr, thr))


def build_quantile_clip() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(54)
    return QuantileClippedMLP(), (torch.randn(6, 8) * 2,)


class DropPathStack(nn.Module):
    """Pre-norm residual MLP blocks with stochastic depth whose rate grows linearly with depth (timm style)."""

    def __init__(self, d: int = 8, depth: int = 4, drop: float = 0.3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU()) for _ in range(depth))
        self.drop_rates = torch.linspace(0, drop, depth)
        self.head = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rates = self.drop_rates.tolist()  # BREAK: the rates are constants: make them a Python list once, in __init__
        for block, p in zip(self.blocks, rates, strict=True):
            x = x + drop_path(block(x), p, self.training)
        return self.head(x)


def build_stochastic_depth() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(55)
    return DropPathStack(), (torch.randn(6, 8),)
