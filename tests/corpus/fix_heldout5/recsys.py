"""Recommendation and retrieval: an MMR re-ranker for diversity, a kNN memory read and written in forward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MMRReranker(nn.Module):
    """Two-tower relevance, then maximal-marginal-relevance selection of k diverse items."""

    def __init__(self, d: int = 8, k: int = 4, lam: float = 0.7, temp_floor: float = 0.5) -> None:
        super().__init__()
        self.user_tower = nn.Linear(d, d)
        self.item_tower = nn.Linear(d, d)
        self.k, self.lam, self.temp_floor = k, lam, temp_floor

    def forward(self, user: torch.Tensor, items: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = self.user_tower(user)
        v = F.normalize(self.item_tower(items), dim=-1)
        rel = v @ u
        rel = (rel - rel.mean()) / max(self.temp_floor, float(rel.std()))  # BREAK: clamp the detached std instead
        sim = v @ v.T
        chosen: list[int] = []
        for _ in range(self.k):
            penalty = sim[:, chosen].max(1).values if chosen else torch.zeros_like(rel)
            mmr = self.lam * rel - (1 - self.lam) * penalty
            if chosen:
                mmr[chosen] = float("-inf")
            chosen.append(int(mmr.argmax()))  # BREAK: keep the picks as tensors with a taken-mask and a running max penalty
        order = torch.tensor(chosen)
        return rel[order], order


def build_diverse_rerank() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(41)
    items = torch.randn(10, 8)
    items[5] = items[2] + 0.05 * torch.randn(8)  # a near-duplicate the re-ranker should skip
    return MMRReranker(), (torch.randn(8), items)


class KNNMemory(nn.Module):
    """Reads the top-k of a ring buffer of past keys (only the filled slots), then writes this batch into it."""

    def __init__(self, dim: int = 8, slots: int = 16, k: int = 3) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.key_proj = nn.Linear(dim, dim)
        self.out = nn.Linear(2 * dim, dim)
        self.k = k
        self.register_buffer("keys", torch.zeros(slots, dim))
        self.register_buffer("values", torch.zeros(slots, dim))
        self.register_buffer("filled", torch.tensor(0))
        self.register_buffer("ptr", torch.tensor(0))

    def forward(self, segments: torch.Tensor) -> torch.Tensor:
        outs = []
        for x in segments:  # segment by segment: each reads what the earlier ones wrote
            q = F.normalize(self.q(x), dim=-1)
            scores = q @ self.keys.clone().T  # cloned: the write below updates the buffer in place
            filled = int(self.filled)  # BREAK: mask slots whose index is not below the filled tensor
            scores[:, filled:] = float("-inf")
            top, idx = scores.topk(self.k, dim=-1)
            read = (top.softmax(-1)[..., None] * self.values[idx]).sum(1)
            y = self.out(torch.cat([x, read], -1))
            self._write(F.normalize(self.key_proj(x), dim=-1).detach(), y.detach())
            outs.append(y)
        return torch.stack(outs)

    def _write(self, k: torch.Tensor, v: torch.Tensor) -> None:
        ptr = int(self.ptr)  # BREAK: index_copy_ at (ptr + arange) % slots, pointer advanced on the tensor
        self.keys[ptr : ptr + len(k)] = k
        self.values[ptr : ptr + len(k)] = v
        self.ptr.fill_((ptr + len(k)) % len(self.keys))
        self.filled += len(k)
        self.filled.clamp_(max=len(self.keys))


def build_retrieval_memory() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(42)
    mem = KNNMemory()
    with torch.no_grad():
        mem.keys[:10] = F.normalize(torch.randn(10, 8), dim=-1)
        mem.values[:10] = torch.randn(10, 8)
        mem.filled.fill_(10)
        mem.ptr.fill_(10)
    return mem, (torch.randn(2, 3, 8),)
