"""Health data: a Cox proportional-hazards loss over risk sets, BRITS-style imputation, padding-aware protein pooling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import time_gaps


def concordance(risk: torch.Tensor, times: torch.Tensor, events: torch.Tensor) -> float:
    """Harrell's C-index: the fraction of comparable pairs ordered correctly by risk."""
    r, t, e = risk.detach().tolist(), times.tolist(), events.tolist()  # BREAK must-not: the C-index is returned as a Python float
    good, pairs = 0.0, 0
    for i in range(len(r)):
        if not e[i]:
            continue
        for j in range(len(r)):
            if t[j] > t[i]:
                pairs += 1
                good += 1.0 if r[i] > r[j] else 0.5 if r[i] == r[j] else 0.0
    return good / max(pairs, 1)


class CoxHead(nn.Module):
    """Negative Cox partial log-likelihood (Breslow, no ties) for a small risk MLP."""

    def __init__(self, d: int = 6, hidden: int = 8) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, times: torch.Tensor, events: torch.Tensor) -> dict:
        risk = self.net(x).squeeze(-1)
        order = torch.argsort(times, descending=True)
        risk_o, events_o = risk[order], events[order]
        log_risk_set = torch.logcumsumexp(risk_o, 0)
        n_events = int(events.sum())  # BREAK: dividing by the event count clamped to 1 gives 0 when there are none
        if n_events == 0:
            loss = risk.sum() * 0.0
        else:
            loss = -((risk_o - log_risk_set) * events_o).sum() / n_events
        return {"loss": loss, "risk": risk, "c_index": concordance(risk, times, events)}


def build_cox_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(31)
    events = (torch.rand(12) < 0.6).float()
    return CoxHead(), (torch.randn(12, 6), torch.rand(12) * 5, events)


class BritsImputer(nn.Module):
    """A recurrent imputer: the hidden state decays with the time since a feature was seen; gaps are filled."""

    def __init__(self, d: int = 3, hidden: int = 8) -> None:
        super().__init__()
        self.decay = nn.Linear(d, hidden)
        self.out = nn.Linear(hidden, d)
        self.cell = nn.GRUCell(2 * d, hidden)
        self.hidden = hidden

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t_len, _ = x.shape
        delta = time_gaps(mask)
        h = x.new_zeros(b, self.hidden)
        loss = x.new_zeros(())
        imputed = []
        for t in range(t_len):
            x_t, m_t = x[:, t], mask[:, t]
            h = h * torch.exp(-F.relu(self.decay(delta[:, t])))
            x_hat = self.out(h)
            loss = loss + ((x_t - x_hat).abs() * m_t).sum() / (m_t.sum() + 1e-5)
            if m_t.all():  # BREAK: with every value observed the masked blend equals x_t exactly
                x_c = x_t
            else:
                x_c = m_t * x_t + (1 - m_t) * x_hat
            h = self.cell(torch.cat([x_c, m_t], -1), h)
            imputed.append(x_c)
        return torch.stack(imputed, 1), loss / t_len


def build_ts_impute() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(32)
    mask = (torch.rand(4, 6, 3) < 0.7).float()
    mask[:, 0] = 1.0
    mask[:, 3] = 1.0
    return BritsImputer(), (torch.randn(4, 6, 3) * mask, mask)


class ProteinPooler(nn.Module):
    """Residue embeddings, two masked convolutions, mean over the real residues, a family classifier."""

    def __init__(self, vocab: int = 25, dim: int = 8, n_classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.conv1 = nn.Conv1d(dim, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, padding=1)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        lengths = (tokens != 0).sum(1)
        max_len = int(lengths.max())  # BREAK: pad columns embed to zero and are masked, so the trim changes no value
        tokens = tokens[:, :max_len]
        pad = (tokens != 0).unsqueeze(1).float()
        h = F.gelu(self.conv1(self.embed(tokens).transpose(1, 2))) * pad
        h = (F.gelu(self.conv2(h)) * pad).transpose(1, 2)
        pooled = torch.stack([h[i, :n].mean(0) for i, n in enumerate(lengths.tolist())])  # BREAK: h is zero past each length: sum over positions / lengths
        return self.head(pooled)


def build_protein_pool() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(33)
    tokens = torch.randint(1, 25, (3, 11))
    for row, n in enumerate([8, 5, 7]):
        tokens[row, n:] = 0
    return ProteinPooler(), (tokens,)
