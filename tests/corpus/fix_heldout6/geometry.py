"""Geometry: a folding decoder trained with a chamfer loss on padded point clouds of different sizes, and an
unsupervised optical-flow loss that warps the second frame and masks occlusions by a forward-backward check."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean


def chamfer_distance(pred: torch.Tensor, gt: torch.Tensor, n_pred: torch.Tensor, n_gt: torch.Tensor) -> torch.Tensor:
    """Per-cloud symmetric chamfer distance between padded batches [B, P, 3] / [B, G, 3] with their point counts."""
    losses = []
    for b, (npr, ngt) in enumerate(zip(n_pred.tolist(), n_gt.tolist(), strict=True)):  # BREAK: masking padded points with an infinite distance keeps each cloud's minima
        d = torch.cdist(pred[b, :npr], gt[b, :ngt]) ** 2
        losses.append(d.min(1).values.mean() + d.min(0).values.mean())
    return torch.stack(losses)


class FoldingDecoder(nn.Module):
    """FoldingNet-style decoder: a latent code concatenated to a fixed 2-D grid, folded into 3-D points."""

    def __init__(self, latent: int = 8, n_points: int = 20, hidden: int = 16) -> None:
        super().__init__()
        g = torch.linspace(-1, 1, 5)
        grid = torch.stack(torch.meshgrid(g, g[:4], indexing="ij"), -1).reshape(-1, 2)[:n_points]
        self.register_buffer("grid", grid)
        self.fold = nn.Sequential(nn.Linear(latent + 2, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, code: torch.Tensor, gt: torch.Tensor, n_pred: torch.Tensor, n_gt: torch.Tensor) -> torch.Tensor:
        B, P = code.shape[0], self.grid.shape[0]
        pts = self.fold(torch.cat([code[:, None].expand(B, P, -1), self.grid.expand(B, P, 2)], -1))
        return chamfer_distance(pts, gt, n_pred, n_gt).mean()


def build_chamfer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(605)
    return FoldingDecoder(), (torch.randn(3, 8), torch.randn(3, 24, 3), torch.tensor([20, 16, 18]), torch.tensor([24, 19, 11]))


def warp(img: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """Backward-warp ``img`` [B, C, H, W] by ``flow`` [B, 2, H, W] (pixels) with bilinear sampling."""
    _, _, H, W = img.shape
    ys, xs = torch.meshgrid(torch.arange(H, dtype=img.dtype), torch.arange(W, dtype=img.dtype), indexing="ij")
    gx = 2 * (xs + flow[:, 0]) / (W - 1) - 1
    gy = 2 * (ys + flow[:, 1]) / (H - 1) - 1
    return F.grid_sample(img, torch.stack([gx, gy], -1), align_corners=True, padding_mode="border")


class UnsupFlowLoss(nn.Module):
    """UnFlow-style loss: predict forward and backward flow, mark pixels whose forward-backward error exceeds a
    threshold relative to the largest flow magnitude as occluded, average the photometric error over the rest."""

    def __init__(self, ch: int = 3, alpha: float = 0.05, beta: float = 0.3) -> None:
        super().__init__()
        self.flow_net = nn.Sequential(nn.Conv2d(2 * ch, 8, 3, padding=1), nn.Tanh(), nn.Conv2d(8, 4, 3, padding=1))
        self.alpha, self.beta = alpha, beta

    def forward(self, im1: torch.Tensor, im2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flows = 2.0 * self.flow_net(torch.cat([im1, im2], 1))
        fw, bw = flows[:, :2], flows[:, 2:]
        bw_warped = warp(bw, fw)
        fb_err = (fw + bw_warped).pow(2).sum(1)
        mag = fw.pow(2).sum(1) + bw_warped.pow(2).sum(1)
        occ_thresh = self.alpha * float(mag.max()) + self.beta  # BREAK: the threshold can stay a (detached) tensor
        visible = fb_err < occ_thresh
        photo = (im1 - warp(im2, fw)).abs().mean(1)
        return masked_mean(photo.flatten(), visible.flatten()), visible


def build_flow_warp() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(606)
    im1 = torch.rand(1, 3, 8, 10)
    return UnsupFlowLoss(), (im1, torch.roll(im1, 1, dims=3) + 0.02 * torch.randn(1, 3, 8, 10))
