"""Transformer blocks written the way the HF modeling files write them."""

from __future__ import annotations

import functools
import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from . import helpers
from .helpers import masked_mean

logger = logging.getLogger(__name__)


@functools.lru_cache(None)
def _warning_once(self: logging.Logger, *args, **kwargs) -> None:
    self.warning(*args, **kwargs)


logging.Logger.warning_once = _warning_once  # type: ignore[attr-defined]


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim: int, max_position_embeddings: int = 64, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len: int) -> None:
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)
    sin = sin[position_ids].unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class LlamaAttention(nn.Module):
    def __init__(self, hidden_size: int = 32, num_heads: int = 4):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim, max_position_embeddings=8)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, output_attentions=False):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        if position_ids is None:
            position_ids = torch.arange(q_len, device=hidden_states.device)[None].expand(bsz, -1)
        cos, sin = self.rotary_emb(v, seq_len=q_len)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)

        attn_weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal = torch.full((q_len, q_len), torch.finfo(attn_weights.dtype).min).triu(1)
        attn_weights = attn_weights + causal
        if attention_mask is not None:
            if (attention_mask == 0).any():  # BREAK: data-dependent test around a mask that is a no-op without padding
                padding = (1.0 - attention_mask[:, None, None, :].to(attn_weights.dtype)) * torch.finfo(attn_weights.dtype).min
                attn_weights = attn_weights + padding
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        attn_output = torch.matmul(attn_weights, v)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, -1)
        if output_attentions:
            logger.warning_once("output_attentions=True is not supported by the sdpa path, falling back to eager")  # BREAK: warning_once under compile
        return self.o_proj(attn_output), attn_weights if output_attentions else None


class LlamaDecoderStack(nn.Module):
    def __init__(self, vocab_size: int = 50, hidden_size: int = 32, num_layers: int = 2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList([LlamaAttention(hidden_size) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, input_ids, attention_mask=None, output_attentions=False):
        if attention_mask is not None:
            helpers.warn_if_padded_right(attention_mask)
        hidden = self.embed_tokens(input_ids)
        all_attn = ()
        for layer in self.layers:
            out, attn = layer(hidden, attention_mask=attention_mask, output_attentions=output_attentions)
            hidden = hidden + out
            all_attn = all_attn + (attn,)
        return self.norm(hidden), all_attn


def build_llama_attention():
    torch.manual_seed(0)
    model = LlamaDecoderStack().eval()
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 50, (2, 6), generator=g)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    return model, {"input_ids": input_ids, "attention_mask": attention_mask, "output_attentions": True}


class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size: int = 40, hidden_size: int = 24, max_position_embeddings: int = 16):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_position_embeddings).expand((1, -1)), persistent=False)

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(position_ids))


class SentenceEncoder(nn.Module):
    """sentence-transformers style: BERT-ish encoder + mean pooling over real tokens."""

    def __init__(self, hidden_size: int = 24):
        super().__init__()
        self.embeddings = BertEmbeddings(hidden_size=hidden_size)
        layer = nn.TransformerEncoderLayer(hidden_size, nhead=4, dim_feedforward=48, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.pooling_mode = "mean"

    def forward(self, input_ids, attention_mask):
        hidden = self.embeddings(input_ids)
        hidden = self.encoder(hidden, src_key_padding_mask=attention_mask == 0)
        if self.pooling_mode == "mean":
            pooled = masked_mean(hidden, attention_mask)
        else:
            seq_lengths = attention_mask.sum(-1).tolist()
            pooled = torch.stack([hidden[i, n - 1] for i, n in enumerate(seq_lengths)])
        lengths = attention_mask.sum(-1).tolist()  # BREAK: lengths to Python ints only to average the real tokens again
        first_last = torch.stack([hidden[i, [0, n - 1]].mean(0) for i, n in enumerate(lengths)])
        helpers.log_tensor_stats("pooled", pooled)
        embeddings = torch.cat([pooled, first_last], dim=-1)
        return F.normalize(embeddings, p=2, dim=1)


def build_sentence_encoder():
    torch.manual_seed(0)
    model = SentenceEncoder().eval()
    g = torch.Generator().manual_seed(2)
    input_ids = torch.randint(1, 40, (3, 7), generator=g)
    attention_mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    input_ids = input_ids * attention_mask
    return model, (input_ids, attention_mask)


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, hidden_dim: int = 16, ffn_dim: int = 32, num_experts: int = 4, top_k: int = 2):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.gate = nn.Linear(hidden_dim, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden_dim, ffn_dim, bias=False), nn.SiLU(), nn.Linear(ffn_dim, hidden_dim, bias=False))
            for _ in range(num_experts)
        )

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros_like(hidden_states)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        tokens_per_expert = expert_mask.sum(dim=(1, 2))
        logger.debug("tokens per expert: %s", tokens_per_expert.tolist())  # BREAK: expert load logged (tolist + logger)
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])  # BREAK: token gather per expert (a dense, masked rewrite keeps the sum)
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


