"""Point clouds and molecules: PointNet++ SSG classification (yanx27/Pointnet_Pointnet2_pytorch), a
voxelised segmentation net with torchsparse-style ``sparse_quantize`` and scatter pooling, and conformer
alignment by Kabsch (EquiBind's ``rigid_transform_Kabsch_3D_torch``) for an RMSD loss."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import farthest_point_sample, index_points, mlp, query_ball_point, scatter_mean, seeded

# ------------------------------------------------------------------ PointNet++ SSG


def sample_and_group(npoint, radius, nsample, xyz, points):
    B, N, C = xyz.shape
    S = npoint
    fps_idx = farthest_point_sample(xyz, npoint)
    new_xyz = index_points(xyz, fps_idx)
    idx = query_ball_point(radius, nsample, xyz, new_xyz)
    grouped_xyz = index_points(xyz, idx)
    grouped_xyz_norm = grouped_xyz - new_xyz.view(B, S, 1, C)
    if points is not None:
        grouped_points = index_points(points, idx)
        new_points = torch.cat([grouped_xyz_norm, grouped_points], dim=-1)
    else:
        new_points = grouped_xyz_norm
    return new_xyz, new_points


def sample_and_group_all(xyz, points):
    B, N, C = xyz.shape
    new_xyz = torch.zeros(B, 1, C)
    grouped_xyz = xyz.view(B, 1, N, C)
    if points is not None:
        new_points = torch.cat([grouped_xyz, points.view(B, 1, N, -1)], dim=-1)
    else:
        new_points = grouped_xyz
    return new_xyz, new_points


class PointNetSetAbstraction(nn.Module):
    def __init__(self, npoint, radius, nsample, in_channel, mlp, group_all):
        super().__init__()
        self.npoint, self.radius, self.nsample, self.group_all = npoint, radius, nsample, group_all
        self.mlp_convs = nn.ModuleList()
        self.mlp_bns = nn.ModuleList()
        last_channel = in_channel
        for out_channel in mlp:
            self.mlp_convs.append(nn.Conv2d(last_channel, out_channel, 1))
            self.mlp_bns.append(nn.BatchNorm2d(out_channel))
            last_channel = out_channel

    def forward(self, xyz, points):
        xyz = xyz.permute(0, 2, 1)
        if points is not None:
            points = points.permute(0, 2, 1)
        if self.group_all:
            new_xyz, new_points = sample_and_group_all(xyz, points)
        else:
            new_xyz, new_points = sample_and_group(self.npoint, self.radius, self.nsample, xyz, points)
        new_points = new_points.permute(0, 3, 2, 1)
        for i, conv in enumerate(self.mlp_convs):
            bn = self.mlp_bns[i]
            new_points = F.relu(bn(conv(new_points)))
        new_points = torch.max(new_points, 2)[0]
        new_xyz = new_xyz.permute(0, 2, 1)
        return new_xyz, new_points


class PointNet2Cls(nn.Module):
    def __init__(self, num_class=5):
        super().__init__()
        self.sa1 = PointNetSetAbstraction(npoint=8, radius=0.4, nsample=4, in_channel=3, mlp=[8, 16], group_all=False)
        self.sa2 = PointNetSetAbstraction(npoint=None, radius=None, nsample=None, in_channel=16 + 3, mlp=[16, 32], group_all=True)
        self.fc = nn.Linear(32, num_class)

    def forward(self, xyz, target):
        B, _, _ = xyz.shape
        l1_xyz, l1_points = self.sa1(xyz, None)
        l2_xyz, l2_points = self.sa2(l1_xyz, l1_points)
        x = F.log_softmax(self.fc(l2_points.view(B, 32)), -1)
        return F.nll_loss(x, target), x


def build_pointnet2_ssg():
    seeded(30)
    model = PointNet2Cls()
    return model, (torch.rand(2, 3, 24), torch.tensor([1, 3]))


# ------------------------------------------------------------------ voxel segmentation (torchsparse-style quantize)


def sparse_quantize(coords, voxel_size):
    vox = torch.floor(coords / voxel_size).long()
    vox = vox - vox.min(0).values
    keys = (vox[:, 0] * 1024 + vox[:, 1]) * 1024 + vox[:, 2]
    unique_keys, inverse = torch.unique(keys, return_inverse=True)  # BREAK: sort the keys and number the runs with a cumsum
    return unique_keys, inverse


class VoxelSegNet(nn.Module):
    def __init__(self, in_ch=4, num_classes=6, voxel_size=0.25):
        super().__init__()
        self.voxel_size = voxel_size
        self.point_mlp = mlp([in_ch, 16, 16], last_act=True)
        self.voxel_mlp = mlp([16, 16, 16], last_act=True)
        self.head = nn.Linear(16 + in_ch, num_classes)

    def forward(self, coords, feats, labels):
        _, inverse = sparse_quantize(coords, self.voxel_size)
        voxel_feats = scatter_mean(self.point_mlp(feats), inverse)
        voxel_feats = self.voxel_mlp(voxel_feats)
        logits = self.head(torch.cat([voxel_feats[inverse], feats], dim=1))
        loss = F.cross_entropy(logits, labels, ignore_index=255)
        return logits, loss


def build_voxel_seg():
    seeded(31)
    model = VoxelSegNet()
    labels = torch.randint(0, 6, (40,))
    labels[::7] = 255
    return model, (torch.rand(40, 3), torch.randn(40, 4), labels)


# ------------------------------------------------------------------ Kabsch alignment (EquiBind)


def rigid_transform_Kabsch_3D_torch(A, B):
    # A, B: 3 x N; returns R, t with R @ A + t ~ B
    centroid_A = torch.mean(A, dim=1, keepdim=True)
    centroid_B = torch.mean(B, dim=1, keepdim=True)
    Am = A - centroid_A
    Bm = B - centroid_B
    H = Am @ Bm.T
    U, S, Vt = torch.linalg.svd(H)
    R = Vt.T @ U.T
    # special reflection case
    if torch.linalg.det(R) < 0:  # BREAK: flip the last axis by torch.sign(det) in the diagonal matrix
        SS = torch.diag(torch.tensor([1.0, 1.0, -1.0], device=A.device))
        R = (Vt.T @ SS) @ U.T
    assert math.fabs(torch.linalg.det(R) - 1) < 3e-3  # BREAK must-not: a bad rotation has to raise in Python before the loss is used
    t = -R @ centroid_A + centroid_B
    return R, t


class ConformerHead(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.net = mlp([dim + 3, 32, 3])

    def forward(self, h, noisy_pos, true_pos, num_atoms):
        pred = noisy_pos + self.net(torch.cat([h, noisy_pos], dim=-1))
        rmsds = []
        start = 0
        for n in num_atoms:
            p, q = pred[start:start + n], true_pos[start:start + n]
            R, t = rigid_transform_Kabsch_3D_torch(q.T.detach(), p.T.detach())
            q_aligned = (R @ q.T + t).T
            rmsds.append(torch.sqrt(((p - q_aligned) ** 2).sum(-1).mean()))
            start += n
        rmsds = torch.stack(rmsds)
        return rmsds.mean(), rmsds


def build_kabsch_rmsd():
    seeded(32)
    model = ConformerHead()
    num_atoms = [5, 7, 4]
    true_pos = torch.randn(16, 3)
    true_pos[5:12, 0] = -true_pos[5:12, 0]
    return model, (torch.randn(16, 8), true_pos + 0.3 * torch.randn(16, 3), true_pos, num_atoms)
