"""Training-side tricks: class-balanced focal loss, spectral norm, gradient reversal, Gumbel annealing,
mixup, and an early-exit classifier."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import entropy, power_iteration, report


class ClassBalancedFocalLoss(nn.Module):
    """Focal loss weighted by the effective number of samples of each class in the batch."""

    def __init__(self, in_dim: int = 10, num_classes: int = 5, beta: float = 0.99, gamma: float = 2.0) -> None:
        super().__init__()
        self.num_classes, self.beta, self.gamma = num_classes, beta, gamma
        self.classifier = nn.Linear(in_dim, num_classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.classifier(x)
        counts = torch.bincount(targets, minlength=self.num_classes)  # BREAK: one_hot(targets, C).sum(0) has a known size
        weights = [(1 - self.beta) / (1 - self.beta ** max(n, 1)) for n in counts.tolist()]  # BREAK: the same formula on the count tensor
        weights = torch.tensor(weights, dtype=logits.dtype)
        weights = weights / weights.sum() * self.num_classes
        logp = F.log_softmax(logits, -1).gather(1, targets[:, None]).squeeze(1)
        loss = -weights[targets] * (1 - logp.exp()) ** self.gamma * logp
        return loss.mean()


def build_class_balanced_focal():
    torch.manual_seed(9)
    targets = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 0, 0, 1, 4, 0])
    return ClassBalancedFocalLoss(), (torch.randn(16, 10), targets)


class SNLinear(nn.Module):
    """Linear layer with spectral normalisation by power iteration that stops on convergence."""

    def __init__(self, in_f: int, out_f: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_f, in_f) * 0.3)
        self.bias = nn.Parameter(torch.zeros(out_f))
        self.register_buffer("u", F.normalize(torch.randn(out_f), dim=0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            u, v = power_iteration(self.weight, self.u)
            self.u.copy_(u)
        sigma = torch.dot(u, self.weight @ v)
        return F.linear(x, self.weight / sigma, self.bias)


class SNDiscriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = SNLinear(6, 12), SNLinear(12, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(F.leaky_relu(self.l1(x), 0.2))


def build_spectral_norm():
    torch.manual_seed(10)
    return SNDiscriminator(), (torch.randn(5, 6),)


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lambd):
        ctx.lambd = lambd
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.lambd, None


class DANN(nn.Module):
    """Domain-adversarial network: the reversal strength follows the DANN schedule over training."""

    def __init__(self, in_dim: int = 10, hidden: int = 12, n_classes: int = 3, total_steps: int = 100) -> None:
        super().__init__()
        self.total_steps = total_steps
        self.features = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU())
        self.classifier = nn.Linear(hidden, n_classes)
        self.domain = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("step", torch.tensor(30))

    def forward(self, x: torch.Tensor):
        p = float(self.step) / self.total_steps  # BREAK: compute the schedule on the step tensor
        lambd = 2.0 / (1.0 + math.exp(-10 * p)) - 1
        self.step += 1
        feats = self.features(x)
        return self.classifier(feats), self.domain(GradReverse.apply(feats, lambd))


def build_grad_reversal():
    torch.manual_seed(11)
    return DANN(), (torch.randn(6, 10),)


class GumbelBottleneck(nn.Module):
    """A discrete-code autoencoder (dVAE style) whose Gumbel temperature anneals with the step."""

    def __init__(self, in_dim: int = 12, n_codes: int = 8, tau0: float = 1.0, tau_min: float = 0.5,
                 anneal_rate: float = 1e-3) -> None:
        super().__init__()
        self.tau0, self.tau_min, self.anneal_rate = tau0, tau_min, anneal_rate
        self.enc = nn.Linear(in_dim, n_codes)
        self.dec = nn.Linear(n_codes, in_dim)
        self.register_buffer("step", torch.tensor(400))
        self.code_usage: Counter[int] = Counter()

    def forward(self, x: torch.Tensor):
        tau = max(self.tau_min, self.tau0 * math.exp(-self.anneal_rate * self.step.item()))  # BREAK: torch.exp and clamp on the step tensor
        codes = F.gumbel_softmax(self.enc(x), tau=tau, hard=True, dim=-1)
        self.step += 1
        self.code_usage.update(codes.argmax(-1).tolist())  # BREAK must-not: the usage counts are returned as a Python dict
        return self.dec(codes), dict(self.code_usage)


def build_gumbel_anneal():
    torch.manual_seed(12)
    return GumbelBottleneck(), (torch.randn(6, 12),)


class MixupClassifier(nn.Module):
    """Mixup inside the training forward, lambda drawn from the module's own numpy generator."""

    def __init__(self, in_dim: int = 12, n_classes: int = 4, alpha: float = 0.4, seed: int = 0) -> None:
        super().__init__()
        self.alpha = alpha
        self.net = nn.Sequential(nn.Linear(in_dim, 16), nn.ReLU(), nn.Linear(16, n_classes))
        self.rng = np.random.default_rng(seed)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lam = float(self.rng.beta(self.alpha, self.alpha))  # BREAK must-not: the draw comes from a host-side numpy stream
        report("mixup lambda", lam)
        perm = torch.randperm(x.shape[0])
        logits = self.net(lam * x + (1 - lam) * x[perm])
        return lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[perm])


def build_mixup():
    torch.manual_seed(13)
    return MixupClassifier(), (torch.randn(8, 12), torch.randint(0, 4, (8,)))


class BranchyNet(nn.Module):
    """Early-exit classifier: returns at the first exit whose mean prediction entropy is low enough."""

    def __init__(self, in_dim: int = 10, hidden: int = 16, n_classes: int = 4, threshold: float = 1.2) -> None:
        super().__init__()
        self.threshold = threshold
        self.stage1 = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU())
        self.exit1 = nn.Linear(hidden, n_classes)
        self.stage2 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.exit2 = nn.Linear(hidden, n_classes)
        self.stage3 = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.final = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor):
        if not torch.isfinite(x).all():  # BREAK: nan_to_num is the identity on finite inputs; apply it always
            x = torch.nan_to_num(x)
        h = self.stage1(x)
        out = self.exit1(h)
        if entropy(out).mean() < self.threshold:  # BREAK must-not: the exit taken decides which layers run and the returned exit index
            return out, 1
        h = self.stage2(h)
        out = self.exit2(h)
        if entropy(out).mean() < self.threshold:  # BREAK must-not: the exit taken decides which layers run and the returned exit index
            return out, 2
        return self.final(self.stage3(h)), 3


def build_early_exit():
    torch.manual_seed(14)
    model = BranchyNet()
    with torch.no_grad():
        model.exit2.weight.mul_(8.0)
    return model, (torch.randn(6, 10),)
