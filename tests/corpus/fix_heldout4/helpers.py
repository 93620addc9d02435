"""Small shared pieces: Gram matrices, capsule squashing, length penalties, volume rendering."""

from __future__ import annotations

import torch


def gram(feat: torch.Tensor) -> torch.Tensor:
    """Channel Gram matrix normalised by the number of entries, as in Gatys et al."""
    b, c, h, w = feat.shape
    f = feat.reshape(b, c, h * w)
    return f @ f.transpose(1, 2) / (c * h * w)


def squash(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    sq = (s * s).sum(dim, keepdim=True)
    return sq / (1.0 + sq) * s / torch.sqrt(sq + 1e-8)


def length_penalty(scores: torch.Tensor, lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT length normalisation ((5 + |Y|) / 6) ** alpha, one hypothesis at a time."""
    rows = []
    for b in range(scores.shape[0]):
        row = []
        for k in range(scores.shape[1]):
            n = int(lengths[b, k])  # BREAK: the penalty can be computed on the length tensor itself
            row.append(scores[b, k] / (((5.0 + n) / 6.0) ** alpha))
        rows.append(torch.stack(row))
    return torch.stack(rows)


def composite(rgb: torch.Tensor, sigma: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Alpha-composite samples along each ray; the colour and the accumulated opacity."""
    delta = torch.cat([t[..., 1:] - t[..., :-1], torch.full_like(t[..., :1], 1e10)], -1)
    alpha = 1.0 - torch.exp(-sigma * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1.0 - alpha + 1e-10], -1), -1)[..., :-1]
    w = alpha * trans
    return (w[..., None] * rgb).sum(-2), w.sum(-1)
