"""Language models: GPT-2-era top-k / nucleus sampling (the ``top_k_top_p_filtering`` gist) on a small GRU LM,
packed-document attention with a per-document SDPA fallback for ``flash_attn_varlen_func``, PABEE
patience-based early exit, and mixture-of-depths routing at inference."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- top-k / top-p sampling


def top_k_top_p_filtering(logits, top_k=0, top_p=0.0, filter_value=-float("Inf")):
    """Filter a distribution of logits using top-k and/or nucleus (top-p) filtering
    Args:
        logits: logits distribution shape (vocabulary size)
        top_k >0: keep only top k tokens with highest probability (top-k filtering).
        top_p >0.0: keep the top tokens with cumulative probability >= top_p (nucleus filtering).
            Nucleus filtering is described in Holtzman et al. (http://arxiv.org/abs/1904.09751)
    """
    assert (
        logits.dim() == 1
    )  # batch size 1 for now - could be updated for more but the code would be less clear
    top_k = min(top_k, logits.size(-1))  # Safety check
    if top_k > 0:
        # Remove all tokens with a probability less than the last token of the top-k
        indices_to_remove = logits < torch.topk(logits, top_k)[0][..., -1, None]
        logits[indices_to_remove] = filter_value

    if top_p > 0.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative_probs = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)

        # Remove tokens with cumulative probability above the threshold
        sorted_indices_to_remove = cumulative_probs > top_p
        # Shift the indices to the right to keep also the first token above the threshold
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = 0

        indices_to_remove = sorted_indices[sorted_indices_to_remove]  # BREAK: scatter the mask back to vocab
        logits[indices_to_remove] = filter_value
    return logits


class GRULanguageModel(nn.Module):
    def __init__(self, vocab: int = 50, dim: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, past: torch.Tensor | None = None):
        h = (
            past
            if past is not None
            else input_ids.new_zeros(input_ids.size(0), self.cell.hidden_size, dtype=torch.float)
        )
        outs = []
        for t in range(input_ids.size(1)):
            h = self.cell(self.wte(input_ids[:, t]), h)
            outs.append(h)
        return self.lm_head(self.ln_f(torch.stack(outs, 1))), h


def sample_sequence(model, length, context, temperature=1.0, top_k=0, top_p=0.0):
    context = context.unsqueeze(0)
    generated = context
    past = None
    with torch.no_grad():
        for _ in range(length):
            inputs = generated if past is None else generated[:, -1:]
            logits, past = model(inputs, past)
            next_token_logits = logits[0, -1, :] / temperature
            filtered_logits = top_k_top_p_filtering(next_token_logits, top_k=top_k, top_p=top_p)
            next_token = torch.multinomial(F.softmax(filtered_logits, dim=-1), num_samples=1)
            generated = torch.cat((generated, next_token.unsqueeze(0)), dim=1)
    return generated


def build_top_p_sampling():
    torch.manual_seed(840)
    model = GRULanguageModel().eval()
    context = torch.randint(0, 50, (5,), generator=seeded(841))
    return sample_sequence, (model, 8, context, 0.9, 20, 0.8)


# --------------------------------------------------------------------------- packed documents, varlen attention


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, max_position_embeddings: int = 16, base: int = 10000) -> None:
        super().__init__()
        self.dim = dim
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(seq_len=max_position_embeddings, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len: int, dtype: torch.dtype) -> None:
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, x: torch.Tensor, seq_len: int):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len=seq_len, dtype=x.dtype)
        return (
            self.cos_cached[:seq_len].to(dtype=x.dtype),
            self.sin_cached[:seq_len].to(dtype=x.dtype),
        )


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids, unsqueeze_dim=2):
    cos = cos[position_ids].unsqueeze(unsqueeze_dim)
    sin = sin[position_ids].unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def prepare_varlen_from_position_ids(position_ids: torch.Tensor):
    """cu_seqlens and the longest document of a batch of packed rows (each document restarts at position 0)."""
    position_ids = position_ids.flatten()
    indices_q = torch.arange(position_ids.size(0), device=position_ids.device, dtype=torch.int32)
    cu_seq_lens = torch.cat(
        (
            indices_q[position_ids == 0],  # BREAK: document ids from (position_ids == 0).cumsum(-1)
            torch.tensor(position_ids.size(), device=position_ids.device, dtype=torch.int32),
        )
    )
    max_length = int(position_ids.max()) + 1  # BREAK: size the rotary table by the row length
    return cu_seq_lens, max_length


def varlen_sdpa(q, k, v, cu_seqlens, causal=True):
    """Reference path for flash_attn_varlen_func (no flash-attn installed): one SDPA per document."""
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()  # BREAK: one SDPA with a same-document causal mask
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        qi, ki, vi = (t[start:end].transpose(0, 1) for t in (q, k, v))
        oi = F.scaled_dot_product_attention(qi, ki, vi, is_causal=causal)
        out[start:end] = oi.transpose(0, 1)
    return out


class PackedAttention(nn.Module):
    def __init__(self, hidden_size: int = 32, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.rotary_emb = RotaryEmbedding(self.head_dim)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim)

        cu_seqlens, max_seqlen = prepare_varlen_from_position_ids(position_ids)
        cos, sin = self.rotary_emb(v, seq_len=max_seqlen)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)

        attn = varlen_sdpa(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_seqlens)
        return self.o_proj(attn.reshape(bsz, q_len, -1))


class PackedDecoderLayer(nn.Module):
    def __init__(self, hidden_size: int = 32, vocab: int = 64) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden_size)
        self.input_layernorm = RMSNorm(hidden_size)
        self.self_attn = PackedAttention(hidden_size)
        self.post_attention_layernorm = RMSNorm(hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 64), nn.SiLU(), nn.Linear(64, hidden_size))
        self.lm_head = nn.Linear(hidden_size, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, labels: torch.Tensor):
        h = self.embed_tokens(input_ids)
        h = h + self.self_attn(self.input_layernorm(h), position_ids)
        h = h + self.mlp(self.post_attention_layernorm(h))
        logits = self.lm_head(h)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return loss, logits


def build_packed_docs():
    torch.manual_seed(850)
    model = PackedDecoderLayer()
    g = seeded(851)
    doc_lens = [[5, 7, 4], [9, 7]]
    position_ids = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in doc_lens])
    input_ids = torch.randint(0, 64, (2, 16), generator=g)
    labels = input_ids.masked_fill(position_ids == 0, -100)  # no target across a document boundary
    return model, (input_ids, position_ids, labels)


# --------------------------------------------------------------------------- PABEE: patience-based early exit


class BertLiteLayer(nn.Module):
    def __init__(self, hidden: int, heads: int = 2) -> None:
        super().__init__()
        self.attn = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))
        self.ln2 = nn.LayerNorm(hidden)
        self.heads = heads

    def forward(self, x: torch.Tensor, extended_attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.attn(x).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.heads) + extended_attention_mask
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, D)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ffn(x))


class BertForSequenceClassificationWithPabee(nn.Module):
    def __init__(
        self, vocab: int = 40, hidden: int = 32, num_layers: int = 6, num_labels: int = 3, patience: int = 2
    ) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.layer = nn.ModuleList([BertLiteLayer(hidden) for _ in range(num_layers)])
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifiers = nn.ModuleList([nn.Linear(hidden, num_labels) for _ in range(num_layers)])
        self.patience = patience
        self.inference_instances_num = 0
        self.inference_layers_num = 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        encoder_outputs = self.embeddings(input_ids)

        if self.training:
            res = []
            for i in range(len(self.layer)):
                encoder_outputs = self.layer[i](encoder_outputs, extended_attention_mask)
                pooled_output = self.pooler(encoder_outputs[:, 0])
                res.append(self.classifiers[i](pooled_output))
            return res

        patient_counter = 0
        patient_result = None
        calculated_layer_num = 0
        for i in range(len(self.layer)):
            calculated_layer_num += 1
            encoder_outputs = self.layer[i](encoder_outputs, extended_attention_mask)
            pooled_output = self.pooler(encoder_outputs[:, 0])
            logits = self.classifiers[i](pooled_output)
            labels = logits.detach().argmax(dim=1)
            if patient_result is not None:
                patient_labels = patient_result.detach().argmax(dim=1)
            if (patient_result is not None) and torch.all(labels.eq(patient_labels)):  # BREAK: run all, where
                patient_counter += 1
            else:
                patient_counter = 0

            patient_result = logits
            if patient_counter == self.patience:
                break
        self.inference_layers_num += calculated_layer_num
        self.inference_instances_num += 1
        return [patient_result]


def predict_with_early_exit(model, input_ids, attention_mask):
    with torch.no_grad():
        logits = model(input_ids, attention_mask)[0]
    return logits.softmax(-1)


def build_pabee_exit():
    torch.manual_seed(860)
    model = BertForSequenceClassificationWithPabee().eval()
    with torch.no_grad():  # internal classifiers that mostly agree, as after PABEE's joint training
        for classifier in model.classifiers[1:]:
            classifier.weight.copy_(model.classifiers[0].weight + 0.02 * torch.randn_like(classifier.weight))
            classifier.bias.copy_(model.classifiers[0].bias)
    g = seeded(861)
    input_ids = torch.randint(0, 40, (4, 10), generator=g)
    attention_mask = (torch.arange(10)[None, :] < torch.tensor([10, 8, 9, 6])[:, None]).long()
    return predict_with_early_exit, (model, input_ids, attention_mask)


# --------------------------------------------------------------------------- mixture-of-depths routing


class MLPBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


class MixtureOfDepthsBlock(nn.Module):
    """Routes a capacity fraction of the tokens through the block (top-k in training); at inference a small
    causal predictor decides token by token whether it would have been in the top-k."""

    def __init__(self, dim: int, capacity: float = 0.5) -> None:
        super().__init__()
        self.capacity = capacity
        self.router = nn.Linear(dim, 1)
        self.predictor = nn.Sequential(nn.Linear(dim, dim // 2), nn.SiLU(), nn.Linear(dim // 2, 1))
        self.block = MLPBlock(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        router_logits = self.router(x).squeeze(-1)  # (B, T)
        if self.training:
            k = max(1, int(self.capacity * T))
            weights, idx = torch.topk(router_logits, k, dim=1, sorted=False)
            idx, order = torch.sort(idx, dim=1)  # keep causal order
            weights = torch.gather(weights, 1, order)
            gather_idx = idx.unsqueeze(-1).expand(-1, -1, D)
            selected = torch.gather(x, 1, gather_idx)
            processed = selected + torch.sigmoid(weights).unsqueeze(-1) * self.block(selected)
            return torch.scatter(x, 1, gather_idx, processed)

        selected_mask = torch.sigmoid(self.predictor(x.detach())).squeeze(-1) > 0.5
        if not selected_mask.any():  # BREAK: drop it: the masked update is a no-op then
            return x
        tokens = x[selected_mask]  # BREAK: block on all tokens, torch.where on the mask
        weights = router_logits[selected_mask]  # BREAK: same rewrite (router weight of every token)
        out = x.clone()
        out[selected_mask] = tokens + torch.sigmoid(weights).unsqueeze(-1) * self.block(tokens)
        return out


class MoDLanguageModel(nn.Module):
    def __init__(self, vocab: int = 48, dim: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([MixtureOfDepthsBlock(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build_mod_routing():
    torch.manual_seed(875)
    model = MoDLanguageModel().eval()
    input_ids = torch.randint(0, 48, (2, 12), generator=seeded(871))
    return model, (input_ids,)
