"""Text and speech: T5 self-attention with a relative position bias and a KV cache, a CTC head
with greedy decoding, and the attention-mask preparation a tokenizer-side helper does."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import ctc_collapse, make_pad_mask, relative_position_bucket, utterance_confidence

logger = logging.getLogger(__name__)


class T5SelfAttention(nn.Module):
    def __init__(self, d_model: int = 32, n_heads: int = 4, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def compute_bias(self, query_length: int, key_length: int, cache_position: torch.Tensor) -> torch.Tensor:
        context_position = cache_position[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        buckets = relative_position_bucket(relative_position, bidirectional=False,
                                           num_buckets=self.num_buckets, max_distance=self.max_distance)
        values = self.relative_attention_bias(buckets)  # (q, k, heads)
        return values.permute([2, 0, 1]).unsqueeze(0)

    def shape(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], -1, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, hidden_states, past_key, past_value, attention_mask, cache_position):
        batch, q_len, _ = hidden_states.shape
        query = self.shape(self.q(hidden_states))
        key = torch.cat([past_key, self.shape(self.k(hidden_states))], dim=2)
        value = torch.cat([past_value, self.shape(self.v(hidden_states))], dim=2)

        key_length = int(cache_position[-1]) + 1  # BREAK: the bias is added to scores of width key.shape[2]; with a consistent cache (cache_position ends at past + q_len - 1) key_length == key.shape[2]
        position_bias = self.compute_bias(q_len, key_length, cache_position)
        if attention_mask is not None and not attention_mask.all():  # BREAK: with an all-ones mask the added term is 0.0, so adding it unconditionally gives the same scores
            position_bias = position_bias + (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min

        scores = torch.matmul(query, key.transpose(3, 2)) + position_bias  # T5 does not scale
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        out = torch.matmul(weights, value).transpose(1, 2).reshape(batch, q_len, -1)
        return self.o(out), key, value


def build_t5_position_bias():
    torch.manual_seed(2)
    model = T5SelfAttention()
    past = 5
    hidden = torch.randn(2, 3, 32)
    past_key, past_value = torch.randn(2, 4, past, 8), torch.randn(2, 4, past, 8)
    attention_mask = torch.ones(2, past + 3)
    attention_mask[1, :2] = 0  # left padding in the second row
    cache_position = torch.arange(past, past + 3)
    return model, (hidden, past_key, past_value, attention_mask, cache_position)


class CTCHead(nn.Module):
    """Conv subsampling, a projection to the vocabulary, greedy decoding."""

    def __init__(self, feat_dim: int = 12, hidden: int = 24, vocab: int = 7, blank: int = 0) -> None:
        super().__init__()
        self.blank = blank
        self.subsample = nn.Conv1d(feat_dim, hidden, kernel_size=3, stride=2)
        self.proj = nn.Linear(hidden, vocab)

    def forward(self, feats: torch.Tensor, feat_lens: torch.Tensor):
        x = F.relu(self.subsample(feats.transpose(1, 2))).transpose(1, 2)  # (B, T', H)
        out_lens = torch.div(feat_lens - 3, 2, rounding_mode="floor") + 1
        pad_mask = make_pad_mask(out_lens)
        x = x.masked_fill(pad_mask.unsqueeze(-1), 0.0)
        log_probs = self.proj(x).log_softmax(dim=-1)
        confidence = utterance_confidence(log_probs, out_lens)
        hyps = ctc_collapse(log_probs.argmax(dim=-1), out_lens, self.blank)
        return log_probs, confidence, hyps


def build_ctc_greedy_decode():
    torch.manual_seed(3)
    model = CTCHead()
    feats = torch.randn(3, 21, 12)
    feat_lens = torch.tensor([21, 15, 9])  # the batch is padded to its longest utterance
    return model, (feats, feat_lens)


def prepare_decoder_inputs(input_ids: torch.Tensor, pad_token_id: int) -> dict:
    """What a generate() wrapper builds from a left-padded batch before the first forward."""
    attention_mask = input_ids.ne(pad_token_id).long()
    if (attention_mask[:, -1] == 0).any():  # BREAK: the branch only logs a warning; nothing it returns depends on it
        logger.warning("A decoder-only model got right-padded inputs; pass padding_side='left' to the tokenizer.")
    position_ids = attention_mask.cumsum(-1) - 1
    position_ids = position_ids.masked_fill(attention_mask == 0, 1)
    seq_lens = attention_mask.sum(-1).tolist()  # BREAK must-not: the caller un-pads with these Python ints, and they are returned
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids, "seq_lens": seq_lens}


def build_decoder_inputs():
    ids = torch.tensor([[0, 0, 5, 8, 9, 3], [4, 7, 7, 2, 6, 1], [0, 0, 0, 0, 11, 12]])
    return prepare_decoder_inputs, (ids, 0)
