"""Signals: a Pan-Tompkins-style ECG R-peak detector on a learned band-pass front end, and a Mamba-style
selective scan run in chunks that stops once every sequence in the batch has ended."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class RPeakDetector(nn.Module):
    """Band-pass conv, squared derivative, moving-window integration, a threshold at half the maximum and a
    refractory local-maximum test; returns the R-peak sample indices, the heart rate and the energy envelope."""

    def __init__(self, kernel: int = 5, fs: float = 50.0, refractory: int = 4, window: int = 5) -> None:
        super().__init__()
        self.bandpass = nn.Conv1d(1, 1, kernel, padding=kernel // 2)
        self.fs, self.refractory, self.window = fs, refractory, window

    def forward(self, ecg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = self.bandpass(ecg[None, None])[0, 0]
        energy = F.avg_pool1d((y.diff() ** 2)[None, None], self.window, 1, self.window // 2)[0, 0]
        thr = 0.5 * float(energy.max())  # BREAK: the threshold can stay a tensor
        r = self.refractory
        local_max = energy >= F.max_pool1d(energy.detach()[None, None], 2 * r + 1, 1, r)[0, 0]
        is_peak = (energy > thr) & local_max
        peaks = torch.from_numpy(np.where(is_peak.numpy())[0])  # BREAK must-not: the caller gets the peak indices, as many as there are
        rr = peaks.diff().float() / self.fs
        return peaks, 60.0 / rr.mean(), energy


def build_ecg_rpeak() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(603)
    t = torch.arange(200, dtype=torch.float32)
    beats = torch.exp(-0.5 * ((t[:, None] - torch.arange(10, 200, 37.0)[None]) / 1.5) ** 2).sum(1)
    return RPeakDetector(), beats + 0.05 * torch.randn(200)


class ChunkedSelectiveScan(nn.Module):
    """S6 block: input-dependent step sizes and B/C projections, a diagonal state recurrence scanned chunk by
    chunk; chunks past the end of every sequence are not run (their outputs stay zero)."""

    def __init__(self, d: int = 8, n: int = 4, chunk: int = 4) -> None:
        super().__init__()
        self.in_proj = nn.Linear(d, d)
        self.dt_proj = nn.Linear(d, d)
        self.b_proj, self.c_proj = nn.Linear(d, n), nn.Linear(d, n)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(d, 1))
        self.out = nn.Linear(d, d)
        self.chunk = chunk

    def _scan(self, x: torch.Tensor, delta: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
              lengths: torch.Tensor) -> torch.Tensor:
        bsz, T, d = x.shape
        A = -torch.exp(self.A_log)
        h = x.new_zeros(bsz, d, A.shape[1])
        y = torch.zeros_like(x)
        for start in range(0, T, self.chunk):
            if (lengths <= start).all():  # BREAK: running the padded chunks too changes nothing once the output is masked
                break
            for t in range(start, min(start + self.chunk, T)):
                h = torch.exp(delta[:, t, :, None] * A) * h + delta[:, t, :, None] * B[:, t, None, :] * x[:, t, :, None]
                y[:, t] = (h * C[:, t, None, :]).sum(-1)
        return y

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        u = F.silu(self.in_proj(x))
        delta = F.softplus(self.dt_proj(x))
        y = self._scan(u, delta, self.b_proj(x), self.c_proj(x), lengths)
        mask = (torch.arange(x.shape[1]) < lengths[:, None]).to(x.dtype)
        return self.out(y) * mask[..., None]


def build_ssm_scan() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(604)
    return ChunkedSelectiveScan(), (torch.randn(2, 12, 8), torch.tensor([5, 7]))
