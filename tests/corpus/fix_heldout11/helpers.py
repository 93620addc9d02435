"""Shared utilities of the eleventh held-out set: seeding, PyG-style scatter, PointNet++'s sampling and
grouping, a masked mean, a stats logger in the style of pymarl's ``Logger``, a tiny MLP."""

from __future__ import annotations

import logging
import random
from collections import defaultdict

import numpy as np
import torch
from torch import nn

logger = logging.getLogger(__name__)


def seeded(seed: int) -> None:
    """Seed every RNG the programs draw from (torch, numpy, Python's random)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mlp(sizes: list[int], act: type[nn.Module] = nn.ReLU, last_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(act())
    return nn.Sequential(*layers)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set."""
    return x[mask.bool()].mean()  # BREAK: a weighted sum over the mask divided by its count


def scatter_sum(src: torch.Tensor, index: torch.Tensor, dim: int = 0, dim_size: int | None = None) -> torch.Tensor:
    if dim_size is None:
        dim_size = int(index.max()) + 1  # BREAK: callers pass dim_size (the node / point count they know)
    size = list(src.shape)
    size[dim] = dim_size
    index = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src) if dim == 0 else index
    return src.new_zeros(size).scatter_add_(dim, index, src)


def scatter_mean(src: torch.Tensor, index: torch.Tensor, dim_size: int | None = None) -> torch.Tensor:
    out = scatter_sum(src, index, 0, dim_size)
    count = scatter_sum(torch.ones_like(src[:, :1]), index, 0, out.size(0)).clamp(min=1)
    return out / count


# ------------------------------------------------------------------ PointNet++ (yanx27/Pointnet_Pointnet2_pytorch)


def square_distance(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    B, N, _ = src.shape
    _, M, _ = dst.shape
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src**2, -1).view(B, N, 1)
    dist += torch.sum(dst**2, -1).view(B, 1, M)
    return dist


def index_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    B = points.shape[0]
    view_shape = list(idx.shape)
    view_shape[1:] = [1] * (len(view_shape) - 1)
    repeat_shape = list(idx.shape)
    repeat_shape[0] = 1
    batch_indices = torch.arange(B, dtype=torch.long).view(view_shape).repeat(repeat_shape)
    return points[batch_indices, idx, :]


def farthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    B, N, C = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N) * 1e10
    farthest = torch.randint(0, N, (B,), dtype=torch.long)
    batch_indices = torch.arange(B, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]  # BREAK: distance = torch.where(mask, dist, distance)
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    B, N, C = xyz.shape
    _, S, _ = new_xyz.shape
    group_idx = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius**2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]  # BREAK: group_idx = torch.where(mask, group_first, group_idx)
    return group_idx


# ------------------------------------------------------------------ pymarl-style stats logger


class StatsLogger:
    """Keeps every logged value, as pymarl's ``Logger.log_stat`` does, and echoes it to ``logging``."""

    def __init__(self) -> None:
        self.stats: dict[str, list[tuple[int, float]]] = defaultdict(list)

    def log_stat(self, key: str, value: float, t: int) -> None:
        self.stats[key].append((t, value))
        logger.info("t_env %d  %s: %.4f", t, key, value)  # BREAK must-not: the stat is echoed to the log when it is recorded
