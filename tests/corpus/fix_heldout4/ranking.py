"""Ranking: a recommender with a popularity penalty from interaction counts, a LambdaRank loss."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class PopularityDebiasedRec(nn.Module):
    """Dot-product recommender that subtracts beta * log(1 + count) from each candidate's logit."""

    def __init__(self, n_users: int = 10, n_items: int = 20, dim: int = 8, beta: float = 0.3) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.item_emb = nn.Embedding(n_items, dim)
        self.beta = beta
        self.register_buffer("counts", torch.randint(0, 500, (n_items,)).float())

    def forward(self, users: torch.Tensor, items: torch.Tensor, clicked: torch.Tensor) -> torch.Tensor:
        logits = self.user_emb(users) @ self.item_emb(items).T
        counts = self.counts[items].tolist()  # BREAK: log1p on the count tensor gives the same penalty
        penalty = torch.tensor([math.log1p(c) for c in counts])
        logits = logits - self.beta * penalty
        self.counts.index_add_(0, items[clicked], torch.ones(len(clicked)))
        return logits


def build_popularity_bias() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(5)
    model = PopularityDebiasedRec()
    return model, (torch.tensor([1, 4, 7]), torch.arange(0, 20, 2), torch.tensor([0, 3, 3, 9]))


def lambdarank_loss(scores: torch.Tensor, rels: torch.Tensor) -> torch.Tensor:
    """LambdaRank: pairwise logistic loss weighted by |delta NDCG| of swapping the pair."""
    q, d = scores.shape
    order = scores.detach().argsort(-1, descending=True).tolist()  # BREAK: a double argsort gives the ranks
    ranks = torch.empty(q, d, dtype=torch.long)
    for i in range(q):
        for pos, doc in enumerate(order[i]):
            ranks[i, doc] = pos
    disc = 1.0 / torch.log2(ranks.float() + 2.0)
    gain = 2.0 ** rels - 1.0
    ideal = gain.sort(-1, descending=True).values
    idcg = (ideal / torch.log2(torch.arange(d).float() + 2.0)).sum(-1, keepdim=True)
    delta = ((gain[:, :, None] - gain[:, None, :]).abs() * (disc[:, :, None] - disc[:, None, :]).abs()) / idcg[..., None]
    pairs = (rels[:, :, None] > rels[:, None, :]).float()
    diff = scores[:, :, None] - scores[:, None, :]
    total = (pairs * delta * F.softplus(-diff)).sum()
    n_pairs = int(pairs.sum())  # BREAK: clamp the pair count as a tensor
    return total / max(n_pairs, 1)


class Ranker(nn.Module):
    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, docs: torch.Tensor, rels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.mlp(docs).squeeze(-1)
        return scores, lambdarank_loss(scores, rels)


def build_lambdarank() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(6)
    return Ranker(), (torch.randn(3, 5, 6), torch.randint(0, 4, (3, 5)).float())
