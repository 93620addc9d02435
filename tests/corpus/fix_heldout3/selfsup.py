"""MoCo v2: momentum key encoder and a queue of negatives with a circular write pointer."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class MoCo(nn.Module):
    def __init__(self, in_dim: int = 10, dim: int = 8, K: int = 12, m: float = 0.99, T: float = 0.2) -> None:
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = nn.Sequential(nn.Linear(in_dim, 16), nn.ReLU(), nn.Linear(16, dim))
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self) -> None:
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters(), strict=True):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys: torch.Tensor) -> None:
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)  # BREAK: write with index_copy_ at (ptr + arange(batch)) % K and keep ptr a tensor
        assert self.K % batch_size == 0
        self.queue[:, ptr : ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    def forward(self, im_q: torch.Tensor, im_k: torch.Tensor):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = F.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", q, k).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return F.cross_entropy(logits, labels), logits, self.queue.clone()


def build_moco_queue():
    torch.manual_seed(18)
    model = MoCo()
    model.queue_ptr.fill_(8)
    x = torch.randn(4, 10)
    return model, (x + 0.1 * torch.randn(4, 10), x + 0.1 * torch.randn(4, 10))
