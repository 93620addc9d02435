"""Sequence models: ALiBi attention, a captioner with scheduled sampling, an OCR head with a blank-ratio guard."""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from torch import nn


def alibi_slopes(n_heads: int) -> list[float]:
    """Press et al.: geometric slopes, interleaving for head counts that are not powers of two."""
    def pow2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n_heads).is_integer():
        return pow2(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return pow2(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


class AlibiAttention(nn.Module):
    def __init__(self, dim: int = 12, n_heads: int = 3) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)))

    def bias(self, t: int) -> torch.Tensor:
        pos = torch.arange(t)
        rel = (pos[None, :] - pos[:, None]).clamp(max=0).float()
        out = torch.empty(self.n_heads, t, t)
        for h in range(self.n_heads):
            out[h] = self.slopes[h].item() * rel  # BREAK: broadcast slopes[:, None, None] * rel
        return out

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        att = q @ k.transpose(-1, -2) / math.sqrt(c // self.n_heads) + self.bias(t)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        if not pad_mask.all():  # BREAK: masked_fill with an all-true mask changes nothing, so apply it always
            att = att.masked_fill(~pad_mask[:, None, None, :], float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


def build_alibi() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(15)
    pad = torch.ones(2, 6, dtype=torch.bool)
    pad[1, 4:] = False
    return AlibiAttention(), (torch.randn(2, 6, 12), pad)


class Captioner(nn.Module):
    """GRU captioner trained with scheduled sampling (Bengio et al. 2015) from Python's random."""

    def __init__(self, feat: int = 10, vocab: int = 9, hid: int = 12, pad: int = 0) -> None:
        super().__init__()
        self.init = nn.Linear(feat, hid)
        self.emb = nn.Embedding(vocab, hid)
        self.cell = nn.GRUCell(hid, hid)
        self.out = nn.Linear(hid, vocab)
        self.tf_ratio, self.pad = 0.5, pad

    def decode(self, img: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.init(img))
        inp = caps[:, 0]
        outs = []
        for t in range(1, caps.shape[1]):
            h = self.cell(self.emb(inp), h)
            logits = self.out(h)
            outs.append(logits)
            if random.random() < self.tf_ratio:  # BREAK must-not: the coin comes from Python's global random stream
                inp = caps[:, t]
            else:
                inp = logits.argmax(-1)
        return torch.stack(outs, 1)

    def forward(self, img: torch.Tensor, caps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.decode(img, caps)
        tgt = caps[:, 1:]
        keep = tgt != self.pad
        loss = F.cross_entropy(logits[keep], tgt[keep])  # BREAK: ignore_index=pad gives the same mean
        return logits, loss


def build_scheduled_sampling() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(16)
    random.seed(16)
    caps = torch.randint(1, 9, (3, 6))
    caps[0, 4:] = 0
    caps[2, 3:] = 0
    return Captioner(), (torch.randn(3, 10), caps)


class OCRHead(nn.Module):
    """CRNN-style per-column classifier; damps the blank logit when nearly every column predicts blank."""

    def __init__(self, dim: int = 10, n_chars: int = 7, blank: int = 0) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, n_chars)
        with torch.no_grad():
            self.fc.bias[blank] = 3.0
        self.blank, self.penalty = blank, 2.0
        self.register_buffer("blank_onehot", F.one_hot(torch.tensor(blank), n_chars).float())

    def forward(self, feats: torch.Tensor) -> dict:
        logits = self.fc(feats)
        blank_ratio = (logits.argmax(-1) == self.blank).float().mean()
        if blank_ratio > 0.9:  # BREAK: torch.where on the condition
            logits = logits - self.penalty * self.blank_onehot
        log_probs = logits.log_softmax(-1)
        return {"log_probs": log_probs, "blank_ratio": blank_ratio.item()}  # BREAK must-not: returned as a Python float


def build_ocr_blank() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(17)
    return OCRHead(), torch.randn(2, 8, 10) * 0.3
