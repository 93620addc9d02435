"""NLP: a Hugging Face-style encoder forward with its padding warning and SDPA mask shortcut, an
extractive-QA span decoder (SQuAD post-processing run inside the model), and the old
``enforce_repetition_penalty_`` logits processor in a greedy decoding step."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import lengths_to_mask, seeded

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- HF-style encoder


@dataclass
class TinyBertConfig:
    vocab_size: int = 50
    hidden_size: int = 16
    num_attention_heads: int = 2
    intermediate_size: int = 32
    max_position_embeddings: int = 16
    pad_token_id: int = 0
    layer_norm_eps: float = 1e-12


class TinyBertSelfAttention(nn.Module):
    def __init__(self, config: TinyBertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = scores.softmax(-1)
        ctx = (probs @ v).permute(0, 2, 1, 3)
        return ctx.reshape(hidden_states.shape)


class TinyBertLayer(nn.Module):
    def __init__(self, config: TinyBertConfig) -> None:
        super().__init__()
        self.attention = TinyBertSelfAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.out_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = self.attn_norm(hidden_states + self.attention(hidden_states, attention_mask))
        return self.out_norm(h + self.output(F.gelu(self.intermediate(h))))


class TinyBertModel(nn.Module):
    def __init__(self, config: TinyBertConfig, num_layers: int = 2) -> None:
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.emb_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(TinyBertLayer(config) for _ in range(num_layers))
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def warn_if_padding_and_no_attention_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
        """Warn once when the batch looks padded but no attention mask was given."""
        if attention_mask is not None:
            return
        if self.config.pad_token_id in input_ids[:, [-1, 0]]:  # BREAK: the check only feeds a warning; skip it while compiling (torch.compiler.is_compiling()), as transformers does
            logger.warning(
                "We strongly recommend passing in an `attention_mask` since your input_ids may be padded."
            )

    def get_extended_attention_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        if (attention_mask == 1).all():  # BREAK: always build the additive mask: an all-ones mask adds zeros, the same scores
            return None  # lets the attention take its unmasked fast path
        ext = attention_mask[:, None, None, :].to(dtype)
        return (1.0 - ext) * torch.finfo(dtype).min

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        positions = torch.arange(input_ids.shape[1])[None, :]
        h = self.emb_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        ext = self.get_extended_attention_mask(attention_mask, h.dtype)
        for layer in self.layers:
            h = layer(h, ext)
        return {"last_hidden_state": h, "pooler_output": torch.tanh(self.pooler(h[:, 0]))}


def build_hf_encoder() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(90)
    model = TinyBertModel(TinyBertConfig())
    input_ids = torch.randint(1, 50, (3, 10), generator=seeded(91))
    input_ids[1, 7:] = 0  # a padded row, but the caller forgot the mask
    return model, {"input_ids": input_ids}


# --------------------------------------------------------------------------- extractive QA span decoding


class SpanQAModel(nn.Module):
    """Start/end logits over the context, then SQuAD-style best-span search among the n-best starts/ends."""

    def __init__(self, vocab: int = 40, d: int = 16, n_best: int = 5, max_answer_len: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.enc = nn.Linear(d, d)
        self.mix = nn.Conv1d(d, d, 3, padding=1)
        self.qa_outputs = nn.Linear(d, 2)
        self.n_best = n_best
        self.max_answer_len = max_answer_len

    def forward(self, input_ids: torch.Tensor, context_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.enc(self.emb(input_ids)))
        h = h + self.mix(h.transpose(1, 2)).transpose(1, 2)
        start, end = self.qa_outputs(h).unbind(-1)
        mask = lengths_to_mask(context_lengths)
        start = start.masked_fill(~mask, -1e4)
        end = end.masked_fill(~mask, -1e4)
        b, t = start.shape
        start_l, end_l = start.tolist(), end.tolist()  # BREAK: score every (start, end) pair as a tensor, mask out pairs outside the n-best / length band, argmax
        spans, scores = [], []
        for i in range(b):
            s_top = sorted(range(t), key=lambda j: -start_l[i][j])[: self.n_best]
            e_top = sorted(range(t), key=lambda j: -end_l[i][j])[: self.n_best]
            best, best_score = (0, 0), -math.inf
            for s in s_top:
                for e in e_top:
                    if e < s or e - s + 1 > self.max_answer_len:
                        continue
                    if start_l[i][s] + end_l[i][e] > best_score:
                        best, best_score = (s, e), start_l[i][s] + end_l[i][e]
            spans.append(best)
            scores.append(start[i, best[0]] + end[i, best[1]])
        return torch.tensor(spans), torch.stack(scores)


def build_qa_span() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(92)
    model = SpanQAModel()
    g = seeded(93)
    input_ids = torch.randint(1, 40, (3, 14), generator=g)
    lengths = torch.tensor([14, 9, 11])  # the collator pads to the longest context
    for i, n in enumerate(lengths.tolist()):
        input_ids[i, n:] = 0
    return model, (input_ids, lengths)


# --------------------------------------------------------------------------- repetition penalty


def enforce_repetition_penalty_(lprobs: torch.Tensor, batch_size: int, num_beams: int,
                                prev_output_tokens: torch.Tensor, repetition_penalty: float) -> None:
    """CTRL's repetition penalty (https://arxiv.org/abs/1909.05858), applied in place."""
    for i in range(batch_size * num_beams):
        for previous_token in set(prev_output_tokens[i].tolist()):  # BREAK: mark the seen tokens with a scatter into a bool mask and apply the penalty with torch.where, in place via copy_
            if lprobs[i, previous_token] < 0:
                lprobs[i, previous_token] *= repetition_penalty
            else:
                lprobs[i, previous_token] /= repetition_penalty


class TinyDecoderStep(nn.Module):
    """One greedy decoding step of a small LM: next-token logits from the prefix, penalised for repeats."""

    def __init__(self, vocab: int = 24, d: int = 16, penalty: float = 1.3) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rnn = nn.GRUCell(d, d)
        self.lm_head = nn.Linear(d, vocab)
        self.penalty = penalty

    def forward(self, prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = prefix.shape
        h = prefix.new_zeros(b, self.rnn.hidden_size, dtype=torch.float32)
        for j in range(t):
            h = self.rnn(self.emb(prefix[:, j]), h)
        logits = self.lm_head(h)
        enforce_repetition_penalty_(logits, b, 1, prefix, self.penalty)
        return logits, logits.argmax(-1)


def build_rep_penalty() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(94)
    model = TinyDecoderStep()
    prefix = torch.randint(0, 24, (3, 6), generator=seeded(95))
    prefix[0, 4] = prefix[0, 1]  # repeated tokens in a prefix
    return model, prefix
