"""Knowledge-graph embedding: TransE with host-side negative sampling and a margin loss."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class TransE(nn.Module):
    def __init__(self, n_entities: int = 30, n_relations: int = 5, dim: int = 8, n_neg: int = 4,
                 margin: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        self.n_entities, self.n_neg, self.margin = n_entities, n_neg, margin
        self.ent = nn.Embedding(n_entities, dim)
        self.rel = nn.Embedding(n_relations, dim)
        self.rng = np.random.default_rng(seed)

    def score(self, h: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (self.ent(h) + self.rel(r) - self.ent(t)).norm(p=1, dim=-1)

    def forward(self, triples: torch.Tensor) -> torch.Tensor:
        h, r, t = triples.unbind(1)
        corrupt = torch.from_numpy(self.rng.integers(0, self.n_entities, size=(triples.shape[0], self.n_neg)))  # BREAK must-not: the negatives come from a host-side numpy stream
        head_side = torch.arange(self.n_neg) % 2 == 0
        neg_h = torch.where(head_side, corrupt, h[:, None])
        neg_t = torch.where(head_side, t[:, None], corrupt)
        pos = self.score(h, r, t)
        neg = self.score(neg_h, r[:, None].expand_as(neg_h), neg_t)
        violations = F.relu(self.margin + pos[:, None] - neg)
        n_active = int((violations > 0).sum())  # BREAK: a count read back only to divide by; clamp the tensor
        return violations.sum() / max(n_active, 1)


def build_kg_negative_sampling():
    torch.manual_seed(20)
    triples = torch.stack([torch.randint(0, 30, (6,)), torch.randint(0, 5, (6,)), torch.randint(0, 30, (6,))], 1)
    return TransE(), (triples,)
