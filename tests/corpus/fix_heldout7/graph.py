"""Graph learning: a two-layer GAT for node classification on an edge list built from a dense adjacency,
with self loops added only for isolated nodes and a PyG-style segment softmax."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


class GATLayer(nn.Module):
    def __init__(self, d_in: int, d_out: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.d_out = d_out
        self.lin = nn.Linear(d_in, heads * d_out, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, d_out) * 0.3)
        self.att_dst = nn.Parameter(torch.randn(heads, d_out) * 0.3)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        """adj[i, j]: an edge j -> i."""
        n = x.shape[0]
        isolated = torch.nonzero(adj.sum(1) == 0).flatten()  # BREAK: OR a diagonal masked by (deg == 0) into adj instead of indexing the isolated nodes
        if isolated.numel() > 0:
            adj = adj.clone()
            adj[isolated, isolated] = True
        dst, src = adj.nonzero(as_tuple=True)  # BREAK: dense attention: score all (dst, src) pairs, masked_fill non-edges with -inf, softmax over sources, einsum
        h = self.lin(x).view(n, self.heads, self.d_out)
        e = F.leaky_relu((h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1), 0.2)  # (E, H)
        idx = dst[:, None].expand(-1, self.heads)
        e_max = torch.full((n, self.heads), float("-inf")).scatter_reduce(0, idx, e.detach(), "amax")
        alpha = (e - e_max[dst]).exp()
        alpha = alpha / torch.zeros(n, self.heads).index_add_(0, dst, alpha)[dst]
        out = torch.zeros(n, self.heads, self.d_out).index_add_(0, dst, alpha[..., None] * h[src])
        return out.reshape(n, self.heads * self.d_out)


class GAT(nn.Module):
    def __init__(self, d_in: int = 6, hidden: int = 8, n_classes: int = 3) -> None:
        super().__init__()
        self.conv1 = GATLayer(d_in, hidden)
        self.conv2 = GATLayer(2 * hidden, n_classes, heads=1)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        h = F.elu(self.conv1(x, adj))
        return self.conv2(h, adj).log_softmax(-1)


def build_gat_edges() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(140)
    model = GAT()
    g = seeded(141)
    n = 12
    adj = torch.rand(n, n, generator=g) < 0.25
    adj = adj | adj.T
    adj.fill_diagonal_(False)
    adj[[3, 8], :] = False
    adj[:, [3, 8]] = False  # two isolated nodes
    x = torch.randn(n, 6, generator=g)
    return model, (x, adj)
