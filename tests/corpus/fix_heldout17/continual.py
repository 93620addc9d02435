"""Continual learning: moskomule/ewc.pytorch (elastic weight consolidation on permuted MNIST).

``utils.py``'s ``EWC`` (its ``variable`` helper without the deprecated ``Variable``): the parameters copied with ``deepcopy`` for the means and (zeroed) for the Fisher
accumulators, ``_diag_fisher`` backpropagating each old-task sample's NLL against the model's own prediction and
summing the squared gradients, ``penalty``; under the notebook's ``ewc_process`` for a new task: the ``EWC`` built
on samples of the previous tasks, then the new task's loss with the importance-weighted penalty.
"""

from __future__ import annotations

import random
from copy import deepcopy

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


def variable(t: torch.Tensor, use_cuda=True, **kwargs):
    if torch.cuda.is_available() and use_cuda:
        t = t.cuda()
    return t.requires_grad_(kwargs.get("requires_grad", False))


class MLP(nn.Module):
    def __init__(self, hidden_size=400):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28 // 16, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, hidden_size)
        self.fc4 = nn.Linear(hidden_size, 10)

    def forward(self, input):
        x = F.relu(self.fc1(input))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        x = self.fc4(x)
        return x


class EWC:
    def __init__(self, model: nn.Module, dataset: list):
        self.model = model
        self.dataset = dataset

        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self._means = {}
        self._precision_matrices = self._diag_fisher()

        for n, p in deepcopy(self.params).items():
            self._means[n] = variable(p.data)

    def _diag_fisher(self):
        precision_matrices = {}
        for n, p in deepcopy(self.params).items():  # BREAK: zeros_like instead of a zeroed copy
            p.data.zero_()
            precision_matrices[n] = variable(p.data)

        self.model.eval()
        for input in self.dataset:
            self.model.zero_grad()
            input = variable(input)
            output = self.model(input).view(1, -1)
            label = output.max(1)[1].view(-1)
            loss = F.nll_loss(F.log_softmax(output, dim=1), label)
            loss.backward()  # BREAK must-not: the step needs the gradients

            for n, p in self.model.named_parameters():
                precision_matrices[n].data += p.grad.data**2 / len(self.dataset)

        precision_matrices = {n: p for n, p in precision_matrices.items()}
        return precision_matrices

    def penalty(self, model: nn.Module):
        loss = 0
        for n, p in model.named_parameters():
            _loss = self._precision_matrices[n] * (p - self._means[n]) ** 2
            loss += _loss.sum()
        return loss


class EWCProcess(nn.Module):
    """``ewc_process`` at a new task: ``EWC(model, old_tasks)``, then the task's penalised loss on a batch."""

    def __init__(self, hidden_size, importance):
        super().__init__()
        self.model = MLP(hidden_size)
        self.importance = importance

    def forward(self, old_tasks, input, target):
        ewc = EWC(self.model, old_tasks)
        self.model.train()
        input, target = variable(input), variable(target)
        output = self.model(input)
        loss = F.cross_entropy(output, target) + self.importance * ewc.penalty(self.model)
        return loss, ewc._precision_matrices


def build_ewc_process():
    seeded(1714)
    m = EWCProcess(hidden_size=32, importance=1000)
    # the previous tasks' samples (get_sample), then random.sample as the notebook does
    old_tasks = [torch.rand(1, 49) for _ in range(12)]
    old_tasks = random.sample(old_tasks, k=6)
    perm = torch.randperm(49)
    input = torch.rand(8, 49)[:, perm]
    target = torch.randint(0, 10, (8,))
    return m, (old_tasks, input, target)
