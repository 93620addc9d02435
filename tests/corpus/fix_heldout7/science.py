"""Scientific ML: a SchNet-style interatomic energy model over a radius graph of a batch of molecules,
and a neural ODE block with an adaptive Bogacki-Shampine (RK23) integrator."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- SchNet over a radius graph


class SchNetLite(nn.Module):
    """Continuous-filter convolution on edges within a cutoff, summed into per-molecule energies."""

    def __init__(self, n_types: int = 5, d: int = 16, n_rbf: int = 12, cutoff: float = 2.5) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_types, d)
        self.filter = nn.Sequential(nn.Linear(n_rbf, d), nn.Tanh(), nn.Linear(d, d))
        self.lin1 = nn.Linear(d, d)
        self.lin2 = nn.Linear(d, d)
        self.readout = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))
        self.register_buffer("centers", torch.linspace(0.0, cutoff, n_rbf))
        self.gamma = 10.0
        self.cutoff = cutoff

    def forward(self, z: torch.Tensor, pos: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        num_graphs = int(batch.max()) + 1  # BREAK must-not: the number of molecules is read from the batch vector and sizes the returned energies
        n = z.shape[0]
        h = self.embed(z)
        dist = (pos[:, None, :] - pos[None, :, :]).norm(dim=-1)
        adj = (batch[:, None] == batch[None, :]) & (dist < self.cutoff) & ~torch.eye(n, dtype=torch.bool)
        src, dst = adj.nonzero(as_tuple=True)  # BREAK: run the filter on the dense (N, N) distance matrix and zero the non-edges with adj before summing over sources
        d = dist[src, dst]
        rbf = torch.exp(-self.gamma * (d[:, None] - self.centers) ** 2)
        envelope = 0.5 * (torch.cos(d * math.pi / self.cutoff) + 1.0)
        w = self.filter(rbf) * envelope[:, None]
        msg = self.lin1(h)[src] * w
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        h = h + self.lin2(F.softplus(agg) - math.log(2.0))
        atom_energy = self.readout(h).squeeze(-1)
        return torch.zeros(num_graphs, dtype=h.dtype).index_add_(0, batch, atom_energy)


def build_schnet_radius() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(120)
    model = SchNetLite()
    g = seeded(121)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    z = torch.randint(0, 5, (12,), generator=g)
    pos = torch.randn(12, 3, generator=g) * 1.2
    return model, (z, pos, batch)


# --------------------------------------------------------------------------- adaptive neural ODE


class ODEFunc(nn.Module):
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, dim))

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.net(y)


class AdaptiveODEBlock(nn.Module):
    """Integrate dy/dt = f(y) from 0 to t1 with embedded RK23 error control (torchdiffeq's bosh3)."""

    def __init__(self, rtol: float = 1e-3, atol: float = 1e-4) -> None:
        super().__init__()
        self.func = ODEFunc()
        self.rtol = rtol
        self.atol = atol

    def forward(self, y0: torch.Tensor, t1: float = 1.0) -> tuple[torch.Tensor, int]:
        t, h, y = 0.0, 0.05, y0
        n_steps = 0
        k1 = self.func(y)
        while t < t1:
            h = min(h, t1 - t)
            k2 = self.func(y + 0.5 * h * k1)
            k3 = self.func(y + 0.75 * h * k2)
            y_new = y + h * (2 / 9 * k1 + 1 / 3 * k2 + 4 / 9 * k3)
            k4 = self.func(y_new)
            err_vec = h * (-5 / 72 * k1 + 1 / 12 * k2 + 1 / 9 * k3 - 1 / 8 * k4)
            scale = self.atol + self.rtol * torch.maximum(y.abs(), y_new.abs())
            err = (err_vec / scale).pow(2).mean().sqrt().item()  # BREAK must-not: whether a step is accepted, and so how many steps run, depends on the error estimate
            if err <= 1.0:
                t, y, k1 = t + h, y_new, k4
                n_steps += 1
            h = h * min(5.0, max(0.2, 0.9 * max(err, 1e-10) ** (-1 / 3)))
        return y, n_steps


def build_adaptive_rk() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(122)
    model = AdaptiveODEBlock()
    return model, torch.randn(3, 4, generator=seeded(123))
