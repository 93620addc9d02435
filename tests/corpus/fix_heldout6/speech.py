"""Speech: an AAM-softmax speaker-verification head with a hard-negative term, and an energy VAD gate before
statistics pooling (x-vector style)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean


class AAMSoftmaxHead(nn.Module):
    """Additive angular margin softmax over speaker centres; the margin ramps up over the first steps, and
    negatives closer than the mean positive (less a margin) add a hard-negative penalty."""

    def __init__(self, dim: int = 16, n_speakers: int = 10, scale: float = 30.0, margin: float = 0.2,
                 ramp_steps: int = 8, hard_margin: float = 0.1) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_speakers, dim) * 0.1)
        self.scale, self.margin, self.ramp_steps, self.hard_margin = scale, margin, ramp_steps, hard_margin
        self.register_buffer("step", torch.tensor(3))

    def forward(self, emb: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = F.linear(F.normalize(emb), F.normalize(self.weight)).clamp(-1 + 1e-6, 1 - 1e-6)
        m = self.margin * min(1.0, float(self.step) / self.ramp_steps)  # BREAK: the ramp is a clamp of the step tensor
        target = F.one_hot(labels, cos.shape[1]).bool()
        logits = self.scale * torch.where(target, torch.cos(torch.acos(cos) + m), cos)
        ce = F.cross_entropy(logits, labels)
        pos = cos.gather(1, labels[:, None])
        neg = cos.masked_fill(target, -2.0)
        thr = pos.mean() - self.hard_margin
        n_hard = int((neg > thr).sum())  # BREAK: a clamp-and-sum over all negatives counts only the hard ones
        hard = neg.flatten().topk(max(n_hard, 1)).values
        hard_loss = (hard - thr).clamp(min=0).sum() / max(n_hard, 1)
        self.step += 1
        return ce + 0.5 * hard_loss


def build_aam_speaker() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(601)
    head, labels = AAMSoftmaxHead(), torch.randint(0, 10, (12,))
    return head, (head.weight.detach()[labels] * 5 + 0.8 * torch.randn(12, 16), labels)


class VADStatsPooling(nn.Module):
    """Frame encoder, a relative-energy voice-activity gate, then mean and standard-deviation pooling over the
    voiced frames.  Prints how many frames were voiced (the recipe's log line)."""

    def __init__(self, n_mels: int = 8, dim: int = 12, threshold_db: float = -12.0) -> None:
        super().__init__()
        self.frame = nn.Sequential(nn.Linear(n_mels, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.out = nn.Linear(2 * dim, dim)
        self.threshold_db = threshold_db

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        energy_db = 10 * torch.log10(feats.pow(2).mean(-1) + 1e-10)
        voiced = energy_db > energy_db.max() + self.threshold_db
        print(f"vad: {int(voiced.sum())}/{feats.shape[0]} frames voiced")  # BREAK must-not: the user wants this line printed with the count
        h = self.frame(feats)
        mu = masked_mean(h, voiced)
        sd = (masked_mean((h - mu) ** 2, voiced) + 1e-5).sqrt()
        return self.out(torch.cat([mu, sd]))


def build_vad_pool() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(602)
    gain = torch.ones(30, 1)
    gain[:6], gain[22:] = 0.05, 0.02  # silence before and after the utterance
    return VADStatsPooling(), torch.randn(30, 8) * gain
