"""Perception: a tracker's IoU matching, a motion-aware video clip sampler, a scale-invariant depth loss, voxel occupancy."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import box_iou, greedy_match, voxelize


class MotionTracker(nn.Module):
    """Predicts each track's box offset, matches predictions to confident detections, blends matched boxes."""

    def __init__(self, feat: int = 6, hidden: int = 16, iou_thresh: float = 0.3, min_score: float = 0.4,
                 alpha: float = 0.6) -> None:
        super().__init__()
        self.motion = nn.Sequential(nn.Linear(feat + 4, hidden), nn.ReLU(), nn.Linear(hidden, 4))
        self.iou_thresh, self.min_score, self.alpha = iou_thresh, min_score, alpha

    def forward(self, tracks: torch.Tensor, feats: torch.Tensor, dets: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        pred = tracks + 0.1 * self.motion(torch.cat([tracks, feats], -1))
        dets = dets[scores > self.min_score]  # BREAK: low-score columns can get IoU -1 so they never match
        iou = box_iou(pred, dets)
        updated = pred.clone()
        for i, j in greedy_match(iou, self.iou_thresh):
            updated[i] = self.alpha * dets[j] + (1 - self.alpha) * pred[i]
        return updated


def build_iou_tracker() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(21)
    xy = torch.rand(5, 2) * 10
    tracks = torch.cat([xy, xy + 2 + torch.rand(5, 2)], -1)
    dets = torch.cat([tracks[[3, 0, 4, 1]] + 0.4 * torch.randn(4, 4), torch.tensor([[20.0, 20, 22, 23], [1, 1, 3, 3]])])
    scores = torch.tensor([0.9, 0.3, 0.8, 0.7, 0.95, 0.2])
    return MotionTracker(), (tracks, torch.randn(5, 6), dets, scores)


class MotionClipSampler(nn.Module):
    """Picks the k frames with the most motion from each (padded) video and contrasts two views' clip embeddings."""

    def __init__(self, k: int = 4, c: int = 3, hw: int = 4, dim: int = 8, tau: float = 0.1) -> None:
        super().__init__()
        self.frame_proj = nn.Linear(c * hw * hw, dim)
        self.k, self.tau = k, tau

    def embed(self, video: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        motion = (video[:, 1:] - video[:, :-1]).abs().mean(dim=(2, 3, 4))
        score = F.pad(motion, (1, 0), value=0.0)
        for b, n in enumerate(lengths.tolist()):  # BREAK: positions past each length can be masked with arange < lengths
            score[b, n:] = float("-inf")
        idx = score.topk(self.k, dim=1).indices.sort(dim=1).values
        clip = video[torch.arange(len(video))[:, None], idx]
        return F.normalize(self.frame_proj(clip.flatten(2)).mean(1), dim=-1)

    def forward(self, video_a: torch.Tensor, video_b: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        za, zb = self.embed(video_a, lengths), self.embed(video_b, lengths)
        logits = za @ zb.T / self.tau
        return F.cross_entropy(logits, torch.arange(len(za))), logits


def build_clip_sampler() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(22)
    lengths = torch.tensor([8, 6, 5])
    video = torch.randn(3, 8, 3, 4, 4)
    valid = (torch.arange(8)[None] < lengths[:, None]).float()[..., None, None, None]
    video = video * valid
    return MotionClipSampler(), (video, (video + 0.1 * torch.randn_like(video)) * valid, lengths)


class SILogDepth(nn.Module):
    """A tiny depth head trained with the scale-invariant log loss (Eigen et al.) over valid pixels only."""

    def __init__(self, ch: int = 6, lam: float = 0.85, min_depth: float = 0.1, max_depth: float = 10.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1), nn.ReLU(), nn.Conv2d(ch, 1, 3, padding=1))
        self.lam, self.min_depth, self.max_depth = lam, min_depth, max_depth

    def forward(self, image: torch.Tensor, gt: torch.Tensor) -> dict:
        pred = F.softplus(self.net(image)).squeeze(1) + 1e-3
        valid = (gt > self.min_depth) & (gt < self.max_depth)
        d = torch.log(pred[valid]) - torch.log(gt[valid])  # BREAK: a where over all pixels and sums divided by the valid count
        loss = torch.sqrt((d**2).mean() - self.lam * d.mean() ** 2) * 10.0
        return {"loss": loss, "pred": pred}


def build_depth_silog() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(23)
    gt = torch.rand(2, 6, 6) * 12
    gt[0, :2] = 0.0  # missing lidar returns
    return SILogDepth(), (torch.randn(2, 3, 6, 6), gt)


class OccupancyNet(nn.Module):
    """Voxelises a point cloud around its centre and predicts per-voxel occupancy logits with a small 3D CNN."""

    def __init__(self, res: int = 6, ch: int = 4, margin: float = 0.9) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv3d(1, ch, 3, padding=1), nn.ReLU(), nn.Conv3d(ch, 1, 1))
        self.res, self.margin = res, margin

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        center = points.mean(0)
        half = float((points - center).abs().max()) * self.margin  # BREAK: the half-extent can stay a 0-d tensor
        grid = voxelize(points, center - half, 2 * half / self.res, self.res)
        return self.conv(grid[None, None])[0, 0]


def build_voxel_occupancy() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(24)
    return OccupancyNet(), (torch.randn(40, 3),)
