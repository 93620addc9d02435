"""Vision: a keypoint heatmap head with a soft-argmax and a per-joint confidence gate, and a patch encoder for
gridded sea-surface fields where land is NaN and all-land patches are dropped."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import nan_guard


class HeatmapPoseHead(nn.Module):
    """Heatmaps per joint, coordinates by soft-argmax; joints whose peak confidence is under the gate are
    reported at (-1, -1), as the COCO-style post-processing does."""

    def __init__(self, ch: int = 6, joints: int = 5, gate: float = 0.73) -> None:
        super().__init__()
        self.head = nn.Conv2d(ch, joints, 3, padding=1)
        self.gate = gate

    def forward(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        heat = self.head(feats[None])[0]
        J, H, W = heat.shape
        flat = heat.flatten(1)
        conf = torch.sigmoid(flat.max(1).values)
        prob = (flat * 4.0).softmax(1)
        ys, xs = torch.meshgrid(torch.arange(H, dtype=heat.dtype), torch.arange(W, dtype=heat.dtype), indexing="ij")
        coords = torch.stack([(prob * xs.flatten()).sum(1), (prob * ys.flatten()).sum(1)], 1)
        for j, c in enumerate(conf.tolist()):  # BREAK: a torch.where on conf < gate sets the same rows
            if c < self.gate:
                coords[j] = -1.0
        return coords, conf


def build_pose_heatmap() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(607)
    return HeatmapPoseHead(), torch.randn(6, 8, 8)


class LandMaskedPatchEncoder(nn.Module):
    """ViT-style patch tokens of an SST field; patches that are all land are dropped, the ocean patches get a
    context vector (their mean) and a token MLP; the output grid has zeros for the land patches."""

    def __init__(self, patch: int = 4, dim: int = 12, grid: int = 16) -> None:
        super().__init__()
        n = (grid // patch) ** 2
        self.patch = patch
        self.embed = nn.Linear(2 * patch * patch, dim)
        self.pos = nn.Parameter(torch.randn(n, dim) * 0.02)
        self.mixer = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, sst: torch.Tensor, land: torch.Tensor) -> torch.Tensor:
        sst = nan_guard(sst)
        p = self.patch
        tiles = sst.unfold(0, p, p).unfold(1, p, p).reshape(-1, p * p)
        land_t = land.unfold(0, p, p).unfold(1, p, p).reshape(-1, p * p).to(sst.dtype)
        ocean = (land_t.mean(1) < 1).nonzero().squeeze(1)  # BREAK: computing every patch and masking keeps the ocean tokens and zeros the land ones
        tokens = self.embed(torch.cat([tiles[ocean], land_t[ocean]], 1)) + self.pos[ocean]
        h = tokens + self.mixer(tokens + tokens.mean(0))
        out = h.new_zeros(tiles.shape[0], h.shape[1])
        return out.index_copy(0, ocean, F.normalize(h, dim=-1))


def build_weather_patch() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(608)
    land = torch.zeros(16, 16, dtype=torch.bool)
    land[:8, :6], land[10:, 12:], land[5, 9] = True, True, True
    sst = torch.randn(16, 16).masked_fill(land, float("nan"))
    return LandMaskedPatchEncoder(), (sst, land)
