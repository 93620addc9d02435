"""Shared utilities of the fourteenth held-out set: seeding, a small MLP, open-mmlab/mmaction2's
``top_k_accuracy``, ``BaseHead.loss`` and ``BaseRecognizer._parse_losses`` (reached from the video and the audio
recognizers), facebookresearch/SlowFast's ``misc.check_nan_losses`` and ``metrics.topks_correct`` (TimeSformer's
training step and the multi-view test meter) and facebookresearch/detr's ``box_ops`` (OneNet's matcher and loss)."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from datetime import datetime

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


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


# ------------------------------------------------------------------ mmaction2 core/evaluation/accuracy.py


def top_k_accuracy(scores, labels, topk=(1,)):
    """Calculate top k accuracy score.

    Args:
        scores (list[np.ndarray]): Prediction scores for each class.
        labels (list[int]): Ground truth labels.
        topk (tuple[int]): K value for top_k_accuracy. Default: (1, ).

    Returns:
        list[float]: Top k accuracy score for each k.
    """
    res = []
    labels = np.array(labels)[:, np.newaxis]
    for k in topk:
        max_k_preds = np.argsort(scores, axis=1)[:, -k:][:, ::-1]
        match_array = np.logical_or.reduce(max_k_preds == labels, axis=1)  # BREAK: numpy's ufunc reduce is host code: compute the top-k hits in torch (topk indices == labels, any over k) at the call site
        topk_acc_score = match_array.sum() / match_array.shape[0]
        res.append(topk_acc_score)
    return res


# ------------------------------------------------------------------ mmaction2 models/losses, models/heads/base.py


class CrossEntropyLoss(nn.Module):
    """mmaction2's ``CrossEntropyLoss(BaseWeightedLoss)`` with hard labels."""

    def __init__(self, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, cls_score, label, **kwargs):
        loss_cls = F.cross_entropy(cls_score, label, **kwargs)
        return loss_cls * self.loss_weight


class BaseHead(nn.Module):
    """Base class for the recognizers' heads: ``init_weights``, ``forward`` in the subclasses; ``loss`` here."""

    def __init__(self, num_classes, in_channels, loss_cls=None, multi_class=False, label_smooth_eps=0.0, topk=(1, 5)):
        super().__init__()
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.loss_cls = loss_cls if loss_cls is not None else CrossEntropyLoss(loss_weight=1.0)
        self.multi_class = multi_class
        self.label_smooth_eps = label_smooth_eps
        assert isinstance(topk, (int, tuple))
        if isinstance(topk, int):
            topk = (topk,)
        for _topk in topk:
            assert _topk > 0, "Top-k should be larger than 0"
        self.topk = topk

    def loss(self, cls_score, labels, **kwargs):
        """Calculate the loss given output ``cls_score``, target ``labels``."""
        losses = dict()
        if labels.shape == torch.Size([]):
            labels = labels.unsqueeze(0)
        elif labels.dim() == 1 and labels.size()[0] == self.num_classes and cls_score.size()[0] == 1:
            # Fix a bug when training with soft labels and batch size is 1.
            # When using soft labels, `labels` and `cls_socre` share the same
            # shape.
            labels = labels.unsqueeze(0)

        if not self.multi_class and cls_score.size() != labels.size():
            top_k_acc = top_k_accuracy(cls_score.detach().cpu().numpy(), labels.detach().cpu().numpy(), self.topk)
            for k, a in zip(self.topk, top_k_acc, strict=True):
                losses[f"top{k}_acc"] = torch.tensor(a, device=cls_score.device)

        elif self.multi_class and self.label_smooth_eps != 0:
            labels = (1 - self.label_smooth_eps) * labels + self.label_smooth_eps / self.num_classes

        loss_cls = self.loss_cls(cls_score, labels, **kwargs)
        # loss_cls may be dictionary or single tensor
        if isinstance(loss_cls, dict):
            losses.update(loss_cls)
        else:
            losses["loss_cls"] = loss_cls

        return losses


def parse_losses(losses):
    """``BaseRecognizer._parse_losses``: the total loss and the floats the runner's log buffer takes."""
    log_vars = OrderedDict()
    for loss_name, loss_value in losses.items():
        if isinstance(loss_value, torch.Tensor):
            log_vars[loss_name] = loss_value.mean()
        elif isinstance(loss_value, list):
            log_vars[loss_name] = sum(_loss.mean() for _loss in loss_value)
        else:
            raise TypeError(f"{loss_name} is not a tensor or list of tensors")

    loss = sum(_value for _key, _value in log_vars.items() if "loss" in _key)

    log_vars["loss"] = loss
    for loss_name, loss_value in log_vars.items():
        # reduce loss when distributed training (one process here)
        log_vars[loss_name] = loss_value.item()  # BREAK must-not: the runner's log buffer averages Python floats; the values must leave the device here

    return loss, log_vars


# ------------------------------------------------------------------ SlowFast slowfast/utils/misc.py, metrics.py


def check_nan_losses(loss):
    """Determine whether the loss is NaN (not a number)."""
    if math.isnan(loss):  # BREAK must-not: a NaN loss stops training with an exception; the test must run on the host
        raise RuntimeError(f"ERROR: Got NaN losses {datetime.now()}")


def topks_correct(preds, labels, ks):
    """The number of correct predictions for each k in ks (top-k of preds containing the label)."""
    assert preds.size(0) == labels.size(0), "Batch dim of predictions and labels must match"
    # Find the top max_k predictions for each sample
    _top_max_k_vals, top_max_k_inds = torch.topk(preds, max(ks), dim=1, largest=True, sorted=True)
    # (batch_size, max_k) -> (max_k, batch_size).
    top_max_k_inds = top_max_k_inds.t()
    # (batch_size, ) -> (max_k, batch_size).
    rep_max_k_labels = labels.view(1, -1).expand_as(top_max_k_inds)
    # (i, j) = 1 if top i-th prediction for the j-th sample is correct.
    top_max_k_correct = top_max_k_inds.eq(rep_max_k_labels)
    # Compute the number of topk correct predictions for each k.
    topks_correct = [top_max_k_correct[:k, :].float().sum() for k in ks]
    return topks_correct


# ------------------------------------------------------------------ detr util/box_ops.py


def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def box_xyxy_to_cxcywh(x):
    x0, y0, x1, y1 = x.unbind(-1)
    b = [(x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0), (y1 - y0)]
    return torch.stack(b, dim=-1)


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1, boxes2):
    area1 = box_area(boxes1)
    area2 = box_area(boxes2)

    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])  # [N,M,2]
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])  # [N,M,2]

    wh = (rb - lt).clamp(min=0)  # [N,M,2]
    inter = wh[:, :, 0] * wh[:, :, 1]  # [N,M]

    union = area1[:, None] + area2 - inter

    iou = inter / union
    return iou, union


def generalized_box_iou(boxes1, boxes2):
    """Generalized IoU from https://giou.stanford.edu/; the boxes are [x0, y0, x1, y1]."""
    # degenerate boxes gives inf / nan results
    # so do an early check
    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
    assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
    iou, union = box_iou(boxes1, boxes2)

    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])

    wh = (rb - lt).clamp(min=0)  # [N,M,2]
    area = wh[:, :, 0] * wh[:, :, 1]

    return iou - (area - union) / area
