"""Sequences: a MIDI event language model, no-repeat-n-gram greedy decoding, a token-dropping block,
a pairwise reward model."""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import event_times, last_token, ngram_banned

logger = logging.getLogger(__name__)


class MidiEventLM(nn.Module):
    """Next-event logits over note-on / note-off / time-shift tokens, with the onset time encoded by bar phase."""

    def __init__(self, n_pitch: int = 12, n_shift: int = 8, dim: int = 16, ticks_per_bar: int = 16) -> None:
        super().__init__()
        self.pad = 0
        self.shift_offset = 1 + 2 * n_pitch
        vocab = self.shift_offset + n_shift
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.time_proj = nn.Linear(8, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, vocab)
        self.register_buffer("freqs", torch.tensor([1.0, 2.0, 4.0, 8.0]) * 2 * math.pi / ticks_per_bar)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        phase = event_times(tokens, self.shift_offset)[..., None] * self.freqs
        h = self.embed(tokens) + self.time_proj(torch.cat([phase.sin(), phase.cos()], -1))
        q, k, v = self.qkv(h).chunk(3, -1)
        t = tokens.shape[1]
        att = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        logits = self.out(h + att.softmax(-1) @ v)
        longest = int((tokens != self.pad).sum(1).max())  # BREAK must-not: the output's length is the batch's longest, read from data
        return logits[:, :longest]


def build_midi_lm() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(61)
    tokens = torch.randint(1, 33, (3, 12))
    tokens[0, 9:] = 0
    tokens[1, 10:] = 0
    tokens[2, 7:] = 0
    return MidiEventLM(), (tokens,)


class NgramBlockedGreedy(nn.Module):
    """Greedy continuation of a prefix for a fixed number of steps, never repeating an n-gram."""

    def __init__(self, vocab: int = 12, dim: int = 8, steps: int = 5, n: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab)
        self.steps, self.n = steps, n

    def forward(self, prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = prefix
        logp_total = torch.zeros(prefix.shape[0])
        for _ in range(self.steps):
            ctx = self.embed(seq).mean(1) + self.embed(seq[:, -1])
            logits = self.out(torch.tanh(self.mix(ctx)))
            for b, toks in enumerate(ngram_banned(seq, self.n)):
                if toks:
                    logits[b, toks] = float("-inf")
            logp = logits.log_softmax(-1)
            nxt = logp.argmax(-1)
            logp_total = logp_total + logp.gather(1, nxt[:, None]).squeeze(1)
            seq = torch.cat([seq, nxt[:, None]], 1)
        return seq, logp_total


def build_ngram_block() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(62)
    return NgramBlockedGreedy(), (torch.tensor([[1, 2, 1, 3], [4, 4, 5, 6], [7, 2, 7, 2]]),)


class TokenDropBlock(nn.Module):
    """Only the top-scoring fraction of tokens goes through the MLP (mixture-of-depths style); the rest skip it."""

    def __init__(self, d: int = 8, hidden: int = 16, capacity: float = 0.6) -> None:
        super().__init__()
        self.router = nn.Linear(d, 1)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.capacity = capacity

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.router(x).squeeze(-1).masked_fill(~mask, float("-inf"))
        k = max(1, int(self.capacity * mask.sum(1).min()))  # BREAK: rank tokens and mask those ranked below k instead of gathering k
        top, idx = scores.topk(k, dim=1)
        sel = x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))
        upd = self.mlp(sel) * torch.sigmoid(top)[..., None]
        return x.scatter_add(1, idx[..., None].expand_as(upd), upd)


def build_token_drop() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(63)
    mask = torch.arange(9)[None] < torch.tensor([9, 7, 8])[:, None]
    return TokenDropBlock(), (torch.randn(3, 9, 8), mask)


class PairwiseRewardModel(nn.Module):
    """Bradley-Terry reward model: scalar reward at the last real token, -log sigmoid(r_chosen - r_rejected)."""

    def __init__(self, vocab: int = 30, dim: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.value_head = nn.Linear(dim, 1)

    def score(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(self.embed(ids)))
        h = h.cumsum(1) / torch.arange(1, ids.shape[1] + 1)[None, :, None]
        return self.value_head(last_token(h, mask)).squeeze(-1)

    def forward(self, chosen: torch.Tensor, chosen_mask: torch.Tensor, rejected: torch.Tensor,
                rejected_mask: torch.Tensor) -> dict:
        r_c, r_r = self.score(chosen, chosen_mask), self.score(rejected, rejected_mask)
        loss = -F.logsigmoid(r_c - r_r).mean()
        acc = (r_c > r_r).float().mean()
        logger.info("reward acc=%.3f margin=%.3f", acc, (r_c - r_r).mean())  # BREAK must-not: the training log line must still be emitted
        return {"loss": loss, "chosen": r_c, "rejected": r_r}


def build_reward_pairwise() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(64)
    chosen, rejected = torch.randint(1, 30, (4, 7)), torch.randint(1, 30, (4, 7))
    chosen_mask = torch.arange(7)[None] < torch.tensor([7, 5, 6, 3])[:, None]
    rejected_mask = torch.arange(7)[None] < torch.tensor([4, 7, 2, 6])[:, None]
    return PairwiseRewardModel(), (chosen * chosen_mask, chosen_mask.long(), rejected * rejected_mask, rejected_mask.long())
