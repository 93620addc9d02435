"""Attention variants: dynamic-NTK RoPE that rescales on the sequence length, learned top-k sparsity."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class DynamicNTKRotaryEmbedding(nn.Module):
    """RoPE whose base grows once positions pass the trained context (the "dynamic NTK" recipe)."""

    def __init__(self, dim: int, max_position_embeddings: int = 16, base: float = 10000.0,
                 scaling_factor: float = 2.0) -> None:
        super().__init__()
        self.dim, self.base = dim, base
        self.max_position_embeddings, self.scaling_factor = max_position_embeddings, scaling_factor
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor):
        seq_len = int(position_ids.max()) + 1  # BREAK: the base can be chosen with torch.where and the table indexed by position directly
        if seq_len > self.max_position_embeddings:
            base = self.base * (
                (self.scaling_factor * seq_len / self.max_position_embeddings) - (self.scaling_factor - 1)
            ) ** (self.dim / (self.dim - 2))
            inv_freq = 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float() / self.dim))
        else:
            inv_freq = self.inv_freq
        t = torch.arange(seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[position_ids], emb.sin()[position_ids]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryAttention(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.rope = DynamicNTKRotaryEmbedding(self.head_dim)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = self.rope(position_ids)
        cos, sin = cos[:, None], sin[:, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(attn.transpose(1, 2).reshape(B, T, -1))


def build_rope_ntk_scaling():
    torch.manual_seed(3)
    model = RotaryAttention()
    x = torch.randn(2, 10, 16)
    position_ids = torch.arange(14, 24)[None, :].repeat(2, 1)
    return model, (x, position_ids)


class TopKSparseAttention(nn.Module):
    """Each query keeps its k highest-scoring keys; the kept fraction is a learned logit."""

    def __init__(self, dim: int = 16, heads: int = 2, init_keep: float = 0.35) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.keep_logit = nn.Parameter(torch.tensor(math.log(init_keep / (1 - init_keep))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        keep = torch.sigmoid(self.keep_logit).item()  # BREAK: k as a tensor; keep scores at or above the k-th largest
        top_k = max(1, int(keep * L))
        top = scores.topk(top_k, dim=-1)
        sparse = torch.full_like(scores, float("-inf")).scatter(-1, top.indices, top.values)
        out = sparse.softmax(-1) @ v
        return self.o(out.transpose(1, 2).reshape(B, L, -1))


def build_sparse_topk_attention():
    torch.manual_seed(4)
    return TopKSparseAttention(), (torch.randn(2, 12, 16),)
