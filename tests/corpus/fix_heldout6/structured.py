"""Matching, codebooks and pooling: a SuperGlue-style Sinkhorn matcher with a convergence check, a VQ codebook
that resets dead codes, a multi-similarity miner for metric learning, and top-k graph pooling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinkhorn(cost: torch.Tensor, a: torch.Tensor, b: torch.Tensor, eps: float, max_iter: int, tol: float) -> torch.Tensor:
    """Entropic OT plan between marginals a and b; stops once the row marginals are met within tol."""
    K = torch.exp(-cost / eps)
    u, v = torch.ones_like(a), torch.ones_like(b)
    for _ in range(max_iter):
        u = a / (K @ v)
        v = b / (K.T @ u)
        if (u * (K @ v) - a).abs().sum() < tol:  # BREAK: freezing u and v with torch.where once converged gives the same plan
            break
    return u[:, None] * K * v[None, :]


class SinkhornMatcher(nn.Module):
    """Projects two keypoint descriptor sets, matches them with Sinkhorn on a cosine cost, returns the plan and
    the negative log-likelihood of the ground-truth matches."""

    def __init__(self, dim: int = 8, eps: float = 0.1, max_iter: int = 30, tol: float = 1e-3) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.eps, self.max_iter, self.tol = eps, max_iter, tol

    def forward(self, d0: torch.Tensor, d1: torch.Tensor, gt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f0, f1 = F.normalize(self.proj(d0), dim=-1), F.normalize(self.proj(d1), dim=-1)
        n, m = f0.shape[0], f1.shape[0]
        plan = sinkhorn(1 - f0 @ f1.T, torch.full((n,), 1 / n), torch.full((m,), 1 / m), self.eps, self.max_iter, self.tol)
        return plan, -torch.log(plan[gt[:, 0], gt[:, 1]] * n + 1e-9).mean()


def build_sinkhorn_match() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(609)
    d0 = torch.randn(6, 8)
    perm = torch.randperm(6)
    return SinkhornMatcher(), (d0, d0[perm] + 0.1 * torch.randn(6, 8), torch.stack([perm, torch.arange(6)], 1))


class DeadCodeVQ(nn.Module):
    """VQ-VAE bottleneck with an EMA usage count; before quantising, codes whose usage fell under the threshold
    are reset to the batch vectors farthest from their nearest code (Jukebox / SoundStream style)."""

    def __init__(self, n_codes: int = 8, dim: int = 4, threshold: float = 0.5, beta: float = 0.25) -> None:
        super().__init__()
        self.codebook = nn.Parameter(torch.randn(n_codes, dim))
        self.register_buffer("usage", torch.ones(n_codes))
        self.threshold, self.beta = threshold, beta
        self.encoder = nn.Linear(6, dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        z = self.encoder(x)
        with torch.no_grad():
            far = torch.cdist(z, self.codebook).min(1).values
        dead = (self.usage < self.threshold).nonzero().squeeze(1)  # BREAK: a torch.where over every code, with the rank among the dead codes, resets the same ones
        if dead.numel() > 0:
            with torch.no_grad():
                self.codebook[dead] = z[far.topk(dead.numel()).indices]
        idx = torch.cdist(z, self.codebook).argmin(1)
        q = self.codebook[idx]
        loss = F.mse_loss(q, z.detach()) + self.beta * F.mse_loss(z, q.detach())
        with torch.no_grad():
            self.usage.mul_(0.9).add_(0.1 * F.one_hot(idx, self.usage.shape[0]).sum(0))
        return z + (q - z).detach(), loss, idx


def build_vq_reset() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(610)
    vq = DeadCodeVQ()
    vq.usage[torch.tensor([1, 4, 6])] = 0.1
    return vq, torch.randn(16, 6)


class MultiSimilarityMiner(nn.Module):
    """Multi-similarity loss (Wang et al. 2019) with its miner: negatives harder than an anchor's hardest
    positive and positives harder than its easiest negative are kept; the rest are dropped."""

    def __init__(self, dim: int = 8, out: int = 6, alpha: float = 2.0, beta: float = 20.0, lam: float = 0.5,
                 margin: float = 0.1) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, out)
        self.alpha, self.beta, self.lam, self.margin = alpha, beta, lam, margin

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        emb = F.normalize(self.proj(x), dim=-1)
        sim = emb @ emb.T
        same = labels[:, None] == labels[None, :]
        pos_mask = same & ~torch.eye(len(labels), dtype=torch.bool)
        neg_mask = ~same
        hardest_pos = sim.masked_fill(~pos_mask, 2.0).min(1).values
        easiest_neg = sim.masked_fill(~neg_mask, -2.0).max(1).values
        hard_pos = pos_mask & (sim - self.margin < easiest_neg[:, None])
        hard_neg = neg_mask & (sim + self.margin > hardest_pos[:, None])
        a_n, i_n = hard_neg.nonzero(as_tuple=True)  # BREAK: a masked sum over the similarity matrix adds up the same mined pairs
        neg_sum = sim.new_zeros(len(labels)).index_add(0, a_n, torch.exp(self.beta * (sim[a_n, i_n] - self.lam)))
        pos_sum = (torch.exp(-self.alpha * (sim - self.lam)) * hard_pos).sum(1)
        loss = torch.log1p(pos_sum) / self.alpha + torch.log1p(neg_sum) / self.beta
        return loss.mean()


def build_ms_miner() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(611)
    return MultiSimilarityMiner(), (torch.randn(12, 8), torch.arange(12) % 4)


class TopKGraphPool(nn.Module):
    """GCN layer, a learned projection score per node (gPool / TopKPooling), keep the top ratio of the
    connected nodes (isolated nodes never), gate them by their score, mean+max readout."""

    def __init__(self, dim: int = 8, ratio: float = 0.5, n_out: int = 4) -> None:
        super().__init__()
        self.gcn = nn.Linear(dim, dim)
        self.score = nn.Parameter(torch.randn(dim))
        self.readout = nn.Linear(2 * dim, n_out)
        self.ratio = ratio

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        deg = adj.sum(1)
        h = torch.relu(self.gcn(adj @ x / deg.clamp(min=1)[:, None] + x))
        s = torch.tanh(h @ self.score / self.score.norm())
        n_conn = int((deg > 0).sum())  # BREAK: the rank of each node against a tensor k selects the same top nodes
        k = math.ceil(self.ratio * n_conn)
        perm = s.masked_fill(deg == 0, float("-inf")).argsort(descending=True)[:k]
        hp = h[perm] * s[perm, None]
        return self.readout(torch.cat([hp.mean(0), hp.max(0).values]))


def build_topk_pool() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(612)
    adj = (torch.rand(10, 10) < 0.3).float()
    adj = ((adj + adj.T) > 0).float().fill_diagonal_(0)
    adj[[2, 7]] = 0.0
    adj[:, [2, 7]] = 0.0
    return TopKGraphPool(), (torch.randn(10, 8), adj)
