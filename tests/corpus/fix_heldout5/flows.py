"""Continuous models: a RealNVP flow in logit space with an invertibility check, a neural ODE with a capped Euler step."""

from __future__ import annotations

import math

import torch
from torch import nn

from .helpers import clamp_unit


class AffineCoupling(nn.Module):
    """y_b = x_b * exp(s(x_a)) + t(x_a); which half conditions alternates with ``flip``."""

    def __init__(self, dim: int, hidden: int, flip: bool) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim // 2, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.flip = flip

    def _halves(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = x.chunk(2, -1)
        return (b, a) if self.flip else (a, b)

    def _join(self, cond: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
        return torch.cat([moved, cond] if self.flip else [cond, moved], -1)

    def _st(self, cond: torch.Tensor, cap) -> tuple[torch.Tensor, torch.Tensor]:
        s, t = self.net(cond).chunk(2, -1)
        return torch.tanh(s / cap) * cap, t

    def forward(self, x: torch.Tensor, cap) -> tuple[torch.Tensor, torch.Tensor]:
        cond, moved = self._halves(x)
        s, t = self._st(cond, cap)
        return self._join(cond, moved * s.exp() + t), s.sum(-1)

    def inverse(self, y: torch.Tensor, cap) -> torch.Tensor:
        cond, moved = self._halves(y)
        s, t = self._st(cond, cap)
        return self._join(cond, (moved - t) * torch.exp(-s))


class RealNVP(nn.Module):
    def __init__(self, dim: int = 4, hidden: int = 16, n_layers: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(AffineCoupling(dim, hidden, flip=i % 2 == 1) for i in range(n_layers))
        self.register_buffer("scale_cap", torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> dict:
        x = clamp_unit(x)
        z = torch.log(x) - torch.log1p(-x)
        logdet = -(torch.log(x) + torch.log1p(-x)).sum(-1)
        cap = float(self.scale_cap)  # BREAK: the soft clamp divides and multiplies by the buffer itself
        for layer in self.layers:
            z, ld = layer(z, cap)
            logdet = logdet + ld
        log_prob = -0.5 * (z**2).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi) + logdet
        with torch.no_grad():
            back = z
            for layer in reversed(self.layers):
                back = layer.inverse(back, cap)
            recon = torch.sigmoid(back)
        recon_err = (recon - x).abs().max().item()  # BREAK must-not: the error is returned as a Python float
        return {"nll": -log_prob.mean(), "z": z, "recon_err": recon_err}


def build_realnvp_invert() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(11)
    x = torch.rand(16, 4) * 1.02 - 0.01  # dequantised pixels, a few just outside [0, 1]
    return RealNVP(), (x,)


class ODEFunc(nn.Module):
    """dy/dt = f(y) - damping * y: a learned field with linear damping toward the origin."""

    def __init__(self, dim: int, hidden: int, damping: float = 0.5) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.damping = damping

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.net(y) - self.damping * y


class CappedEulerODE(nn.Module):
    """Explicit Euler whose step shrinks so no state moves more than ``max_change`` per step."""

    def __init__(self, dim: int = 4, hidden: int = 16, steps: int = 6, dt: float = 0.2, max_change: float = 0.3) -> None:
        super().__init__()
        self.func = ODEFunc(dim, hidden)
        self.head = nn.Linear(dim, 2)
        self.steps, self.dt, self.max_change = steps, dt, max_change

    def forward(self, y0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = y0
        kinetic = y0.new_zeros(())
        for _ in range(self.steps):
            k = self.func(y)
            kmax = float(k.abs().max())  # BREAK: min(dt, max_change / kmax) on the detached max keeps the step a constant
            dt = self.dt if kmax * self.dt <= self.max_change else self.max_change / kmax
            y = y + dt * k
            kinetic = kinetic + dt * k.pow(2).mean()
        return self.head(y), kinetic


def build_ode_capped_euler() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(12)
    return CappedEulerODE(), (torch.randn(5, 4) * 2,)
