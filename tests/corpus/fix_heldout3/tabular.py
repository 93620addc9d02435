"""Tabular model: per-column category embeddings with an unknown slot, counting unknowns for monitoring."""

from __future__ import annotations

import warnings

import torch
from torch import nn


def standardize(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    std = x.std(0)
    if (std < eps).any():  # BREAK: clamp(min=eps) is the identity when no column is constant; apply it always
        warnings.warn("constant numeric column", stacklevel=2)  # BREAK: a warning only; the clamp-always rewrite has no branch to warn in
        std = std.clamp(min=eps)
    return (x - x.mean(0)) / std


class CategoricalEncoder(nn.Module):
    def __init__(self, cardinalities=(5, 7, 3), dim: int = 4, n_num: int = 3, n_out: int = 2) -> None:
        super().__init__()
        self.cardinalities = list(cardinalities)
        self.embeddings = nn.ModuleList(nn.Embedding(c + 1, dim) for c in cardinalities)  # slot 0: unknown
        self.unknown_counts = [0] * len(cardinalities)
        self.head = nn.Linear(len(cardinalities) * dim + n_num, n_out)

    def forward(self, x_cat: torch.Tensor, x_num: torch.Tensor):
        cols = []
        for i, emb in enumerate(self.embeddings):
            col = x_cat[:, i]
            unknown = (col < 0) | (col >= self.cardinalities[i])
            self.unknown_counts[i] += int(unknown.sum())  # BREAK must-not: the counts are returned as Python ints
            cols.append(emb(torch.where(unknown, 0, col + 1)))
        x_num = standardize(x_num)
        return self.head(torch.cat([*cols, x_num], dim=1)), list(self.unknown_counts)


def build_tabular_unknown():
    torch.manual_seed(19)
    x_cat = torch.stack([torch.randint(-1, 6, (8,)), torch.randint(0, 9, (8,)), torch.randint(0, 3, (8,))], 1)
    x_num = torch.randn(8, 3)
    x_num[:, 2] = 1.5
    return CategoricalEncoder(), (x_cat, x_num)
