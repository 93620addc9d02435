"""PointNet++ set abstraction: farthest point sampling and ball query, written as in the common port."""

from __future__ import annotations

import torch
from torch import nn

from .helpers import index_points


def square_distance(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    dist = -2 * torch.matmul(src, dst.permute(0, 2, 1))
    dist += torch.sum(src**2, -1).unsqueeze(-1)
    dist += torch.sum(dst**2, -1).unsqueeze(1)
    return dist


def farthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    B, N, _ = xyz.shape
    centroids = torch.zeros(B, npoint, dtype=torch.long)
    distance = torch.ones(B, N) * 1e10
    farthest = torch.randint(0, N, (B,), dtype=torch.long)
    batch_indices = torch.arange(B, dtype=torch.long)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch_indices, farthest, :].view(B, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)
        mask = dist < distance
        distance[mask] = dist[mask]  # BREAK: torch.where(mask, dist, distance) keeps the running minimum
        farthest = torch.max(distance, -1)[1]
    return centroids


def query_ball_point(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    B, N, _ = xyz.shape
    S = new_xyz.shape[1]
    group_idx = torch.arange(N, dtype=torch.long).view(1, 1, N).repeat([B, S, 1])
    sqrdists = square_distance(new_xyz, xyz)
    group_idx[sqrdists > radius**2] = N
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, 0].view(B, S, 1).repeat([1, 1, nsample])
    mask = group_idx == N
    group_idx[mask] = group_first[mask]  # BREAK: torch.where(mask, group_first, group_idx)
    return group_idx


class PointNetSetAbstraction(nn.Module):
    def __init__(self, npoint: int, radius: float, nsample: int, in_channel: int, mlp: list[int]) -> None:
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        layers: list[nn.Module] = []
        last = in_channel + 3
        for out in mlp:
            layers += [nn.Conv2d(last, out, 1), nn.ReLU()]
            last = out
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz: torch.Tensor, points: torch.Tensor):
        new_xyz = index_points(xyz, farthest_point_sample(xyz, self.npoint))
        idx = query_ball_point(self.radius, self.nsample, xyz, new_xyz)
        grouped_xyz = index_points(xyz, idx) - new_xyz[:, :, None, :]
        grouped = torch.cat([grouped_xyz, index_points(points, idx)], dim=-1)
        new_points = self.mlp(grouped.permute(0, 3, 2, 1)).max(2)[0]
        return new_xyz, new_points.permute(0, 2, 1)


class PointNetClassifier(nn.Module):
    def __init__(self, n_classes: int = 4) -> None:
        super().__init__()
        self.sa = PointNetSetAbstraction(npoint=8, radius=0.5, nsample=6, in_channel=3, mlp=[16, 16])
        self.fc = nn.Linear(16, n_classes)

    def forward(self, xyz: torch.Tensor, normals: torch.Tensor) -> torch.Tensor:
        _, feats = self.sa(xyz, normals)
        return self.fc(feats.max(1)[0])


def build_pointnet_fps():
    torch.manual_seed(8)
    xyz = torch.rand(2, 32, 3)
    normals = torch.nn.functional.normalize(torch.randn(2, 32, 3), dim=-1)
    return PointNetClassifier(), (xyz, normals)
