"""Feature pre-processing inside the model: audio frames via numpy, ragged token batches, tabular scaling."""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from . import helpers

logger = logging.getLogger(__name__)


class LogMelFrontend(nn.Module):
    def __init__(self, n_fft: int = 16, hop_length: int = 8, n_mels: int = 6):
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        self.register_buffer("window", torch.hann_window(n_fft))
        fb = torch.linspace(0, 1, n_fft // 2 + 1)[:, None] - torch.linspace(0, 1, n_mels)[None]
        self.register_buffer("mel_fb", (1 - fb.abs() * n_mels).clamp(min=0))
        self.proj = nn.Linear(n_mels, 8)

    def forward(self, waveforms, lengths):
        wav = waveforms.numpy()
        wav = wav - wav.mean(axis=-1, keepdims=True)
        peak = np.abs(wav).max()
        if peak > 0:  # BREAK: a numpy branch (np.where / a divide by max(peak, eps) keeps it)
            wav = wav / peak
        max_len = int(lengths.max())  # BREAK must-not: a Python int sizes the returned features
        audio = torch.from_numpy(wav[:, :max_len]).float()
        frames = audio.unfold(-1, self.n_fft, self.hop_length) * self.window
        power = torch.fft.rfft(frames, dim=-1).abs() ** 2
        logmel = torch.log(power @ self.mel_fb + 1e-6)
        return self.proj(logmel)


def build_logmel_frontend():
    torch.manual_seed(0)
    model = LogMelFrontend()
    g = torch.Generator().manual_seed(17)
    waveforms = torch.randn(2, 96, generator=g)
    return model, (waveforms, torch.tensor([80, 64]))


class RaggedTokenEncoder(nn.Module):
    """Collate a flat token stream with per-example lengths, remap ids, embed, pool."""

    def __init__(self, vocab_size: int = 20, dim: int = 8, pad_id: int = 0, unk_id: int = 1):
        super().__init__()
        self.pad_id, self.unk_id = pad_id, unk_id
        self.vocab = {raw: i + 2 for i, raw in enumerate(range(100, 100 + vocab_size - 2))}
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)

    def forward(self, raw_tokens, lengths):
        ids = torch.tensor([self.vocab.get(t, self.unk_id) for t in raw_tokens.tolist()])  # BREAK: ids remapped through a dict (a lookup tensor gives the same ids)
        sequences = torch.split(ids, lengths.tolist())  # BREAK must-not: the lengths size the returned padded batch
        padded = pad_sequence(list(sequences), batch_first=True, padding_value=self.pad_id)
        attention_mask = padded != self.pad_id
        pooled = helpers.masked_mean(self.embed(padded), attention_mask)
        return padded, pooled


def build_ragged_tokens():
    torch.manual_seed(0)
    model = RaggedTokenEncoder()
    g = torch.Generator().manual_seed(18)
    raw = torch.randint(100, 122, (15,), generator=g)
    return model, (raw, torch.tensor([6, 2, 7]))


class TabularScaler(nn.Module):
    """Robust scaling of numeric columns (clip to percentiles, standardise) then an MLP."""

    def __init__(self, n_features: int = 5, clip_pct: float = 2.0):
        super().__init__()
        self.clip_pct = clip_pct
        self.mlp = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        arr = x.numpy()
        lo = np.percentile(arr, self.clip_pct, axis=0)
        hi = np.percentile(arr, 100 - self.clip_pct, axis=0)
        arr = np.clip(arr, lo, hi)
        z = (arr - arr.mean(axis=0)) / (arr.std(axis=0) + 1e-6)
        n_clipped = float((arr == lo).sum() + (arr == hi).sum())  # BREAK: a count read only for the log line
        logger.info("clipped %d values, %.1f%% of the batch", n_clipped, 100 * n_clipped / math.prod(arr.shape))  # BREAK: a logging call
        feats = torch.from_numpy(z).float()
        helpers.log_tensor_stats("scaled", feats)
        return self.mlp(feats)


def build_tabular_scaler():
    torch.manual_seed(0)
    model = TabularScaler()
    g = torch.Generator().manual_seed(19)
    return model, torch.randn(32, 5, generator=g) * torch.tensor([1.0, 10.0, 0.1, 5.0, 2.0])
