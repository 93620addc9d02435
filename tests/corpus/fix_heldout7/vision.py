"""Detection heads: a torchvision-style FPN RoI head that routes boxes to pyramid levels, and a
CenterNet decoder that turns heatmap peaks into per-image detections."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- FPN RoI level routing


class FPNRoIHead(nn.Module):
    """Pools each RoI from the pyramid level its size maps to (FPN paper eq. 1), then classifies it."""

    def __init__(self, channels: int = 8, num_classes: int = 5, image_size: int = 64) -> None:
        super().__init__()
        self.strides = (4, 8, 16)
        self.lateral = nn.ModuleList(nn.Conv2d(3, channels, 1) for _ in self.strides)
        self.cls = nn.Linear(channels * 4, num_classes)
        self.image_size = image_size
        self.canonical_scale = 24.0
        self.canonical_level = 1

    def map_levels(self, boxes: torch.Tensor) -> torch.Tensor:
        w = boxes[:, 2] - boxes[:, 0]
        h = boxes[:, 3] - boxes[:, 1]
        scale = torch.sqrt(w * h)
        lvl = torch.floor(self.canonical_level + torch.log2(scale / self.canonical_scale + 1e-6))
        return lvl.clamp(0, len(self.strides) - 1).to(torch.int64)

    def roi_pool(self, feat: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """2x2 bilinear samples inside each box: (K, C, 4)."""
        frac = torch.tensor([0.25, 0.75], dtype=boxes.dtype)
        xs = boxes[:, 0:1] + frac[None, :] * (boxes[:, 2:3] - boxes[:, 0:1])
        ys = boxes[:, 1:2] + frac[None, :] * (boxes[:, 3:4] - boxes[:, 1:2])
        gx = xs[:, None, :].expand(-1, 2, -1)
        gy = ys[:, :, None].expand(-1, -1, 2)
        grid = torch.stack([gx, gy], dim=-1).reshape(1, -1, 4, 2) * (2.0 / self.image_size) - 1.0
        out = F.grid_sample(feat, grid, align_corners=False)  # (1, C, K, 4)
        return out[0].permute(1, 0, 2)

    def forward(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        feats = [conv(F.avg_pool2d(images, s)) for conv, s in zip(self.lateral, self.strides, strict=True)]  # BREAK: follows from the loop break below: once forward compiles whole, Dynamo inlines this comprehension instead of compiling its frame alone over a zip it cannot iterate
        levels = self.map_levels(boxes)
        pooled = boxes.new_zeros(boxes.shape[0], feats[0].shape[1], 4)
        for lvl, feat in enumerate(feats):
            idx_in_level = torch.where(levels == lvl)[0]  # BREAK: pool every box on every level and keep the level's rows with torch.where(levels == lvl)
            pooled[idx_in_level] = self.roi_pool(feat, boxes[idx_in_level])
        return self.cls(pooled.flatten(1))


def build_fpn_roi_levels() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(70)
    model = FPNRoIHead()
    g = seeded(71)
    images = torch.randn(1, 3, 64, 64, generator=g)
    sizes = torch.tensor([8.0, 12.0, 20.0, 26.0, 30.0, 44.0, 52.0, 10.0, 36.0, 58.0])
    x0 = torch.rand(10, generator=g) * (64 - sizes)
    y0 = torch.rand(10, generator=g) * (64 - sizes)
    boxes = torch.stack([x0, y0, x0 + sizes, y0 + sizes * 0.9], dim=1)
    return model, (images, boxes)


# --------------------------------------------------------------------------- CenterNet decoding


class CenterNetDecoder(nn.Module):
    """Heatmap / size / offset heads, 3x3 max-pool NMS, top-K peaks, per-image score threshold."""

    def __init__(self, channels: int = 8, num_classes: int = 3, k: int = 12, score_thresh: float = 0.52) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, channels, 3, padding=1), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()
        )
        self.heat = nn.Conv2d(channels, num_classes, 1)
        self.wh = nn.Conv2d(channels, 2, 1)
        self.off = nn.Conv2d(channels, 2, 1)
        self.k = k
        self.score_thresh = score_thresh

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        f = self.backbone(images)
        heat = torch.sigmoid(self.heat(f))
        wh = self.wh(f)
        off = torch.sigmoid(self.off(f))
        if wh.min() < 0:  # BREAK: sizes are never negative: clamp unconditionally (a no-op when none are)
            wh = wh.clamp(min=0)
        hmax = F.max_pool2d(heat, 3, stride=1, padding=1)
        heat = heat * (hmax == heat).float()
        b, c, h, w = heat.shape
        scores, inds = heat.reshape(b, -1).topk(self.k)
        labels = inds // (h * w)
        pix = inds % (h * w)
        ys = (pix // w).float()
        xs = (pix % w).float()
        wh_k = wh.reshape(b, 2, -1).gather(2, pix[:, None, :].expand(b, 2, self.k))
        off_k = off.reshape(b, 2, -1).gather(2, pix[:, None, :].expand(b, 2, self.k))
        cx = xs + off_k[:, 0]
        cy = ys + off_k[:, 1]
        boxes = torch.stack([cx - wh_k[:, 0] / 2, cy - wh_k[:, 1] / 2, cx + wh_k[:, 0] / 2, cy + wh_k[:, 1] / 2], -1)
        dets = []
        for i in range(b):
            keep = scores[i] > self.score_thresh
            dets.append({"boxes": boxes[i][keep], "scores": scores[i][keep], "labels": labels[i][keep]})  # BREAK must-not: how many detections each image keeps depends on its scores, and they are returned
        return dets


def build_centernet_decode() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(72)
    model = CenterNetDecoder()
    images = torch.randn(2, 3, 16, 16, generator=seeded(73))
    return model, images


__all__ = ["build_centernet_decode", "build_fpn_roi_levels"]
