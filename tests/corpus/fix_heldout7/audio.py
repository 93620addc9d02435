"""Audio front ends: per-clip loudness normalisation before an encoder, a YIN pitch tracker, and a
spectral-flux onset detector with librosa-style peak picking."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import nan_guard, seeded

# --------------------------------------------------------------------------- loudness normalisation


class LoudnessNormEncoder(nn.Module):
    """Scale every clip to a target RMS level (silent clips are left alone), then a strided conv encoder."""

    def __init__(self, target_db: float = -20.0, silence_db: float = -60.0) -> None:
        super().__init__()
        self.target_db = target_db
        self.silence_db = silence_db
        self.conv = nn.Conv1d(1, 8, 9, stride=4)
        self.proj = nn.Linear(8, 16)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        wav = nan_guard(wav)  # decoder glitches leave NaN samples
        out = []
        for clip in wav:
            rms_db = 20.0 * math.log10(clip.pow(2).mean().sqrt().item() + 1e-9)  # BREAK: compute every clip's level as a tensor and pick the gain with torch.where
            if rms_db < self.silence_db:
                out.append(clip)
            else:
                out.append(clip * 10.0 ** ((self.target_db - rms_db) / 20.0))
        x = torch.stack(out)[:, None, :]
        h = F.relu(self.conv(x)).mean(-1)
        return self.proj(h)


def build_loudness_norm() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(80)
    model = LoudnessNormEncoder()
    g = seeded(81)
    wav = torch.randn(4, 400, generator=g) * torch.tensor([0.3, 0.02, 1e-5, 0.8])[:, None]
    wav[3, 17] = float("nan")
    return model, wav


# --------------------------------------------------------------------------- YIN pitch


def yin_pitch(wav: torch.Tensor, sr: int = 8000, frame: int = 256, hop: int = 128,
              fmin: float = 60.0, fmax: float = 500.0, threshold: float = 0.15) -> torch.Tensor:
    """f0 per frame (Hz): the first lag whose cumulative-mean-normalised difference dips under the
    threshold, or the global minimum for unvoiced frames (de Cheveigne & Kawahara 2002, steps 2-4)."""
    frames = wav.unfold(-1, frame, hop)  # (F, frame)
    tau_max = int(sr // fmin)
    tau_min = int(sr // fmax)
    width = frame - tau_max
    x0 = frames[:, :width]
    lagged = frames.unfold(-1, width, 1)[:, : tau_max + 1]  # (F, tau_max + 1, width)
    diff = ((x0[:, None, :] - lagged) ** 2).sum(-1)
    taus = torch.arange(1, tau_max + 1, dtype=wav.dtype)
    cmnd = diff[:, 1:] * taus / torch.cumsum(diff[:, 1:], -1).clamp(min=1e-8)  # column k is lag k + 1
    cmnd = cmnd[:, tau_min - 1 :]  # column k is lag k + tau_min
    below = cmnd < threshold
    lags = []
    for f, row in enumerate(below.tolist()):  # BREAK: first True per row is below.int().argmax(-1); choose it or cmnd.argmin(-1) with torch.where(below.any(-1), ...)
        if True in row:
            k = row.index(True)
        else:
            k = int(cmnd[f].argmin())  # BREAK: same vectorised choice as above
        lags.append(k + tau_min)
    return sr / torch.tensor(lags, dtype=torch.float32)


def build_yin_pitch() -> tuple[object, tuple[torch.Tensor]]:
    g = seeded(82)
    t = torch.arange(2000, dtype=torch.float32) / 8000
    voiced = torch.sin(2 * math.pi * 200.0 * t) + 0.3 * torch.sin(2 * math.pi * 400.0 * t)
    noise = torch.randn(2000, generator=g) * 0.5
    wav = torch.where(t < 0.14, voiced, noise)
    return yin_pitch, (wav,)


# --------------------------------------------------------------------------- onset detection


def detect_onsets(wav: torch.Tensor, n_fft: int = 128, hop: int = 64, sr: int = 8000,
                  pre_max: int = 3, delta_scale: float = 0.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Onset frames/times from positive spectral flux: local maxima above mean + delta * std."""
    frames = wav.unfold(-1, n_fft, hop) * torch.hann_window(n_fft)
    logmag = torch.log1p(10.0 * torch.fft.rfft(frames).abs())
    flux = F.relu(logmag[1:] - logmag[:-1]).sum(-1)
    flux = torch.cat([flux.new_zeros(1), flux])
    local_max = F.max_pool1d(flux[None, None], 2 * pre_max + 1, stride=1, padding=pre_max)[0, 0]
    flux_np = flux.detach().cpu().numpy()  # librosa.util.peak_pick works on numpy arrays
    delta = float(np.std(flux_np)) * delta_scale  # BREAK: keep delta a tensor (flux.std(correction=0), numpy's population std); it only feeds a tensor comparison
    thresh = flux.mean() + delta
    peaks = (flux == local_max) & (flux > thresh)
    onset_frames = torch.nonzero(peaks).squeeze(1)  # BREAK must-not: the number of onsets depends on the audio, and the frames are returned
    return onset_frames, onset_frames.float() * hop / sr, flux


def build_onset_detect() -> tuple[object, tuple[torch.Tensor]]:
    g = seeded(83)
    wav = torch.randn(4000, generator=g) * 0.01
    for start in (600, 1500, 2300, 3400):
        burst = torch.randn(200, generator=g) * torch.exp(-torch.arange(200.0) / 40.0)
        wav[start : start + 200] += burst
    return detect_onsets, (wav,)
