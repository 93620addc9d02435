"""Training-side code that ends up inside forward: a dynamic loss scale with an overflow check,
fairseq's label-smoothed cross entropy with padding, a curriculum sampler driven by numpy."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class LossScaledClassifier(nn.Module):
    """Mixed precision on CPU: bf16 autocast for the body, a dynamic loss scale kept in buffers."""

    def __init__(self, in_dim: int = 16, num_classes: int = 4, growth_interval: int = 2000) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, 32), nn.GELU(), nn.Linear(32, num_classes))
        self.growth_interval = growth_interval
        self.register_buffer("loss_scale", torch.tensor(2.0 ** 12))
        self.register_buffer("good_steps", torch.tensor(growth_interval - 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = self.net(x)
        loss = F.cross_entropy(logits.float(), y)
        if torch.isfinite(loss):  # BREAK: both updates of the scale are torch.where over the buffers, so the scaled loss keeps its value
            self.good_steps += 1
            if self.good_steps.item() % self.growth_interval == 0:  # BREAK: the growth test as a tensor (good_steps % interval == 0) in the same torch.where
                self.loss_scale *= 2.0
        else:
            self.loss_scale /= 2.0
            self.good_steps.zero_()
        return loss * self.loss_scale, loss.detach()


def build_amp_loss_scale():
    torch.manual_seed(17)
    model = LossScaledClassifier()
    return model, (torch.randn(8, 16), torch.randint(0, 4, (8,)))


def label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=-100):
    """fairseq's criterion, summed over the non-padding tokens."""
    if target.dim() == lprobs.dim() - 1:
        target = target.unsqueeze(-1)
    pad_mask = target.eq(ignore_index)
    nll_loss = -lprobs.gather(dim=-1, index=target.clamp(min=0))
    smooth_loss = -lprobs.sum(dim=-1, keepdim=True)
    nll_loss = nll_loss.masked_fill(pad_mask, 0.0).sum()
    smooth_loss = smooth_loss.masked_fill(pad_mask, 0.0).sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll_loss + eps_i * smooth_loss
    return loss, nll_loss


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int = 11, dim: int = 16, ignore_index: int = -100, epsilon: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.ignore_index, self.epsilon = ignore_index, epsilon

    def forward(self, tokens: torch.Tensor, target: torch.Tensor):
        h = torch.tanh(self.mix(self.embed(tokens)))
        lprobs = F.log_softmax(self.out(h), dim=-1)
        loss, nll_loss = label_smoothed_nll_loss(lprobs, target, self.epsilon, self.ignore_index)
        ntokens = int(target.ne(self.ignore_index).sum())  # BREAK: dividing by the count as a tensor clamped at 1 gives the same loss
        loss = loss / max(ntokens, 1)
        logging_output = {"nll_loss": nll_loss.item() / math.log(2), "nsentences": target.size(0)}  # BREAK must-not: the metrics aggregator wants a Python float, and it is returned
        return loss, logging_output


def build_label_smoothing():
    torch.manual_seed(18)
    model = TinyDecoder()
    tokens = torch.randint(0, 11, (3, 7))
    target = torch.randint(0, 11, (3, 7))
    target[0, 5:] = -100
    target[2, 3:] = -100
    return model, (tokens, target)


def sample_curriculum_batch(difficulty: torch.Tensor, features: torch.Tensor, targets: torch.Tensor,
                            epoch: int, batch_size: int = 6):
    """Draw a batch that favours easy examples early and flattens towards uniform over epochs."""
    lo, hi = difficulty.min().item(), difficulty.max().item()  # BREAK: min-max scaling with the tensors' own min and max gives the same scores
    scaled = (difficulty - lo) / (hi - lo + 1e-8)
    temperature = max(0.1, epoch / 10)
    p = torch.softmax(-scaled / temperature, dim=0).double().numpy()
    idx = np.random.default_rng(epoch).choice(len(p), size=batch_size, replace=False, p=p / p.sum())  # BREAK must-not: numpy's generator draws the batch; no torch sampler draws the same indices
    idx = torch.from_numpy(idx)
    return features[idx], targets[idx], scaled


def build_curriculum_sampler():
    torch.manual_seed(19)
    difficulty = torch.rand(20) * 5
    return sample_curriculum_batch, (difficulty, torch.randn(20, 3), torch.randint(0, 2, (20,)), 3)
