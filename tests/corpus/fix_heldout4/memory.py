"""Iterative layers: a modern Hopfield retrieval with a convergence test, capsule routing with an early stop."""

from __future__ import annotations

import torch
from torch import nn

from .helpers import squash


class HopfieldRetrieval(nn.Module):
    """xi <- softmax(beta xi X^T) X until the update is smaller than tol."""

    def __init__(self, dim: int = 8, n_patterns: int = 6, beta: float = 4.0) -> None:
        super().__init__()
        self.patterns = nn.Parameter(torch.randn(n_patterns, dim))
        self.q_proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 3)
        self.beta, self.max_iter, self.tol = beta, 12, 1e-3

    def forward(self, query: torch.Tensor) -> torch.Tensor:
        xi = self.q_proj(query)
        for _ in range(self.max_iter):
            new = torch.softmax(self.beta * xi @ self.patterns.T, -1) @ self.patterns
            delta = (new - xi).norm(dim=-1).max()
            xi = new
            if delta < self.tol:  # BREAK: freeze xi with torch.where once converged and run all iterations
                break
        return self.out(xi)


def build_hopfield() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(10)
    return HopfieldRetrieval(), torch.randn(4, 8)


def dynamic_routing(u_hat: torch.Tensor, iters: int, eps: float) -> tuple[torch.Tensor, int]:
    """Sabour et al. routing-by-agreement, stopping early when the output capsules stop moving."""
    b = torch.zeros(u_hat.shape[:3])
    v_prev = None
    used = 0
    for it in range(iters):
        c = torch.softmax(b, dim=2)
        v = squash((c[..., None] * u_hat).sum(1))
        used = it + 1
        if v_prev is not None and (v - v_prev).abs().max().item() < eps:  # BREAK must-not: the iteration count is returned as a Python int
            break
        v_prev = v
        b = b + (u_hat * v[:, None]).sum(-1)
    return v, used


class CapsuleHead(nn.Module):
    def __init__(self, n_in: int = 6, d_in: int = 4, n_out: int = 3, d_out: int = 5) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.randn(n_in, n_out, d_out, d_in) * 0.3)

    def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, int]:
        u_hat = torch.einsum("iodk,bik->biod", self.W, u)
        v, used = dynamic_routing(u_hat, iters=8, eps=0.05)
        return v.norm(dim=-1), used


def build_capsule_routing() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(11)
    return CapsuleHead(), torch.randn(2, 6, 4)
