"""Computational pathology: mahmoodlab/CLAM (clustering-constrained attention multiple-instance learning).

``models/model_clam.py``'s ``CLAM_SB`` on a bag of patch features (the gated attention network, ``inst_eval`` on
the top-k attended and least attended patches for the slide's own class -- the instance classifier chosen by
``inst_labels[i].item()`` -- the bag classifier and ``Y_hat`` by ``topk``), under ``utils/core_utils.py``'s
``train_loop_clam`` for one slide: the bag loss and the instance loss mixed by ``bag_weight``,
``Accuracy_Logger.log`` (``int(Y_hat)``, ``int(Y)`` into the per-class counts) and the epoch's running loss read
back with ``.item()``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import seeded

device = torch.device("cpu")


class Attn_Net_Gated(nn.Module):
    def __init__(self, L=1024, D=256, dropout=False, n_classes=1):
        r"""
        Attention Network with Sigmoid Gating (3 fc layers)
        args:
            L: input feature dimension
            D: hidden layer dimension
            dropout: whether to use dropout (p = 0.25)
            n_classes: number of classes
        """
        super().__init__()
        self.attention_a = [nn.Linear(L, D), nn.Tanh()]

        self.attention_b = [nn.Linear(L, D), nn.Sigmoid()]
        if dropout:
            self.attention_a.append(nn.Dropout(0.25))
            self.attention_b.append(nn.Dropout(0.25))

        self.attention_a = nn.Sequential(*self.attention_a)
        self.attention_b = nn.Sequential(*self.attention_b)

        self.attention_c = nn.Linear(D, n_classes)

    def forward(self, x):
        a = self.attention_a(x)
        b = self.attention_b(x)
        A = a.mul(b)
        A = self.attention_c(A)  # N x n_classes
        return A, x


class CLAM_SB(nn.Module):
    """
    args:
        gate: whether to use gated attention network
        size_arg: config for network size
        dropout: whether to use dropout
        k_sample: number of positive/neg patches to sample for instance-level training
        dropout: whether to use dropout (p = 0.25)
        n_classes: number of classes
        instance_loss_fn: loss function to supervise instance-level training
        subtyping: whether it's a subtyping problem
    """

    def __init__(
        self,
        gate=True,
        size_arg="small",
        dropout=0.0,
        k_sample=8,
        n_classes=2,
        instance_loss_fn=None,
        subtyping=False,
        embed_dim=1024,
    ):
        super().__init__()
        self.size_dict = {"small": [embed_dim, 32, 16], "big": [embed_dim, 32, 24]}
        size = self.size_dict[size_arg]
        fc = [nn.Linear(size[0], size[1]), nn.ReLU(), nn.Dropout(dropout)]
        attention_net = Attn_Net_Gated(L=size[1], D=size[2], dropout=dropout, n_classes=1)
        fc.append(attention_net)
        self.attention_net = nn.Sequential(*fc)
        self.classifiers = nn.Linear(size[1], n_classes)
        instance_classifiers = [nn.Linear(size[1], 2) for i in range(n_classes)]
        self.instance_classifiers = nn.ModuleList(instance_classifiers)
        self.k_sample = k_sample
        self.instance_loss_fn = instance_loss_fn if instance_loss_fn is not None else nn.CrossEntropyLoss()
        self.n_classes = n_classes
        self.subtyping = subtyping

    @staticmethod
    def create_positive_targets(length, device):
        return torch.full((length,), 1, device=device).long()

    @staticmethod
    def create_negative_targets(length, device):
        return torch.full((length,), 0, device=device).long()

    # instance-level evaluation for in-the-class attention branch
    def inst_eval(self, A, h, classifier):
        device = h.device
        if len(A.shape) == 1:
            A = A.view(1, -1)
        top_p_ids = torch.topk(A, self.k_sample)[1][-1]
        top_p = torch.index_select(h, dim=0, index=top_p_ids)
        top_n_ids = torch.topk(-A, self.k_sample, dim=1)[1][-1]
        top_n = torch.index_select(h, dim=0, index=top_n_ids)
        p_targets = self.create_positive_targets(self.k_sample, device)
        n_targets = self.create_negative_targets(self.k_sample, device)

        all_targets = torch.cat([p_targets, n_targets], dim=0)
        all_instances = torch.cat([top_p, top_n], dim=0)
        logits = classifier(all_instances)
        all_preds = torch.topk(logits, 1, dim=1)[1].squeeze(1)
        instance_loss = self.instance_loss_fn(logits, all_targets)
        return instance_loss, all_preds, all_targets

    # instance-level evaluation for out-of-the-class attention branch
    def inst_eval_out(self, A, h, classifier):
        device = h.device
        if len(A.shape) == 1:
            A = A.view(1, -1)
        top_p_ids = torch.topk(A, self.k_sample)[1][-1]
        top_p = torch.index_select(h, dim=0, index=top_p_ids)
        p_targets = self.create_negative_targets(self.k_sample, device)
        logits = classifier(top_p)
        p_preds = torch.topk(logits, 1, dim=1)[1].squeeze(1)
        instance_loss = self.instance_loss_fn(logits, p_targets)
        return instance_loss, p_preds, p_targets

    def forward(self, h, label=None, instance_eval=False, return_features=False, attention_only=False):
        A, h = self.attention_net(h)  # NxK
        A = torch.transpose(A, -1, -2)  # KxN
        if attention_only:
            return A
        A_raw = A
        A = F.softmax(A, dim=-1)  # softmax over N

        if instance_eval:
            total_inst_loss = 0.0
            all_preds = []
            all_targets = []
            inst_labels = F.one_hot(label, num_classes=self.n_classes).squeeze()  # binarize label
            for i in range(len(self.instance_classifiers)):
                inst_label = inst_labels[i].item()  # BREAK must-not: which classifier trains is the label's
                classifier = self.instance_classifiers[i]
                if inst_label == 1:  # in-the-class:
                    instance_loss, preds, targets = self.inst_eval(A, h, classifier)
                    all_preds.extend(preds.cpu().numpy())
                    all_targets.extend(targets.cpu().numpy())
                else:  # out-of-the-class
                    if self.subtyping:
                        instance_loss, preds, targets = self.inst_eval_out(A, h, classifier)
                        all_preds.extend(preds.cpu().numpy())
                        all_targets.extend(targets.cpu().numpy())
                    else:
                        continue
                total_inst_loss += instance_loss

            if self.subtyping:
                total_inst_loss /= len(self.instance_classifiers)

        M = torch.mm(A, h)
        logits = self.classifiers(M)
        Y_hat = torch.topk(logits, 1, dim=1)[1]
        Y_prob = F.softmax(logits, dim=1)
        if instance_eval:
            results_dict = {
                "instance_loss": total_inst_loss,
                "inst_labels": np.array(all_targets),
                "inst_preds": np.array(all_preds),
            }
        else:
            results_dict = {}
        if return_features:
            results_dict.update({"features": M})
        return logits, Y_prob, Y_hat, A_raw, results_dict


class Accuracy_Logger:
    """Accuracy logger"""

    def __init__(self, n_classes):
        super().__init__()
        self.n_classes = n_classes
        self.initialize()

    def initialize(self):
        self.data = [{"count": 0, "correct": 0} for i in range(self.n_classes)]

    def log(self, Y_hat, Y):
        Y_hat = int(Y_hat)  # BREAK: per-class count tensors, index_add
        Y = int(Y)  # BREAK: the label stays a tensor
        self.data[Y]["count"] += 1
        self.data[Y]["correct"] += Y_hat == Y

    def get_summary(self, c):
        count = self.data[c]["count"]
        correct = self.data[c]["correct"]

        if count == 0:
            acc = None
        else:
            acc = float(correct) / count

        return acc, correct, count


class TrainLoopCLAM(nn.Module):
    """``train_loop_clam`` for one slide of the loader (``instance_eval=True``; backward and step left to the caller)."""

    def __init__(self, args):
        super().__init__()
        self.model = CLAM_SB(
            gate=True,
            size_arg=args.model_size,
            dropout=args.drop_out,
            k_sample=args.B,
            n_classes=args.n_classes,
            instance_loss_fn=nn.CrossEntropyLoss(),
            subtyping=args.subtyping,
            embed_dim=args.embed_dim,
        )
        self.loss_fn = nn.CrossEntropyLoss()
        self.bag_weight = args.bag_weight
        self.acc_logger = Accuracy_Logger(n_classes=args.n_classes)
        self.train_loss = 0.0

    def forward(self, data, label):
        self.model.train()
        data, label = data.to(device), label.to(device)
        logits, Y_prob, Y_hat, _, instance_dict = self.model(data, label=label, instance_eval=True)

        self.acc_logger.log(Y_hat, label)
        loss = self.loss_fn(logits, label)
        loss_value = loss.item()  # BREAK: accumulate the detached loss

        instance_loss = instance_dict["instance_loss"]
        total_loss = self.bag_weight * loss + (1 - self.bag_weight) * instance_loss

        self.train_loss += loss_value
        return total_loss, Y_prob, instance_dict["inst_preds"], instance_dict["inst_labels"]


def build_clam_train_slide():
    seeded(1711)
    args = argparse.Namespace(
        model_size="small", drop_out=0.0, B=4, n_classes=2, subtyping=False, embed_dim=24, bag_weight=0.7
    )
    m = TrainLoopCLAM(args)
    data = torch.randn(30, 24)
    label = torch.LongTensor([1])
    return m, (data, label)
