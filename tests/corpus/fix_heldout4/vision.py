"""Vision: a Gram-matrix style loss, a super-resolution net with PSNR in forward, token merging."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import gram


class StyleLoss(nn.Module):
    """Gatys-style loss over three conv stages with per-layer weights kept in a buffer."""

    def __init__(self, style: torch.Tensor) -> None:
        super().__init__()
        self.stages = nn.ModuleList([nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1, stride=2),
                                     nn.Conv2d(16, 16, 3, padding=1, stride=2)])
        self.register_buffer("layer_weights", torch.tensor([1.0, 0.5, 0.25]))
        with torch.no_grad():
            self.style_grams = [gram(f) for f in self.features(style)]

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = []
        for conv in self.stages:
            x = F.relu(conv(x))
            feats.append(x)
        return feats

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        loss = img.new_zeros(())
        for i, (f, g) in enumerate(zip(self.features(img), self.style_grams, strict=True)):
            w = float(self.layer_weights[i])  # BREAK: the weight can stay a 0-d tensor
            loss = loss + w * (gram(f) - g).pow(2).mean()
        return loss * 1e3


def build_gram_style() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = StyleLoss(torch.rand(1, 3, 16, 16))
    return model, torch.rand(2, 3, 16, 16)


class TinySR(nn.Module):
    """ESPCN-like x2 upsampler; forward also reports PSNR against the high-res target."""

    def __init__(self, scale: int = 2) -> None:
        super().__init__()
        self.register_buffer("scale_t", torch.tensor(scale))
        self.body = nn.Conv2d(3, 16, 3, padding=1)
        self.up = nn.Conv2d(16, 3 * scale * scale, 3, padding=1)

    def forward(self, lr: torch.Tensor, hr: torch.Tensor) -> tuple[torch.Tensor, float]:
        s = int(self.scale_t)  # BREAK: the scale is fixed at construction (the up conv's channels say it)
        base = F.interpolate(lr, scale_factor=s, mode="bilinear", align_corners=False)
        sr = base + F.pixel_shuffle(self.up(F.relu(self.body(lr))), s)
        mse = F.mse_loss(sr.clamp(0, 1), hr)
        psnr = 10.0 * math.log10(1.0 / mse.item())  # BREAK must-not: the PSNR is returned as a Python float
        return sr, psnr


def build_sr_psnr() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    return TinySR(), (torch.rand(2, 3, 8, 8), torch.rand(2, 3, 16, 16))


def merge_tokens(x: torch.Tensor, ratio: float) -> torch.Tensor:
    """ToMe bipartite soft matching: merge the r most similar even tokens into odd ones (mean)."""
    bsz, n, c = x.shape
    r = int(ratio * (n // 2))
    a, b = x[:, ::2], x[:, 1::2]
    an, bn = F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    node_max, node_idx = (an @ bn.transpose(1, 2)).max(-1)
    edge_idx = node_max.argsort(-1, descending=True)
    unm_idx, src_idx = edge_idx[:, r:], edge_idx[:, :r]
    dst_idx = node_idx.gather(1, src_idx)
    out = []
    for i in range(bsz):
        acc = b[i].clone()
        cnt = torch.ones(b.shape[1], 1)
        for s, d in zip(src_idx[i].tolist(), dst_idx[i].tolist(), strict=True):  # BREAK: scatter_add does the sums
            acc[d] = acc[d] + a[i, s]
            cnt[d] += 1
        out.append(torch.cat([a[i, unm_idx[i]], acc / cnt], 0))
    return torch.stack(out)


class ToMeBlock(nn.Module):
    def __init__(self, dim: int = 16, ratio: float = 0.5) -> None:
        super().__init__()
        self.ratio = ratio
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x, x, x, need_weights=False)[0]
        x = merge_tokens(x, self.ratio)
        return x + self.mlp(x)


def build_tome_merge() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(2)
    return ToMeBlock(), torch.randn(2, 12, 16)
