"""Scientific ML: a NeRF ray sampler, a physics-informed loss with boundary points, NaN-masked weather targets."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import composite


class TinyNeRF(nn.Module):
    """Stratified samples between the scene's near/far bounds, an MLP field, alpha compositing."""

    def __init__(self, n_samples: int = 8) -> None:
        super().__init__()
        self.n_samples = n_samples
        self.field = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, rays_o: torch.Tensor, rays_d: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
        near = float(bounds[:, 0].min())  # BREAK: the bounds can stay tensors (near + (far - near) * linspace(0, 1))
        far = float(bounds[:, 1].max())  # BREAK: as above
        t = torch.linspace(near, far, self.n_samples).expand(rays_o.shape[0], self.n_samples)
        pts = rays_o[:, None] + rays_d[:, None] * t[..., None]
        raw = self.field(pts)
        rgb, acc = composite(torch.sigmoid(raw[..., :3]), F.relu(raw[..., 3]), t)
        if (acc < 0.99).any():  # BREAK: torch.where on the 0-d condition
            rgb = rgb + (1.0 - acc)[:, None]  # white background
        return rgb


def build_nerf_sampler() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(7)
    rays_d = F.normalize(torch.randn(6, 3), dim=-1)
    bounds = torch.stack([torch.rand(6) * 0.5 + 0.1, torch.rand(6) + 1.5], -1)
    return TinyNeRF(), (torch.randn(6, 3) * 0.1, rays_d, bounds)


class PoissonPINN(nn.Module):
    """-Laplace(u) = f on the unit square (finite-difference residual), u = g on the boundary."""

    def __init__(self, h: float = 1e-2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 24), nn.Tanh(), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 1))
        self.h = h

    def u(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.h
        ex, ey = torch.tensor([h, 0.0]), torch.tensor([0.0, h])
        lap = (self.u(x + ex) + self.u(x - ex) + self.u(x + ey) + self.u(x - ey) - 4 * self.u(x)) / (h * h)
        f = 2 * torch.pi ** 2 * torch.sin(torch.pi * x[:, 0]) * torch.sin(torch.pi * x[:, 1])
        pde = (-lap - f).pow(2).mean()
        on_bd = (x.min(-1).values < 0.05) | (x.max(-1).values > 0.95)
        n_bd = int(on_bd.sum())  # BREAK: a masked mean needs no count on the host
        if n_bd == 0:
            bc = x.new_zeros(())
        else:
            bc = self.u(x[on_bd]).pow(2).mean()  # BREAK: weight by the mask instead of selecting
        return pde, bc


def build_pinn_boundary() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(8)
    return PoissonPINN(), torch.rand(40, 2)


class StationForecaster(nn.Module):
    """Predicts next-hour temperature/pressure/humidity per station; targets have NaN gaps."""

    def __init__(self, n_in: int = 9, n_vars: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 16), nn.ReLU(), nn.Linear(16, n_vars))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        pred = self.net(x)
        valid = ~torch.isnan(y)
        loss = F.mse_loss(pred[valid], y[valid])  # BREAK: torch.where on the mask and a sum over valid entries
        return {"pred": pred, "loss": loss, "n_valid": int(valid.sum())}  # BREAK must-not: a Python int is returned


def build_weather_nan() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(9)
    y = torch.randn(8, 3)
    y[torch.rand(8, 3) < 0.3] = float("nan")
    return StationForecaster(), (torch.randn(8, 9), y)
