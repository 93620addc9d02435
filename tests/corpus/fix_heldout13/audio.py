"""Audio: hitachi-speech/EEND's PyTorch backend for speaker diarization -- the self-attentive ``TransformerModel``
over padded feature sequences cut back to their lengths, ``batch_pit_loss`` (binary cross-entropy under every
speaker permutation, the best permutation's labels kept), and ``report_diarization_error``'s per-utterance
statistics (speech and speaker miss / false alarm / confusion) summed as Python floats, as ``train.py`` does each
step -- and facebookresearch/demucs' ``train_model`` step for music source separation (v2's loop and waveform
``Demucs`` with ``center_trim`` on its skips and on the targets; the ``augment`` chain of random shifts, channel and
sign flips, the later ``Scale`` gated by Python's ``random``, and remixing), the L1 loss and its running mean for
tqdm."""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import FlipChannels, FlipSign, Remix, Scale, Shift, seeded


class TransformerModel(nn.Module):
    def __init__(self, n_speakers, in_size, n_heads, n_units, n_layers, dim_feedforward=32, dropout=0.1):
        super().__init__()
        self.n_speakers = n_speakers
        self.in_size = in_size
        self.n_heads = n_heads
        self.n_units = n_units
        self.n_layers = n_layers
        self.encoder = nn.Linear(in_size, n_units)
        self.encoder_norm = nn.LayerNorm(n_units)
        encoder_layers = nn.TransformerEncoderLayer(n_units, n_heads, dim_feedforward, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, n_layers, enable_nested_tensor=False)
        self.decoder = nn.Linear(n_units, n_speakers)
        self.src_mask = None

    def forward(self, src, activation=None):
        ilens = [x.shape[0] for x in src]
        src = nn.utils.rnn.pad_sequence(src, padding_value=-1, batch_first=True)
        # src: (B, T, E)
        src = self.encoder(src)
        src = self.encoder_norm(src)
        # src: (T, B, E)
        src = src.transpose(0, 1)
        # output: (T, B, E)
        output = self.transformer_encoder(src, self.src_mask)
        # output: (B, T, E)
        output = output.transpose(0, 1)
        # output: (B, T, C)
        output = self.decoder(output)
        if activation:
            output = activation(output)
        output = [out[:ilen] for out, ilen in zip(output, ilens, strict=True)]
        return output


def pit_loss(pred, label, label_delay=0):
    """Permutation-invariant training (PIT) cross entropy loss function."""
    # label permutations along the speaker axis
    label_perms = [label[..., list(p)] for p in permutations(range(label.shape[-1]))]
    losses = torch.stack([F.binary_cross_entropy_with_logits(pred[label_delay:, ...], lab[: len(lab) - label_delay, ...])
                          for lab in label_perms])
    min_loss = losses.min() * (len(label) - label_delay)
    min_index = losses.argmin().detach()
    return min_loss, label_perms[min_index]  # BREAK: stack the permuted labels and index the stack with the tensor argmin


def batch_pit_loss(ys, ts, label_delay=0):
    """PIT loss over mini-batch."""
    loss_w_labels = [pit_loss(y, t) for (y, t) in zip(ys, ts, strict=True)]
    losses, labels = zip(*loss_w_labels, strict=True)
    loss = torch.stack(losses).sum()
    n_frames = np.sum([t.shape[0] for t in ts])
    loss = loss / n_frames
    return loss, labels


def calc_diarization_error(pred, label, label_delay=0):
    """Diarization error statistics of one utterance (the inputs to DER)."""
    # mask the padding part
    label = label[: len(label) - label_delay, ...]
    decisions = torch.sigmoid(pred[label_delay:, ...]) > 0.5
    n_ref = label.sum(axis=-1).long()
    n_sys = decisions.sum(axis=-1).long()
    res = {}
    res["speech_scored"] = (n_ref > 0).sum()
    res["speech_miss"] = ((n_ref > 0) & (n_sys == 0)).sum()
    res["speech_falarm"] = ((n_ref == 0) & (n_sys > 0)).sum()
    res["speaker_scored"] = (n_ref).sum()
    res["speaker_miss"] = torch.max((n_ref - n_sys), torch.zeros_like(n_ref)).sum()
    res["speaker_falarm"] = torch.max((n_sys - n_ref), torch.zeros_like(n_ref)).sum()
    n_map = ((label == 1) & (decisions == 1)).sum(axis=-1)
    res["speaker_error"] = (torch.min(n_ref, n_sys) - n_map).sum()
    res["correct"] = (label == decisions).sum() / label.shape[1]
    res["diarization_error"] = res["speaker_miss"] + res["speaker_falarm"] + res["speaker_error"]
    res["frames"] = len(label)
    return res


def report_diarization_error(ys, labels):
    """Sum of the diarization error statistics over the mini-batch."""
    stats_avg = {}
    cnt = 0
    for y, t in zip(ys, labels, strict=True):
        stats = calc_diarization_error(y, t)
        for k, v in stats.items():
            stats_avg[k] = stats_avg.get(k, 0) + float(v)  # BREAK must-not: the reporter accumulates Python floats for the epoch's statistics
        cnt += 1
    stats_avg = {k: v / cnt for k, v in stats_avg.items()}
    return stats_avg


class EENDTrainStep(nn.Module):
    """One step of ``train()`` in ``pytorch_backend/train.py`` without the optimizer: loss and statistics."""

    def __init__(self):
        super().__init__()
        self.model = TransformerModel(n_speakers=2, in_size=10, n_heads=2, n_units=16, n_layers=2)

    def forward(self, y, t):
        output = self.model(y)
        loss, label = batch_pit_loss(output, t)
        stats = report_diarization_error(output, label)
        return loss, stats


