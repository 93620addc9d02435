"""ASR front end: log-compressed, globally normalised features with SpecAugment, then a frame classifier."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .helpers import spec_augment


class SpecAugmentEncoder(nn.Module):
    def __init__(self, n_mels: int = 16, hidden: int = 12, n_out: int = 6, freq_mask: int = 4, time_mask: int = 5,
                 seed: int = 0) -> None:
        super().__init__()
        self.freq_mask, self.time_mask = freq_mask, time_mask
        self.rng = np.random.default_rng(seed)
        self.proj = nn.Linear(n_mels, hidden)
        self.out = nn.Linear(hidden, n_out)

    def forward(self, spec: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = torch.log(spec + 1e-6)
        mean, std = x.mean().item(), x.std().item()  # BREAK: normalise by the tensors themselves
        x = (x - mean) / (std + 1e-5)
        if self.training:
            x = spec_augment(x, lengths, self.rng, self.freq_mask, self.time_mask)
        return self.out(torch.relu(self.proj(x.transpose(1, 2))))


def build_specaugment():
    torch.manual_seed(21)
    spec = torch.rand(3, 16, 24) ** 2
    return SpecAugmentEncoder(), (spec, torch.tensor([24, 17, 20]))
