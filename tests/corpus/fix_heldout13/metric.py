"""Few-shot learning: orobix/Prototypical-Networks-for-Few-shot-Learning-PyTorch's ``ProtoNet`` trained by
``prototypical_loss`` (classes from ``torch.unique`` of the episode's targets, support and query indices per class
through ``nonzero``, the query count read back with ``.item()``) on an episode from its batch sampler."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ Prototypical Networks (orobix)


def conv_block(in_channels, out_channels):
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.BatchNorm2d(out_channels), nn.ReLU(), nn.MaxPool2d(2))


class ProtoNet(nn.Module):
    def __init__(self, x_dim=1, hid_dim=8, z_dim=8):
        super().__init__()
        self.encoder = nn.Sequential(conv_block(x_dim, hid_dim), conv_block(hid_dim, z_dim))

    def forward(self, x):
        x = self.encoder(x)
        return x.view(x.size(0), -1)


def euclidean_dist(x, y):
    """Compute euclidean distance between two tensors."""
    # x: N x D
    # y: M x D
    n = x.size(0)
    m = y.size(0)
    d = x.size(1)
    if d != y.size(1):
        raise Exception
    x = x.unsqueeze(1).expand(n, m, d)
    y = y.unsqueeze(0).expand(n, m, d)
    return torch.pow(x - y, 2).sum(2)


def prototypical_loss(input, target, n_support):
    """Loss and accuracy of the query samples against the barycentres of each class's support samples."""
    target_cpu = target.to("cpu")
    input_cpu = input.to("cpu")

    def supp_idxs(c):
        # FIXME when torch will support where as np
        return target_cpu.eq(c).nonzero()[:n_support].squeeze(1)  # BREAK: the prototype is the mean over the first n_support members: a mask from eq(c) & (cumsum <= n_support)

    # FIXME when torch.unique will be available on cuda too
    classes = torch.unique(target_cpu)  # BREAK must-not: the episode's classes set the number of prototypes and every shape after it
    n_classes = len(classes)
    # FIXME when torch will support where as np
    # assuming n_query, n_target constants
    n_query = target_cpu.eq(classes[0].item()).sum().item() - n_support  # BREAK must-not: n_query is a view size of the log-probabilities; it must be a Python int

    support_idxs = list(map(supp_idxs, classes))

    prototypes = torch.stack([input_cpu[idx_list].mean(0) for idx_list in support_idxs])
    # FIXME when torch will support where as np
    query_idxs = torch.stack(list(map(lambda c: target_cpu.eq(c).nonzero()[n_support:], classes))).view(-1)  # BREAK: a stable argsort of the targets groups each class's indices in order; drop the first n_support of each row

    query_samples = input.to("cpu")[query_idxs]
    dists = euclidean_dist(query_samples, prototypes)

    log_p_y = F.log_softmax(-dists, dim=1).view(n_classes, n_query, -1)

    target_inds = torch.arange(0, n_classes)
    target_inds = target_inds.view(n_classes, 1, 1)
    target_inds = target_inds.expand(n_classes, n_query, 1).long()

    loss_val = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()
    _, y_hat = log_p_y.max(2)
    acc_val = y_hat.eq(target_inds.squeeze(2)).float().mean()

    return loss_val, acc_val


class ProtoTrainStep(nn.Module):
    """One episode of ``train()`` in ``train.py``, without the optimizer."""

    def __init__(self, num_support=2):
        super().__init__()
        self.model = ProtoNet()
        self.num_support = num_support

    def forward(self, x, y):
        model_output = self.model(x)
        loss, acc = prototypical_loss(model_output, target=y, n_support=self.num_support)
        return loss, acc


def build_protonet_loss():
    seeded(1316)
    # a 4-way episode from the PrototypicalBatchSampler: 2 support + 3 query samples per class, shuffled
    classes = torch.tensor([7, 2, 11, 5])
    y = classes.repeat_interleave(5)[torch.randperm(20)]
    x = torch.randn(20, 1, 8, 8) + y.view(-1, 1, 1, 1).float() * 0.1
    return ProtoTrainStep(), (x, y)
