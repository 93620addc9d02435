"""A DLRM-style click model: dense features through an MLP, hashed categorical features through
sum-pooled embedding bags given as (ids, offsets), pairwise dot interactions."""

from __future__ import annotations

import torch
from torch import nn

from .helpers import NUM_HASH_BUCKETS, hash_feature, pooled_lookup


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self, num_dense: int = 4, num_sparse: int = 3, dim: int = 8) -> None:
        super().__init__()
        self.bottom = mlp([num_dense, 16, dim])
        self.tables = nn.ModuleList(nn.Embedding(NUM_HASH_BUCKETS, dim) for _ in range(num_sparse))
        num_pairs = (num_sparse + 1) * num_sparse // 2
        self.top = mlp([dim + num_pairs, 16, 1])

    def forward(self, dense: torch.Tensor, raw_ids: list[torch.Tensor], offsets: list[torch.Tensor]) -> torch.Tensor:
        pooled = []
        for f, (table, ids, offs) in enumerate(zip(self.tables, raw_ids, offsets, strict=True)):
            hashed = torch.tensor([hash_feature(v, salt=f) for v in ids.tolist()])  # BREAK: the hash is integer arithmetic that int64 tensors do without overflow here
            pooled.append(pooled_lookup(table, hashed, offs))

        x = self.bottom(dense)
        feats = torch.stack([x] + pooled, dim=1)  # (B, 1 + F, dim)
        inter = feats @ feats.transpose(1, 2)
        li, lj = torch.tril_indices(feats.shape[1], feats.shape[1], offset=-1)
        z = torch.cat([x, inter[:, li, lj]], dim=1)
        return torch.sigmoid(self.top(z))


def build_dlrm_embedding_bags():
    torch.manual_seed(10)
    model = DLRM()
    batch = 4
    raw_ids, offsets = [], []
    for lengths in ([1, 3, 2, 1], [2, 0, 2, 4], [1, 1, 1, 1]):  # an empty bag in the second feature
        n = sum(lengths)
        raw_ids.append(torch.randint(0, 1_000_000, (n,)))
        offsets.append(torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)[:-1].tolist())))
    return model, (torch.randn(batch, 4), raw_ids, offsets)
