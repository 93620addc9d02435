"""Physics: a learned force field integrated with symplectic Euler, particles bouncing off the walls of a box."""

from __future__ import annotations

import torch
from torch import nn


class BouncingParticles(nn.Module):
    """Rolls particles forward a few substeps; returns the trajectory. Logs the kinetic energy of each call."""

    def __init__(self, dim: int = 2, hidden: int = 16, substeps: int = 4, dt: float = 0.1, restitution: float = 0.8) -> None:
        super().__init__()
        self.force = nn.Sequential(nn.Linear(2 * dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.substeps, self.dt, self.restitution = substeps, dt, restitution
        self.energy_log: list[float] = []

    def _bounce(self, pos: torch.Tensor, vel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = (pos < 0) | (pos > 1)
        if not out.any():  # BREAK: the reflections below leave in-box particles unchanged, so always apply them
            return pos, vel
        pos = torch.where(pos < 0, -pos, torch.where(pos > 1, 2 - pos, pos))
        vel = torch.where(out, -self.restitution * vel, vel)
        return pos, vel

    def forward(self, pos: torch.Tensor, vel: torch.Tensor) -> torch.Tensor:
        self.energy_log.append(float(0.5 * (vel**2).sum()))  # BREAK must-not: callers read the log as Python floats
        traj = []
        for _ in range(self.substeps):
            vel = vel + self.dt * self.force(torch.cat([pos, vel], -1))
            pos = pos + self.dt * vel
            pos, vel = self._bounce(pos, vel)
            traj.append(pos)
        return torch.stack(traj)


def build_particle_bounce() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(71)
    return BouncingParticles(), (torch.rand(6, 2) * 0.8 + 0.1, torch.randn(6, 2) * 1.5)
