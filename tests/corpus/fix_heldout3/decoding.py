"""Speculative decoding: the acceptance step of one draft round."""

from __future__ import annotations

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.embed(ids)).cumsum(0) / torch.arange(1, ids.shape[0] + 1)[:, None]
        return self.out(h)


class SpeculativeStep(nn.Module):
    """Accept a prefix of the draft tokens by rejection sampling, then sample one correction token."""

    def __init__(self, vocab: int = 12, dim: int = 8) -> None:
        super().__init__()
        self.draft = TinyLM(vocab, dim)
        self.target = TinyLM(vocab, 2 * dim)
        self.stats = {"drafted": 0, "accepted": 0}

    def forward(self, prefix: torch.Tensor, draft_tokens: torch.Tensor):
        k, n = draft_tokens.shape[0], prefix.shape[0]
        seq = torch.cat([prefix, draft_tokens])
        p = self.draft(seq).softmax(-1)[n - 1 : n + k]
        q = self.target(seq).softmax(-1)[n - 1 : n + k]
        p_tok = p[:k].gather(1, draft_tokens[:, None]).squeeze(1)
        q_tok = q[:k].gather(1, draft_tokens[:, None]).squeeze(1)
        r = torch.rand(k)
        accepted = r < (q_tok / p_tok).clamp(max=1.0)
        n_accept = int(accepted.long().cumprod(0).sum())  # BREAK must-not: the number accepted sizes the returned tokens
        self.stats["drafted"] += k
        self.stats["accepted"] += n_accept
        if n_accept < k:
            residual = (q[n_accept] - p[n_accept]).clamp(min=0)
            dist = residual / residual.sum()
        else:
            dist = q[k]
        next_token = torch.multinomial(dist.detach(), 1)
        print(f"speculative step: accepted {n_accept}/{k}")  # BREAK: a progress print; dropping it keeps the outputs
        return torch.cat([draft_tokens[:n_accept], next_token]), q_tok


def build_speculative_accept():
    torch.manual_seed(8)
    model = SpeculativeStep()
    with torch.no_grad():
        model.target.out.weight.mul_(5.0)  # a sharper target, so the draft is only partly accepted
    return model, (torch.tensor([1, 4, 2, 7]), torch.tensor([3, 3, 9, 5, 0]))
