"""Recommenders: SASRec next-item scoring with already-seen items filtered out, and a DCN-style
CTR model that maps raw feature ids through the vocabulary dict saved at preprocessing time."""

from __future__ import annotations

import math

import torch
from torch import nn

from .helpers import lengths_to_mask, seeded

# --------------------------------------------------------------------------- SASRec


class SASRec(nn.Module):
    """Self-attentive sequential recommender (Kang & McAuley 2018), one block, right-padded histories."""

    def __init__(self, n_items: int = 30, d: int = 16, max_len: int = 8) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(n_items + 1, d, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.ln2 = nn.LayerNorm(d)

    def forward(self, seq: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, t = seq.shape
        pad_mask = lengths_to_mask(lengths)
        h = self.item_emb(seq) + self.pos_emb(torch.arange(t))[None]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        allowed = causal[None] & pad_mask[:, None, :]
        att = (self.q(h) @ self.k(h).transpose(1, 2)) / math.sqrt(h.shape[-1])
        att = att.masked_fill(~allowed, -1e9).softmax(-1)
        h = self.ln1(h + att @ self.v(h))
        h = self.ln2(h + self.ffn(h))
        last = torch.stack([h[i, n - 1] for i, n in enumerate(lengths.tolist())])  # BREAK: gather each row's last real position with h.gather(1, lengths - 1 ...)
        scores = last @ self.item_emb.weight.T  # (B, n_items + 1)
        for i in range(b):
            seen = seq[i][seq[i] > 0]  # BREAK: scatter the history into a (B, n_items + 1) bool mask (minus the pad column) and masked_fill
            scores[i, seen] = float("-inf")
        return scores


def build_sasrec_last() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(100)
    model = SASRec()
    g = seeded(101)
    lengths = torch.tensor([8, 5, 3, 6])  # padded to the longest history
    seq = torch.randint(1, 31, (4, 8), generator=g)
    seq = seq * lengths_to_mask(lengths, 8)
    return model, (seq, lengths)


# --------------------------------------------------------------------------- CTR with a vocabulary dict


class VocabCTR(nn.Module):
    """Raw ids -> vocabulary indices through the preprocessing dict (unknown -> 0), mean-pooled embeddings,
    one DCN cross layer, a logistic output."""

    def __init__(self, vocab: dict[int, int], n_dense: int = 4, d: int = 8) -> None:
        super().__init__()
        self.vocab = vocab
        self.emb = nn.Embedding(len(vocab) + 1, d)
        width = d + n_dense
        self.cross = nn.Linear(width, width)
        self.deep = nn.Sequential(nn.Linear(width, 16), nn.ReLU())
        self.out = nn.Linear(width + 16, 1)

    def forward(self, raw_ids: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        idx = torch.tensor([[self.vocab.get(r, 0) for r in row] for row in raw_ids.tolist()], dtype=torch.long)  # BREAK: sorted vocab keys/values as buffers; torch.searchsorted finds each raw id, torch.where sends misses to 0
        e = self.emb(idx).mean(1)
        x0 = torch.cat([e, dense], -1)
        x1 = x0 * self.cross(x0) + x0
        return torch.sigmoid(self.out(torch.cat([x1, self.deep(x0)], -1))).squeeze(-1)


def build_id_remap() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(102)
    g = seeded(103)
    raw_vocab = torch.randperm(1000, generator=g)[:25].tolist()
    vocab = {raw: i + 1 for i, raw in enumerate(raw_vocab)}
    model = VocabCTR(vocab)
    known = torch.tensor(raw_vocab)[torch.randint(0, 25, (5, 6), generator=g)]
    unknown = torch.randint(1000, 5000, (5, 6), generator=g)
    raw_ids = torch.where(torch.rand(5, 6, generator=g) < 0.7, known, unknown)
    dense = torch.randn(5, 4, generator=g)
    return model, (raw_ids, dense)