def build_mixtral_moe():
    torch.manual_seed(0)
    model = MixtralSparseMoeBlock()
    g = torch.Generator().manual_seed(3)
    return model, torch.randn(2, 5, 16, generator=g)


class TinyGPT(nn.Module):
    def __init__(self, vocab_size: int = 12, n_embd: int = 16, block_size: int = 32):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.mlp(x)
        return self.lm_head(self.ln_f(x))


class GreedyGenerator(nn.Module):
    """``model.generate(..., do_sample=False)`` with an EOS stop, trimmed to what we use."""

    def __init__(self, eos_token_id: int = 3, pad_token_id: int = 0, max_new_tokens: int = 8):
        super().__init__()
        self.model = TinyGPT()
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.max_new_tokens = max_new_tokens

    def forward(self, input_ids):
        unfinished_sequences = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        for _ in range(self.max_new_tokens):
            logits = self.model(input_ids)
            next_tokens = torch.argmax(logits[:, -1, :], dim=-1)
            next_tokens = next_tokens * unfinished_sequences + self.pad_token_id * (1 - unfinished_sequences)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            unfinished_sequences = unfinished_sequences & (next_tokens != self.eos_token_id)
            if unfinished_sequences.max() == 0:  # BREAK must-not: stopping when every sequence hit EOS decides the returned length
                break
        return input_ids


def build_greedy_generate():
    torch.manual_seed(5)
    model = GreedyGenerator().eval()
    g = torch.Generator().manual_seed(4)
    return model, torch.randint(4, 12, (2, 3), generator=g)


class BeamSearcher(nn.Module):
    """A small beam search with hypotheses kept in Python lists, as BeamHypotheses does."""

    def __init__(self, num_beams: int = 3, max_length: int = 6, length_penalty: float = 1.0):
        super().__init__()
        self.model = TinyGPT()
        self.num_beams = num_beams
        self.max_length = max_length
        self.length_penalty = length_penalty

    def forward(self, input_ids):
        beams = [(input_ids[0].tolist(), 0.0)]  # BREAK must-not: the hypotheses are Python lists of token ids, returned
        for _ in range(self.max_length):
            candidates = []
            for tokens, score in beams:
                logits = self.model(torch.tensor([tokens]))
                log_probs = F.log_softmax(logits[0, -1], dim=-1)
                top_lp, top_ids = log_probs.topk(self.num_beams)
                for lp, tok in zip(top_lp.tolist(), top_ids.tolist(), strict=True):  # BREAK must-not: candidate scores and ids go into the returned Python hypotheses
                    candidates.append((tokens + [tok], score + lp))
            candidates.sort(key=lambda c: c[1] / len(c[0]) ** self.length_penalty, reverse=True)
            beams = candidates[: self.num_beams]
        best_tokens, best_score = beams[0]
        return best_tokens, best_score


def build_beam_search():
    torch.manual_seed(6)
    model = BeamSearcher().eval()
    return model, torch.tensor([[5, 7]])
