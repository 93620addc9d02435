"""Point clouds: CVMI-Lab/PAConv's scene-segmentation training iteration (its ``train`` loop body, borrowed from
hszhao/semseg: ``intersectionAndUnionGPU`` on the point labels, the numpy meters, the running accuracy and
``loss.item()``) on WangYueFt/dgcnn's ``DGCNN_semseg`` (``knn`` / ``get_graph_feature`` edge features with the batch
offsets, EdgeConv blocks, the global max feature repeated over the points)."""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: F401
from torch import nn

from .helpers import AverageMeter, intersectionAndUnionGPU, seeded


def knn(x, k):
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x**2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)

    idx = pairwise_distance.topk(k=k, dim=-1)[1]  # (batch_size, num_points, k)
    return idx


def get_graph_feature(x, k=20, idx=None, dim9=False):
    batch_size = x.size(0)
    num_points = x.size(2)
    x = x.view(batch_size, -1, num_points)
    if idx is None:
        if dim9 is False:
            idx = knn(x, k=k)  # (batch_size, num_points, k)
        else:
            idx = knn(x[:, 6:], k=k)
    device = x.device

    idx_base = torch.arange(0, batch_size, device=device).view(-1, 1, 1) * num_points

    idx = idx + idx_base

    idx = idx.view(-1)

    _, num_dims, _ = x.size()

    x = x.transpose(2, 1).contiguous()  # (batch_size, num_points, num_dims)  -> (batch_size*num_points, num_dims) #   batch_size * num_points * k + range(0, batch_size*num_points)
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)

    feature = torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()

    return feature  # (batch_size, 2*num_dims, num_points, k)


class DGCNN_semseg(nn.Module):
    def __init__(self, k=6, emb_dims=32, num_classes=5):
        super().__init__()
        self.k = k
        self.bn1 = nn.BatchNorm2d(16)
        self.bn2 = nn.BatchNorm2d(16)
        self.bn3 = nn.BatchNorm2d(16)
        self.bn4 = nn.BatchNorm1d(emb_dims)
        self.bn5 = nn.BatchNorm1d(32)
        self.conv1 = nn.Sequential(nn.Conv2d(18, 16, kernel_size=1, bias=False), self.bn1, nn.LeakyReLU(negative_slope=0.2))
        self.conv2 = nn.Sequential(nn.Conv2d(32, 16, kernel_size=1, bias=False), self.bn2, nn.LeakyReLU(negative_slope=0.2))
        self.conv3 = nn.Sequential(nn.Conv2d(32, 16, kernel_size=1, bias=False), self.bn3, nn.LeakyReLU(negative_slope=0.2))
        self.conv6 = nn.Sequential(nn.Conv1d(48, emb_dims, kernel_size=1, bias=False), self.bn4, nn.LeakyReLU(negative_slope=0.2))
        self.conv7 = nn.Sequential(nn.Conv1d(emb_dims + 48, 32, kernel_size=1, bias=False), self.bn5, nn.LeakyReLU(negative_slope=0.2))
        self.conv9 = nn.Conv1d(32, num_classes, kernel_size=1, bias=False)

    def forward(self, x):
        num_points = x.size(2)

        x = get_graph_feature(x, k=self.k, dim9=True)  # (batch_size, 9, num_points) -> (batch_size, 9*2, num_points, k)
        x1 = self.conv1(x).max(dim=-1, keepdim=False)[0]

        x = get_graph_feature(x1, k=self.k)
        x2 = self.conv2(x).max(dim=-1, keepdim=False)[0]

        x = get_graph_feature(x2, k=self.k)
        x3 = self.conv3(x).max(dim=-1, keepdim=False)[0]

        x = torch.cat((x1, x2, x3), dim=1)

        x = self.conv6(x)
        x = x.max(dim=-1, keepdim=True)[0]

        x = x.repeat(1, 1, num_points)
        x = torch.cat((x, x1, x2, x3), dim=1)

        x = self.conv7(x)
        x = self.conv9(x)
        return x


class TrainIteration(nn.Module):
    """One iteration of PAConv's ``train`` for S3DIS (batch of 9-d points, ignore label 255) up to the backward, which the
    check's own backward of the returned loss stands in for (the statistics are taken after it, on the same output)."""

    def __init__(self, classes=5, ignore_label=255):
        super().__init__()
        self.model = DGCNN_semseg(num_classes=classes)
        self.criterion = nn.CrossEntropyLoss(ignore_index=ignore_label)
        self.classes = classes
        self.ignore_label = ignore_label
        self.loss_meter = AverageMeter()
        self.intersection_meter = AverageMeter()
        self.union_meter = AverageMeter()
        self.target_meter = AverageMeter()

    def forward(self, points, target):
        output = self.model(points)
        loss = self.criterion(output, target)

        output = output.max(1)[1]
        n = points.size(0)
        intersection, union, target = intersectionAndUnionGPU(output, target, self.classes, self.ignore_label)
        intersection, union, target = intersection.cpu().numpy(), union.cpu().numpy(), target.cpu().numpy()
        self.intersection_meter.update(intersection), self.union_meter.update(union), self.target_meter.update(target)

        accuracy = sum(self.intersection_meter.val) / (sum(self.target_meter.val) + 1e-10)
        self.loss_meter.update(loss.item(), n)  # BREAK: the meter's sums work on a 0-d tensor: pass the detached loss
        return loss, accuracy, self.intersection_meter.sum, self.union_meter.sum


def build_paconv_dgcnn_train():
    seeded(1612)
    it = TrainIteration().train()
    points = torch.randn(2, 9, 24)
    target = torch.randint(0, 5, (2, 24))
    target[:, :4] = 255
    return it, (points, target)
