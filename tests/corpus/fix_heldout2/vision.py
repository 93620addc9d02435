"""Vision: semantic-segmentation post-processing back to the original image size, and an MAE-style
ViT encoder that keeps a random subset of patches."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


class SegmentationHead(nn.Module):
    def __init__(self, in_channels: int = 8, num_classes: int = 5, ignore_index: int = 255,
                 min_confidence: float = 0.25) -> None:
        super().__init__()
        self.classifier = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, num_classes, 1))
        self.ignore_index, self.min_confidence = ignore_index, min_confidence

    def forward(self, features: torch.Tensor, orig_size: torch.Tensor):
        logits = self.classifier(features)
        logits = F.interpolate(logits, size=tuple(orig_size.tolist()), mode="bilinear", align_corners=False)  # BREAK must-not: the output's height and width are the values in orig_size
        probs = logits.softmax(dim=1)
        confidence, pred = probs.max(dim=1)

        low_fraction = (confidence < self.min_confidence).float().mean().item()  # BREAK: torch.where on the tensor fraction (> 0.5) or the pixel's confidence gives the same labels
        if low_fraction > 0.5:
            pred = torch.full_like(pred, self.ignore_index)  # the whole image is unreliable
        else:
            pred = torch.where(confidence < self.min_confidence, torch.full_like(pred, self.ignore_index), pred)

        present = torch.unique(pred[pred != self.ignore_index]).tolist()  # BREAK must-not: the class ids present are returned as a Python list
        return logits, pred, present


def build_seg_postprocess():
    torch.manual_seed(15)
    model = SegmentationHead()
    return model, (torch.randn(2, 8, 6, 8), torch.tensor([12, 15]))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        qkv = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(attn.transpose(1, 2).reshape(B, N, D))
        return x + self.mlp(self.norm2(x))


class MAEEncoder(nn.Module):
    def __init__(self, img_size: int = 16, patch: int = 4, dim: int = 16, mask_ratio: float = 0.75) -> None:
        super().__init__()
        self.patch, self.mask_ratio = patch, mask_ratio
        self.num_patches = (img_size // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.randn(1, self.num_patches, dim) * 0.02)
        self.block = Block(dim)
        self.norm = nn.LayerNorm(dim)

    def interpolate_pos_encoding(self, grid_h: int, grid_w: int) -> torch.Tensor:
        if grid_h * grid_w == self.num_patches:
            return self.pos_embed
        side = int(self.num_patches ** 0.5)
        pos = self.pos_embed.reshape(1, side, side, -1).permute(0, 3, 1, 2)
        pos = F.interpolate(pos, size=(grid_h, grid_w), mode="bicubic", align_corners=False)
        return pos.permute(0, 2, 3, 1).reshape(1, grid_h * grid_w, -1)

    def forward(self, imgs: torch.Tensor, noise: torch.Tensor):
        x = self.patch_embed(imgs)  # any image size: the patch count follows it
        grid_h, grid_w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = x + self.interpolate_pos_encoding(grid_h, grid_w)
        B, N, D = x.shape

        len_keep = int(N * (1 - self.mask_ratio))
        ids_shuffle = torch.argsort(noise, dim=1)  # ascending: small is keep
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        mask = torch.ones(B, N, dtype=torch.bool)
        mask[:, :len_keep] = False
        mask = torch.gather(mask, 1, ids_restore)  # True where the patch is hidden
        x_visible = x[~mask].reshape(B, len_keep, D)  # BREAK: every row keeps len_keep patches, so gathering the sorted ids_shuffle[:, :len_keep] gives the same tokens in the same order
        logger.debug("MAE: %d visible patches of %d", x_visible.shape[1], N)  # BREAK: logging only; it returns nothing the model uses

        x_visible = self.norm(self.block(x_visible))
        return x_visible, mask, ids_restore


def build_mae_vit_patches():
    torch.manual_seed(16)
    model = MAEEncoder()
    imgs = torch.randn(2, 3, 20, 24)  # not the 16x16 it was built for: 5x6 patches
    noise = torch.rand(2, 30)
    return model, (imgs, noise)
