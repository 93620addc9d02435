"""Shared utilities of the sixteenth held-out set: seeding, the ``MetricLogger`` / ``SmoothedValue`` pair and the
``TensorboardLogger`` that ConvNeXt (like DeiT and BEiT) copies from torchvision's references, pytorch/examples' ``AverageMeter``, hszhao/semseg's
``intersectionAndUnionGPU`` (also copied by the point-cloud repositories of the same lineage), and the SSD box
utilities (``point_form``, ``intersect``, ``jaccard``, ``decode``) that both Pytorch_Retinaface and YOLACT carry
from amdegroot/ssd.pytorch."""

from __future__ import annotations

import random
from collections import defaultdict, deque

import numpy as np
import torch


def seeded(seed: int) -> None:
    """Seed every RNG the programs draw from (torch, numpy, Python's random)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ------------------------------------------------------------------ ConvNeXt / DeiT utils.py (torchvision references)


class SmoothedValue:
    """Track a series of values and provide access to smoothed values over a window or the global series average."""

    def __init__(self, window_size=20, fmt=None):
        if fmt is None:
            fmt = "{median:.4f} ({global_avg:.4f})"
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0
        self.fmt = fmt

    def update(self, value, num=1):
        self.deque.append(value)
        self.count += num
        self.total += value * num

    @property
    def median(self):
        d = torch.tensor(list(self.deque))
        return d.median().item()

    @property
    def avg(self):
        d = torch.tensor(list(self.deque), dtype=torch.float32)
        return d.mean().item()

    @property
    def global_avg(self):
        return self.total / self.count

    @property
    def value(self):
        return self.deque[-1]


class MetricLogger:
    def __init__(self, delimiter="\t"):
        self.meters = defaultdict(SmoothedValue)
        self.delimiter = delimiter

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if v is None:
                continue
            if isinstance(v, torch.Tensor):
                v = v.item()  # BREAK: the meters can sum 0-d tensors: keep the (detached) tensor
            assert isinstance(v, (float, int))
            self.meters[k].update(v)

    def snapshot(self):
        return {name: meter.value for name, meter in self.meters.items()}


class TensorboardLogger:
    """ConvNeXt's (and BEiT's) ``utils.TensorboardLogger`` over a writer that keeps its scalars."""

    def __init__(self, writer):
        self.writer = writer
        self.step = 0

    def set_step(self, step=None):
        if step is not None:
            self.step = step
        else:
            self.step += 1

    def update(self, head="scalar", step=None, **kwargs):
        for k, v in kwargs.items():
            if v is None:
                continue
            if isinstance(v, torch.Tensor):
                v = v.item()  # BREAK: the writer takes a 0-d tensor as well: keep the (detached) tensor
            assert isinstance(v, (float, int))
            self.writer.add_scalar(head + "/" + k, v, self.step if step is None else step)


# ------------------------------------------------------------------ pytorch/examples imagenet/main.py


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


# ------------------------------------------------------------------ hszhao/semseg util/util.py


def intersectionAndUnionGPU(output, target, K, ignore_index=255):
    # 'K' classes, output and target sizes are N or N * L or N * H * W, each value in range 0 to K - 1.
    assert output.dim() in [1, 2, 3]
    assert output.shape == target.shape
    output = output.view(-1)
    target = target.view(-1)
    output[target == ignore_index] = ignore_index
    intersection = output[output == target]  # BREAK: histogram the agreeing pixels by masking the others out of range (a where to -1) instead of selecting them
    # (torch.histc has no integer kernel on the CPU: the labels are counted as floats)
    area_intersection = torch.histc(intersection.float(), bins=K, min=0, max=K - 1)
    area_output = torch.histc(output.float(), bins=K, min=0, max=K - 1)
    area_target = torch.histc(target.float(), bins=K, min=0, max=K - 1)
    area_union = area_output + area_target - area_intersection
    return area_intersection, area_union, area_target


# ------------------------------------------------------------------ amdegroot/ssd.pytorch layers/box_utils.py


def point_form(boxes):
    """Convert prior_boxes to (xmin, ymin, xmax, ymax) representation for comparison to point form ground truth data."""
    return torch.cat((boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2), 1)


def intersect(box_a, box_b):
    """The batched version YOLACT keeps: [n, A, 4] and [n, B, 4] boxes, their [n, A, B] intersections."""
    n = box_a.size(0)
    A = box_a.size(1)
    B = box_b.size(1)
    max_xy = torch.min(box_a[:, :, 2:].unsqueeze(2).expand(n, A, B, 2), box_b[:, :, 2:].unsqueeze(1).expand(n, A, B, 2))
    min_xy = torch.max(box_a[:, :, :2].unsqueeze(2).expand(n, A, B, 2), box_b[:, :, :2].unsqueeze(1).expand(n, A, B, 2))
    return torch.clamp(max_xy - min_xy, min=0).prod(3)  # inter


def jaccard(box_a, box_b, iscrowd: bool = False):
    """Compute the jaccard overlap of two sets of boxes (batched when the boxes are 3-d)."""
    use_batch = True
    if box_a.dim() == 2:
        use_batch = False
        box_a = box_a[None, ...]
        box_b = box_b[None, ...]

    inter = intersect(box_a, box_b)
    area_a = ((box_a[:, :, 2] - box_a[:, :, 0]) * (box_a[:, :, 3] - box_a[:, :, 1])).unsqueeze(2).expand_as(inter)  # [A,B]
    area_b = ((box_b[:, :, 2] - box_b[:, :, 0]) * (box_b[:, :, 3] - box_b[:, :, 1])).unsqueeze(1).expand_as(inter)  # [A,B]
    union = area_a + area_b - inter

    out = inter / area_a if iscrowd else inter / union
    return out if use_batch else out.squeeze(0)


def decode(loc, priors, variances):
    """Decode locations from predictions using priors to undo the encoding we did for offset regression at train time."""
    boxes = torch.cat((priors[:, :2] + loc[:, :2] * variances[0] * priors[:, 2:], priors[:, 2:] * torch.exp(loc[:, 2:] * variances[1])), 1)
    boxes[:, :2] -= boxes[:, 2:] / 2
    boxes[:, 2:] += boxes[:, :2]
    return boxes
