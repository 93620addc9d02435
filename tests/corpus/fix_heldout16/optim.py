"""Optimisation: cybertronai/pytorch-lamb's ``Lamb.step`` (weight and Adam-step norms, the trust ratio falling back to
1 when either norm is zero, the norms kept in the optimizer state) and ``test_lamb.py``'s training iteration on its
MNIST net (``nll_loss``, ``log_lamb_rs`` histogramming the trust ratios through ``torch.tensor`` of the state values,
the loss written to the event writer)."""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Optimizer

from .helpers import seeded


class Lamb(Optimizer):
    r"""Implements Lamb algorithm (https://arxiv.org/abs/1904.00962)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0, adam=False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        self.adam = adam
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients, consider SparseAdam instad.")

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state["step"] = 0
                    # Exponential moving average of gradient values
                    state["exp_avg"] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state["exp_avg_sq"] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]

                state["step"] += 1

                # Decay the first and second moment running average coefficient
                # m_t
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                # v_t
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                # Paper v3 does not use debiasing.
                # Apply bias to lr to avoid broadcast.
                step_size = group["lr"]  # * math.sqrt(bias_correction2) / bias_correction1

                weight_norm = p.data.pow(2).sum().sqrt().clamp(0, 10)

                adam_step = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
                if group["weight_decay"] != 0:
                    adam_step.add_(p.data, alpha=group["weight_decay"])

                adam_norm = adam_step.pow(2).sum().sqrt()
                if weight_norm == 0 or adam_norm == 0:  # BREAK: the fallback ratio is a where over the two norms (a 0-d tensor either way)
                    trust_ratio = 1
                else:
                    trust_ratio = weight_norm / adam_norm
                state["weight_norm"] = weight_norm
                state["adam_norm"] = adam_norm
                state["trust_ratio"] = trust_ratio
                if self.adam:
                    trust_ratio = 1

                p.data.add_(adam_step, alpha=-step_size * trust_ratio)

        return loss


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=5)
        self.conv2 = nn.Conv2d(4, 8, kernel_size=5)
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 8)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class EventWriter:
    """The part of ``SummaryWriter`` the script uses: scalars and histograms, as tensorboard's ``make_np`` leaves them."""

    def __init__(self):
        self.scalars = []
        self.histograms = []

    def add_scalar(self, tag, scalar_value, global_step=None):
        self.scalars.append((tag, scalar_value, global_step))

    def add_histogram(self, tag, values, global_step=None):
        self.histograms.append((tag, values.detach().cpu().numpy(), global_step))


def log_lamb_rs(optimizer: Optimizer, event_writer, token_count: int):
    """Log a histogram of trust ratio scalars in across layers."""
    results = collections.defaultdict(list)
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            for i in ("weight_norm", "adam_norm", "trust_ratio"):
                if i in state:
                    results[i].append(state[i])

    for k, v in results.items():
        event_writer.add_histogram(f"lamb/{k}", torch.tensor(v), token_count)


class TrainIteration(nn.Module):
    """One iteration of ``train``'s loop (``batch_idx % log_interval == 0``)."""

    def __init__(self):
        super().__init__()
        self.model = Net()
        self.optimizer = Lamb(self.model.parameters(), lr=0.01, weight_decay=0.01, betas=(0.9, 0.999), adam=False)
        self.event_writer = EventWriter()
        self.dataset_len = 64

    def forward(self, data, target, batch_idx, epoch):
        self.optimizer.zero_grad()  # BREAK: Dynamo skips Optimizer.zero_grad: set each parameter's grad to None directly (its default set_to_none)
        output = self.model(data)
        loss = F.nll_loss(output, target)
        loss.backward()  # BREAK must-not: Dynamo does not trace the backward pass itself; the step needs its gradients
        self.optimizer.step()
        step = batch_idx * len(data) + (epoch - 1) * self.dataset_len
        log_lamb_rs(self.optimizer, self.event_writer, step)
        self.event_writer.add_scalar("loss", loss.item(), step)  # BREAK: the writer keeps what it is given: log the detached loss tensor
        return loss.detach(), [p.detach().clone() for p in self.model.parameters()], [h[1] for h in self.event_writer.histograms]


def build_lamb_train_step():
    seeded(1611)
    it = TrainIteration().train()
    data = torch.randn(8, 1, 16, 16)
    target = torch.randint(0, 10, (8,))
    return it, (data, target, 0, 1)
