"""Sequential recommendation: jaywonchung/BERT4Rec-VAE-Pytorch's ``BERTModel`` (item and position embeddings,
padding mask from the item ids, pre-norm transformer blocks with its own ``Attention``) under ``BERTTrainer``:
``calculate_loss`` over the cloze-masked items of a training batch and ``calculate_metrics`` on a validation
batch (scores of the candidates at the last position, ``recalls_and_ndcgs_for_ks`` with its per-row ideal DCG)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


class Attention(nn.Module):
    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        # 1) Do all the linear projections in batch from d_model => h x d_k
        query, key, value = [lin(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
                             for lin, x in zip(self.linear_layers, (query, key, value), strict=True)]
        # 2) Apply attention on all the projected vectors in batch.
        x, attn = self.attention(query, key, value, mask=mask, dropout=self.dropout)
        # 3) "Concat" using a view and apply a final linear.
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = GELU()

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class TransformerBlock(nn.Module):
    def __init__(self, hidden, attn_heads, feed_forward_hidden, dropout):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model=hidden, d_ff=feed_forward_hidden, dropout=dropout)
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


class BERTModel(nn.Module):
    def __init__(self, num_items=30, max_len=8, hidden=16, n_layers=2, heads=2, dropout=0.1):
        super().__init__()
        vocab_size = num_items + 2  # 0 = padding, num_items + 1 = the cloze mask token
        self.token = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position = nn.Embedding(max_len, hidden)
        self.emb_dropout = nn.Dropout(p=dropout)
        self.transformer_blocks = nn.ModuleList([TransformerBlock(hidden, heads, hidden * 4, dropout) for _ in range(n_layers)])
        self.out = nn.Linear(hidden, num_items + 1)

    def forward(self, x):
        mask = (x > 0).unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)
        batch_size = x.size(0)
        x = self.emb_dropout(self.token(x) + self.position.weight.unsqueeze(0).repeat(batch_size, 1, 1))
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, mask)
        return self.out(x)


def recalls_and_ndcgs_for_ks(scores, labels, ks):
    metrics = {}

    scores = scores
    labels = labels
    answer_count = labels.sum(1)

    labels_float = labels.float()
    rank = (-scores).argsort(dim=1)
    cut = rank
    for k in sorted(ks, reverse=True):
        cut = cut[:, :k]
        hits = labels_float.gather(1, cut)
        metrics[f"Recall@{k}"] = (hits.sum(1) / torch.min(torch.Tensor([k]).to(labels.device), labels.sum(1).float())).mean().cpu().item()  # BREAK must-not: the metrics dict holds Python floats for the AverageMeterSet and the logger

        position = torch.arange(2, 2 + k)
        weights = 1 / torch.log2(position.float())
        dcg = (hits * weights.to(hits.device)).sum(1)
        idcg = torch.Tensor([weights[: min(int(n), k)].sum() for n in answer_count]).to(dcg.device)  # BREAK: the ideal DCG is the cumulative sum of the weights gathered at min(n, k) - 1 per row
        ndcg = (dcg / idcg).mean()
        metrics[f"NDCG@{k}"] = ndcg.cpu().item()

    return metrics


class BERTTrainer(nn.Module):
    def __init__(self, metric_ks=(1, 5, 10)):
        super().__init__()
        self.model = BERTModel()
        self.ce = nn.CrossEntropyLoss(ignore_index=0)
        self.metric_ks = list(metric_ks)

    def calculate_loss(self, batch):
        seqs, labels = batch
        logits = self.model(seqs)  # B x T x V
        logits = logits.view(-1, logits.size(-1))  # (B*T) x V
        labels = labels.view(-1)  # B*T
        return self.ce(logits, labels)

    def calculate_metrics(self, batch):
        seqs, candidates, labels = batch
        scores = self.model(seqs)  # B x T x V
        scores = scores[:, -1, :]  # B x V
        scores = scores.gather(1, candidates)  # B x C
        return recalls_and_ndcgs_for_ks(scores, labels, self.metric_ks)

    def forward(self, train_batch, val_batch):
        loss = self.calculate_loss(train_batch)
        with torch.no_grad():
            metrics = self.calculate_metrics(val_batch)
        return loss, metrics


def build_bert4rec():
    seeded(1320)
    mask_token = 31
    seqs = torch.randint(1, 31, (4, 8))
    seqs[0, :3] = 0  # left padding of a short history
    labels = torch.zeros_like(seqs)
    cloze = (torch.rand(4, 8) < 0.3) & (seqs > 0)
    cloze[:, -1] = True
    labels[cloze] = seqs[cloze]
    seqs = seqs.masked_fill(cloze, mask_token)
    val_seqs = torch.randint(1, 31, (3, 8))
    val_seqs[:, -1] = mask_token
    candidates = torch.stack([torch.randperm(30)[:12] + 1 for _ in range(3)])
    val_labels = torch.zeros(3, 12, dtype=torch.long)
    val_labels[:, 0] = 1  # the held-out item is the first candidate
    val_labels[1, 4] = 1  # and a user with two relevant items
    return BERTTrainer(), ((seqs, labels), (val_seqs, candidates, val_labels))
