"""Sequence models: GNMT length-penalty rescoring of finished beam hypotheses, local attention with a learned
(adaptive) span, and decoding with an H2O heavy-hitter KV cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class BeamRescorer(nn.Module):
    """Scores finished hypotheses [K, T] (padded) under a small causal conv LM with the GNMT length penalty
    ((5 + L) / 6) ** alpha; returns the scores and the index of the best one for the caller's output."""

    def __init__(self, vocab: int = 12, dim: int = 8, alpha: float = 0.6, pad: int = 0) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, dim, 3)
        self.lm = nn.Linear(dim, vocab)
        self.alpha, self.pad = alpha, pad

    def forward(self, hyps: torch.Tensor) -> tuple[torch.Tensor, int]:
        prev = F.pad(hyps[:, :-1], (1, 0), value=1)  # BOS = 1
        h = torch.tanh(self.conv(F.pad(self.emb(prev).transpose(1, 2), (2, 0)))).transpose(1, 2)
        logp = self.lm(h).log_softmax(-1)
        tok_lp = logp.gather(-1, hyps[..., None]).squeeze(-1)
        lengths = (hyps != self.pad).sum(1)
        scores = []
        for i, L in enumerate(lengths.tolist()):  # BREAK: a length mask and a tensor penalty score all hypotheses at once
            scores.append(tok_lp[i, :L].sum() / ((5 + L) / 6) ** self.alpha)
        scores = torch.stack(scores)
        best = int(scores.argmax())  # BREAK must-not: the caller gets the best index as a Python int
        return scores, best


def build_length_penalty() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(622)
    hyps = torch.randint(2, 12, (4, 7))
    for i, L in enumerate([7, 4, 5, 2]):
        hyps[i, L:] = 0
    return BeamRescorer(), hyps


class AdaptiveSpanAttention(nn.Module):
    """Local self-attention with an adaptive span (Sukhbaatar et al. 2019): a learned span, a hard band of
    width ceil(span) for the scores and a soft ramp for the span's gradient; padded keys are masked."""

    def __init__(self, dim: int = 8, max_span: float = 4.0) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.span_logit = nn.Parameter(torch.tensor(0.3))
        self.max_span = max_span

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).chunk(3, -1)
        span = self.max_span * torch.sigmoid(self.span_logit)
        w = int(span.ceil())  # BREAK: the band can compare against the (detached) ceil tensor
        i = torch.arange(T)
        dist = (i[:, None] - i[None, :]).abs()
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        scores = scores.masked_fill(dist > w, float("-inf"))
        if pad.any():  # BREAK: masking with an all-false mask changes nothing, so always mask
            scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        attn = scores.softmax(-1) * (span + 1 - dist).clamp(0, 1)
        attn = attn / attn.sum(-1, keepdim=True).clamp(min=1e-6)
        return attn @ v


def build_window_attn() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(623)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, -1] = True
    return AdaptiveSpanAttention(), (torch.randn(2, 9, 8), pad)


class HeavyHitterDecoder(nn.Module):
    """Token-by-token single-head attention with an H2O KV cache: past a budget, the cached entry (outside the
    recent window) with the least accumulated attention is evicted."""

    def __init__(self, dim: int = 8, budget: int = 5, recent: int = 2) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.budget, self.recent = budget, recent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        D = x.shape[1]
        K, V, acc = x.new_zeros(0, D), x.new_zeros(0, D), x.new_zeros(0)
        outs = []
        for t in range(x.shape[0]):
            K, V = torch.cat([K, self.k(x[t])[None]]), torch.cat([V, self.v(x[t])[None]])
            acc = torch.cat([acc, acc.new_zeros(1)])
            a = torch.softmax(K @ self.q(x[t]) / math.sqrt(D), 0)
            acc = acc + a.detach()
            outs.append(a @ V)
            if K.shape[0] > self.budget:
                victim = int(acc[: -self.recent].argmin())  # BREAK: gathering with an index shifted past the victim drops the same entry
                keep = [j for j in range(K.shape[0]) if j != victim]
                K, V, acc = K[keep], V[keep], acc[keep]
        return torch.stack(outs)


def build_kv_evict() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(624)
    return HeavyHitterDecoder(), torch.randn(10, 8)