def build_eend_pit():
    seeded(1318)
    lengths = [14, 9, 11]
    ys = [torch.randn(n, 10) for n in lengths]
    ts = []
    for n in lengths:
        t = torch.zeros(n, 2)
        a, b = sorted(torch.randint(1, n - 1, (2,)).tolist())
        t[:b, 0] = 1.0
        t[a:, 1] = 1.0
        ts.append(t)
    return EENDTrainStep(), (ys, ts)


# ------------------------------------------------------------------ facebookresearch/demucs (v2)


def center_trim(tensor, reference):
    """Center trim `tensor` with respect to `reference`, along the last dimension."""
    if hasattr(reference, "size"):
        reference = reference.size(-1)
    delta = tensor.size(-1) - reference
    if delta < 0:
        raise ValueError(f"tensor must be larger than reference. Delta is {delta}.")
    if delta:
        tensor = tensor[..., delta // 2 : -(delta - delta // 2)]
    return tensor


def rescale_conv(conv, reference):
    std = conv.weight.std().detach()
    scale = (std / reference) ** 0.5
    conv.weight.data /= scale
    if conv.bias is not None:
        conv.bias.data /= scale


def rescale_module(module, reference):
    for sub in module.modules():
        if isinstance(sub, nn.Conv1d | nn.ConvTranspose1d):
            rescale_conv(sub, reference)


class Demucs(nn.Module):
    def __init__(self, sources, audio_channels=2, channels=8, depth=2, rewrite=True, glu=True, rescale=0.1,
                 kernel_size=8, stride=4, growth=2.0, lstm_layers=0, context=3, normalize=True):
        super().__init__()
        self.audio_channels = audio_channels
        self.sources = sources
        self.kernel_size = kernel_size
        self.context = context
        self.stride = stride
        self.depth = depth
        self.channels = channels
        self.normalize = normalize
        self.encoder = nn.ModuleList()
        self.decoder = nn.ModuleList()
        if glu:
            activation = nn.GLU(dim=1)
            ch_scale = 2
        else:
            activation = nn.ReLU()
            ch_scale = 1
        in_channels = audio_channels
        for index in range(depth):
            encode = []
            encode += [nn.Conv1d(in_channels, channels, kernel_size, stride), nn.ReLU()]
            if rewrite:
                encode += [nn.Conv1d(channels, ch_scale * channels, 1), activation]
            self.encoder.append(nn.Sequential(*encode))

            decode = []
            if index > 0:
                out_channels = in_channels
            else:
                out_channels = len(self.sources) * audio_channels
            if rewrite:
                decode += [nn.Conv1d(channels, ch_scale * channels, context), activation]
            decode += [nn.ConvTranspose1d(channels, out_channels, kernel_size, stride)]
            if index > 0:
                decode.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*decode))
            in_channels = channels
            channels = int(growth * channels)
        self.lstm = None  # lstm_layers=0
        if rescale:
            rescale_module(self, reference=rescale)

    def valid_length(self, length):
        for _ in range(self.depth):
            length = math.ceil((length - self.kernel_size) / self.stride) + 1
            length = max(1, length)
            length += self.context - 1
        for _ in range(self.depth):
            length = (length - 1) * self.stride + self.kernel_size
        return int(length)

    def forward(self, mix):
        x = mix
        if self.normalize:
            mono = mix.mean(dim=1, keepdim=True)
            mean = mono.mean(dim=-1, keepdim=True)
            std = mono.std(dim=-1, keepdim=True)
        else:
            mean = 0
            std = 1
        x = (x - mean) / (1e-5 + std)
        saved = []
        for encode in self.encoder:
            x = encode(x)
            saved.append(x)
        if self.lstm:
            x = self.lstm(x)
        for decode in self.decoder:
            skip = center_trim(saved.pop(-1), x)
            x = x + skip
            x = decode(x)
        x = x * std + mean
        x = x.view(x.size(0), len(self.sources), self.audio_channels, x.size(-1))
        return x


class DemucsTrainStep(nn.Module):
    """One batch of ``train_model`` in ``demucs/train.py`` without the backward, grad norm and optimizer step."""

    def __init__(self, batch_size=4, shift=64):
        super().__init__()
        self.model = Demucs(sources=["drums", "bass", "other", "vocals"])
        self.augment = nn.Sequential(Shift(shift), FlipChannels(), FlipSign(), Scale(), Remix(group_size=4))
        self.criterion = nn.L1Loss()
        self.batch_size = batch_size
        self.diffq = 0  # no quantizer
        self.total_loss = 0
        self.postfix = {}

    def forward(self, idx, sources):
        if len(sources) < self.batch_size:
            # skip uncomplete batch for augment.Remix to work properly
            return None
        sources = self.augment(sources)
        mix = sources.sum(dim=1)
        estimates = self.model(mix)
        sources = center_trim(sources, estimates)
        loss = self.criterion(estimates, sources)
        model_size = 0
        train_loss = loss + self.diffq * model_size
        self.total_loss += loss.item()  # BREAK must-not: the running loss is formatted into tqdm's postfix every batch; it must come to the host here
        current_loss = self.total_loss / (1 + idx)
        self.postfix = dict(loss=f"{current_loss:.4f}", ms=f"{model_size:.2f}")
        return train_loss, estimates, dict(self.postfix)


def build_demucs_step():
    seeded(1324)
    model = DemucsTrainStep()
    model.total_loss = 0.9321  # the epoch's first three batches
    length = model.model.valid_length(200) + 64
    return model, (3, 0.3 * torch.randn(4, 4, 2, length))
