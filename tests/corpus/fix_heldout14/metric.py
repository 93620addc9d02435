"""Face recognition: deepinsight/insightface's arcface_torch training step on one rank (``PartialFC_V2``'s label
bookkeeping: the loader's labels squeezed in place, the other ranks' classes set to -1 and the local ones shifted by
the rank's first class; the ``ArcFace`` additive angular margin with its ``easy_margin`` switch applied at
``torch.where(labels != -1)``, the cross entropy of the margin logits)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ insightface recognition/arcface_torch


class ArcFace(nn.Module):
    """ArcFace (https://arxiv.org/pdf/1801.07698v1.pdf)."""

    def __init__(self, s=64.0, margin=0.5, easy_margin=False):
        super().__init__()
        self.scale = s
        self.cos_m = math.cos(margin)
        self.sin_m = math.sin(margin)
        self.theta = math.cos(math.pi - margin)
        self.sinmm = math.sin(math.pi - margin) * margin
        self.easy_margin = easy_margin

    def forward(self, logits: torch.Tensor, labels: torch.Tensor):
        index = torch.where(labels != -1)[0]  # BREAK: no row list: a one-hot mask of each row's label (rows with -1 masked out) and torch.where over the whole logits
        target_logit = logits[index, labels[index].view(-1)]

        sin_theta = torch.sqrt(1.0 - torch.pow(target_logit, 2))
        cos_theta_m = target_logit * self.cos_m - sin_theta * self.sin_m  # cos(target+margin)
        if self.easy_margin:
            final_target_logit = torch.where(target_logit > 0, cos_theta_m, target_logit)
        else:
            final_target_logit = torch.where(target_logit > self.theta, cos_theta_m, target_logit - self.sinmm)

        logits[index, labels[index].view(-1)] = final_target_logit
        logits = logits * self.scale
        return logits


class PartialFC_V2(nn.Module):
    """Partial FC on rank ``rank`` of ``world_size``: the rank keeps the centres of its classes (all of them trained,
    sample_rate 1)."""

    def __init__(self, margin_loss, embedding_size, num_classes, sample_rate=1.0, rank=0, world_size=1):
        super().__init__()
        self.rank = rank
        self.world_size = world_size
        self.embedding_size = embedding_size
        self.sample_rate = sample_rate
        self.num_local = num_classes // self.world_size + int(self.rank < num_classes % self.world_size)
        self.class_start = num_classes // self.world_size * self.rank + min(self.rank, num_classes % self.world_size)
        self.num_sample = int(self.sample_rate * self.num_local)
        self.last_batch_size = 0
        self.weight = nn.Parameter(torch.normal(0, 0.01, (self.num_local, embedding_size)))
        self.margin_softmax = margin_loss

    def forward(self, local_embeddings, local_labels):
        local_labels.squeeze_()  # BREAK: an in-place view of a graph input: squeeze out of place (the loader's labels are already 1-D, so nothing outside sees a change)
        local_labels = local_labels.long()
        batch_size = local_embeddings.size(0)
        if self.last_batch_size == 0:
            self.last_batch_size = batch_size
        assert self.last_batch_size == batch_size, f"last batch size do not equal current batch size: {self.last_batch_size} vs {batch_size}"
        # all_gather over a world of one
        embeddings = torch.cat([local_embeddings])
        labels = torch.cat([local_labels])

        labels = labels.view(-1, 1)
        index_positive = (self.class_start <= labels) & (labels < self.class_start + self.num_local)
        labels[~index_positive] = -1
        labels[index_positive] -= self.class_start  # BREAK: subtract without boolean indexing: labels -= index_positive * class_start

        # sample_rate 1: every local class centre is trained (no PartialFC sampling)
        weight = self.weight

        norm_embeddings = F.normalize(embeddings)
        norm_weight_activated = F.normalize(weight)
        logits = F.linear(norm_embeddings, norm_weight_activated)
        logits = logits.clamp(-1, 1)

        logits = self.margin_softmax(logits, labels)
        # DistCrossEntropy over one rank: the softmax cross entropy of the local logits
        loss = F.cross_entropy(logits, labels.view(-1))
        return loss


class ArcFaceTrainStep(nn.Module):
    """``train.py``'s step: backbone embeddings, then the Partial FC loss."""

    def __init__(self, num_classes=40, embedding_size=16):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.PReLU(8), nn.Flatten(),
                                      nn.Linear(8 * 4 * 4, embedding_size), nn.BatchNorm1d(embedding_size))
        self.module_partial_fc = PartialFC_V2(ArcFace(s=64.0, margin=0.5), embedding_size, num_classes)

    def forward(self, img, local_labels):
        local_embeddings = self.backbone(img)
        return self.module_partial_fc(local_embeddings, local_labels)


def build_partial_fc_arcface():
    seeded(1416)
    return ArcFaceTrainStep().train(), (torch.randn(6, 3, 8, 8), torch.tensor([3, 17, 3, 29, 8, 17]))
