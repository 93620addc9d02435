"""NLP models: BERT-style masking in forward, dynamic batch trimming, a CRF tagger."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean, report, viterbi_backtrace


class BertMLM(nn.Module):
    """A tiny masked LM that masks its own inputs (80% [MASK], 10% random, 10% kept)."""

    def __init__(self, vocab: int = 40, dim: int = 16, pad_id: int = 0, cls_id: int = 1, sep_id: int = 2,
                 mask_id: int = 3, mlm_probability: float = 0.15) -> None:
        super().__init__()
        self.vocab, self.pad_id, self.cls_id, self.sep_id, self.mask_id = vocab, pad_id, cls_id, sep_id, mask_id
        self.mlm_probability = mlm_probability
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor):
        labels = input_ids.clone()
        probability = torch.full(input_ids.shape, self.mlm_probability)
        special = (input_ids == self.pad_id) | (input_ids == self.cls_id) | (input_ids == self.sep_id)
        probability.masked_fill_(special, 0.0)
        masked = torch.bernoulli(probability).bool()
        if not masked.any():  # BREAK: mask position 1 under a tensor condition instead (masked[:, 1] |= ~masked.any())
            masked[:, 1] = True
        inputs = input_ids.clone()
        replaced = torch.bernoulli(torch.full(input_ids.shape, 0.8)).bool() & masked
        inputs[replaced] = self.mask_id
        randomized = torch.bernoulli(torch.full(input_ids.shape, 0.5)).bool() & masked & ~replaced
        random_words = torch.randint(self.vocab, input_ids.shape, dtype=torch.long)
        inputs[randomized] = random_words[randomized]  # BREAK: torch.where(randomized, random_words, inputs)
        hidden = torch.tanh(self.mix(self.embed(inputs)))
        logits = self.lm_head(hidden)
        loss = F.cross_entropy(logits[masked], labels[masked])  # BREAK: ignore_index=-100 on unmasked labels gives the same mean
        return loss, inputs


def build_bert_mlm():
    torch.manual_seed(0)
    model = BertMLM()
    ids = torch.randint(4, 40, (4, 12))
    ids[:, 0] = 1
    ids[:, -1] = 2
    ids[2, 8:] = 0
    return model, (ids,)


class TrimmedClassifier(nn.Module):
    """Text classifier that trims the batch to its longest sequence before encoding."""

    def __init__(self, vocab: int = 30, dim: int = 16, max_positions: int = 24, n_classes: int = 3) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_positions, dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.cls = nn.Linear(dim, n_classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        max_len = int(attention_mask.sum(1).max())  # BREAK: padding is masked everywhere, so trimming changes no output
        input_ids = input_ids[:, :max_len]
        attention_mask = attention_mask[:, :max_len]
        report("trimmed batch length", max_len)
        x = self.tok(input_ids) + self.pos(torch.arange(max_len))
        scores = self.q(x) @ self.k(x).transpose(1, 2) / math.sqrt(x.shape[-1])
        scores = scores.masked_fill(~attention_mask[:, None, :].bool(), float("-inf"))
        x = x + scores.softmax(-1) @ self.v(x)
        return self.cls(masked_mean(x, attention_mask))


def build_dynamic_truncation():
    torch.manual_seed(1)
    model = TrimmedClassifier()
    lengths = torch.tensor([9, 5, 11, 7])
    mask = (torch.arange(24)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1, 30, (4, 24)) * mask
    return model, (ids, mask)


class CRFTagger(nn.Module):
    """Token tagger with a linear-chain CRF: NLL for training, Viterbi paths for the eval loop."""

    def __init__(self, vocab: int = 30, dim: int = 12, n_tags: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, n_tags)
        self.start = nn.Parameter(torch.randn(n_tags) * 0.1)
        self.end = nn.Parameter(torch.randn(n_tags) * 0.1)
        self.transitions = nn.Parameter(torch.randn(n_tags, n_tags) * 0.1)

    def _log_partition(self, em: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        score = self.start + em[:, 0]
        for t in range(1, em.shape[1]):
            nxt = torch.logsumexp(score[:, :, None] + self.transitions + em[:, t, None, :], dim=1)
            score = torch.where(mask[:, t, None], nxt, score)
        return torch.logsumexp(score + self.end, dim=1)

    def _gold_score(self, em: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        score = self.start[tags[:, 0]] + em[:, 0].gather(1, tags[:, :1]).squeeze(1)
        for t in range(1, tags.shape[1]):
            step = self.transitions[tags[:, t - 1], tags[:, t]] + em[:, t].gather(1, tags[:, t : t + 1]).squeeze(1)
            score = score + step * mask[:, t]
        last_tags = tags.gather(1, (mask.sum(1) - 1)[:, None]).squeeze(1)
        return score + self.end[last_tags]

    def decode(self, em: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        score = self.start + em[:, 0]
        history = []
        for t in range(1, em.shape[1]):
            nxt, idx = (score[:, :, None] + self.transitions + em[:, t, None, :]).max(dim=1)
            score = torch.where(mask[:, t, None], nxt, score)
            history.append(idx)
        return viterbi_backtrace(score + self.end, history, mask.sum(1))

    def forward(self, tokens: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor):
        em = self.proj(torch.tanh(self.embed(tokens)))
        nll = (self._log_partition(em, mask) - self._gold_score(em, tags, mask)).sum()
        loss = nll / mask.sum().item()  # BREAK: a token count read back only to divide by; divide by the tensor
        return loss, self.decode(em, mask)


def build_crf_viterbi():
    torch.manual_seed(2)
    model = CRFTagger()
    lengths = torch.tensor([6, 4, 7])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    tokens = torch.randint(1, 30, (3, 7)) * mask
    tags = torch.randint(0, 5, (3, 7)) * mask
    return model, (tokens, tags, mask)
