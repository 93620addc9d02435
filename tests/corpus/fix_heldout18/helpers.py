"""Shared utilities of the eighteenth held-out set: seeding, an in-memory ``SummaryWriter`` stand-in, the
``AverageMeter`` of pytorch/examples (RepDistiller, U2PL and Bayesian-Crowd-Counting each carry a copy),
RepDistiller's top-k ``accuracy``, numpy stand-ins for the ``sklearn.metrics`` scores the evaluation scripts call
(``roc_auc_score``, ``average_precision_score``), reid-strong-baseline's ``CrossEntropyLabelSmooth`` and
Ultra-Fast-Lane-Detection's ``SoftmaxFocalLoss``."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def seeded(seed: int) -> None:
    """Seed every RNG the programs draw from (torch, numpy, Python's random)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class SummaryWriter:
    """The part of tensorboard's ``SummaryWriter`` the scripts use, kept in memory."""

    def __init__(self, log_dir=None):
        self.log_dir = log_dir
        self.scalars = defaultdict(list)
        self.histograms = defaultdict(list)

    def add_scalar(self, tag, scalar_value, global_step=None):
        self.scalars[tag].append((global_step, scalar_value))

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None):
        for tag, value in tag_scalar_dict.items():
            self.add_scalar(main_tag + "/" + tag, value, global_step)

    def add_histogram(self, tag, values, global_step=None):
        self.histograms[tag].append((global_step, values))


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


# ------------------------------------------------------------------ HobbitLong/RepDistiller helper/util.py


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# ------------------------------------------------------------------ sklearn.metrics stand-ins (binary, numpy)


def roc_auc_score(y_true, y_score):
    """Area under the ROC curve of one binary problem (``sklearn.metrics.roc_auc_score``, untied scores):
    the Mann-Whitney statistic of the positives' ranks."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_score = np.asarray(y_score, dtype=np.float64)
    ranks = np.argsort(np.argsort(y_score)) + 1.0
    n_pos = np.sum(y_true)
    n_neg = y_true.shape[0] - n_pos
    return (np.sum(ranks * y_true) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def average_precision_score(y_true, y_score):
    """Average precision of one binary problem (``sklearn.metrics.average_precision_score``, untied scores)."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_score = np.asarray(y_score, dtype=np.float64)
    order = np.argsort(-y_score)
    hits = y_true[order]
    precision = np.cumsum(hits) / np.arange(1, hits.shape[0] + 1)
    return np.sum(precision * hits) / np.sum(hits)


# ------------------------------------------------------------------ michuanhaohao/reid-strong-baseline layers/triplet_loss.py


class CrossEntropyLabelSmooth(nn.Module):
    """Cross entropy loss with label smoothing regularizer.

    Reference:
    Szegedy et al. Rethinking the Inception Architecture for Computer Vision. CVPR 2016.
    Equation: y = (1 - epsilon) * y + epsilon / K.

    Args:
        num_classes (int): number of classes.
        epsilon (float): weight.
    """

    def __init__(self, num_classes, epsilon=0.1, use_gpu=True):
        super().__init__()
        self.num_classes = num_classes
        self.epsilon = epsilon
        self.use_gpu = use_gpu
        self.logsoftmax = nn.LogSoftmax(dim=1)

    def forward(self, inputs, targets):
        """
        Args:
            inputs: prediction matrix (before softmax) with shape (batch_size, num_classes)
            targets: ground truth labels with shape (num_classes)
        """
        log_probs = self.logsoftmax(inputs)
        targets = torch.zeros(log_probs.size()).scatter_(1, targets.unsqueeze(1).data.cpu(), 1)
        targets = (1 - self.epsilon) * targets + self.epsilon / self.num_classes
        loss = (-targets * log_probs).mean(0).sum()
        return loss


# ------------------------------------------------------------------ cfzd/Ultra-Fast-Lane-Detection utils/loss.py


class SoftmaxFocalLoss(nn.Module):
    def __init__(self, gamma, ignore_lb=255, *args, **kwargs):
        super().__init__()
        self.gamma = gamma
        self.nll = nn.NLLLoss(ignore_index=ignore_lb)

    def forward(self, logits, labels):
        scores = F.softmax(logits, dim=1)
        factor = torch.pow(1.0 - scores, self.gamma)
        log_score = F.log_softmax(logits, dim=1)
        log_score = factor * log_score
        loss = self.nll(log_score, labels)
        return loss
