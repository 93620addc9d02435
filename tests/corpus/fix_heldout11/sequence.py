"""Sequence models: Mamba's reference selective scan over packed variable-length sequences, Longformer's
global attention, ELECTRA's replaced-token-detection step, and the attention seq2seq of pytorch-seq2seq
with its teacher-forcing coin."""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ Mamba (state-spaces/mamba, selective_scan_ref)


def selective_scan_ref(u, delta, A, B, C, D, delta_bias=None, delta_softplus=True):
    """u, delta: (b, d, l); A: (d, n); B, C: (b, n, l); D: (d,)."""
    dtype_in = u.dtype
    u = u.float()
    delta = delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
    x = A.new_zeros((batch, dim, dstate))
    ys = []
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    for i in range(u.shape[2]):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        y = torch.einsum("bdn,bn->bd", x, C[:, :, i])
        ys.append(y)
    y = torch.stack(ys, dim=2)
    out = y + u * D[:, None]
    return out.to(dtype_in)


class MambaMixer(nn.Module):
    def __init__(self, d_model=16, d_state=4, expand=2):
        super().__init__()
        self.d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.d_state = d_state
        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=False)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + d_state * 2, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True)
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, hidden_states):
        xz = self.in_proj(hidden_states).transpose(1, 2)
        x, z = xz.chunk(2, dim=1)
        x = F.silu(x)
        x_dbl = self.x_proj(x.transpose(1, 2))
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = self.dt_proj.weight @ dt.transpose(1, 2)
        A = -torch.exp(self.A_log.float())
        y = selective_scan_ref(x, dt, A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(),
                               delta_bias=self.dt_proj.bias.float())
        y = y * F.silu(z)
        return self.out_proj(y.transpose(1, 2))


class MambaVarlen(nn.Module):
    """Sequences packed into one row (no padding) as in packed SFT; ``cu_seqlens`` marks their bounds."""

    def __init__(self, vocab=32, d_model=16):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.mixer = MambaMixer(d_model)
        self.norm_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids, cu_seqlens):
        hidden_states = self.embedding(input_ids)
        outs = []
        # every sequence starts from a zero SSM state: scan the packed row one sequence at a time
        for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist(), strict=True):  # BREAK: reset the scan state at sequence starts with a mask built from cu_seqlens
            outs.append(self.mixer(hidden_states[:, start:end]))
        hidden_states = hidden_states + torch.cat(outs, dim=1)
        return self.lm_head(self.norm_f(hidden_states))


def build_mamba_varlen():
    seeded(0)
    model = MambaVarlen()
    input_ids = torch.randint(0, 32, (1, 14))
    cu_seqlens = torch.tensor([0, 5, 9, 14])
    return model, (input_ids, cu_seqlens)


# ------------------------------------------------------------------ Longformer (HF LongformerSelfAttention, dense form)


class LongformerSelfAttention(nn.Module):
    def __init__(self, hidden=16, heads=2, window=2):
        super().__init__()
        self.num_heads, self.head_dim, self.one_sided_attn_window_size = heads, hidden // heads, window
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.query_global = nn.Linear(hidden, hidden)
        self.key_global = nn.Linear(hidden, hidden)
        self.value_global = nn.Linear(hidden, hidden)

    def _split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def _get_global_attn_indices(is_index_global_attn):
        num_global_attn_indices = is_index_global_attn.long().sum(dim=1)
        max_num_global_attn_indices = num_global_attn_indices.max()
        is_index_global_attn_nonzero = is_index_global_attn.nonzero(as_tuple=True)  # BREAK: keep the global tokens as a (batch, seq) mask instead of their indices
        is_local_index_global_attn = torch.arange(
            max_num_global_attn_indices, device=is_index_global_attn.device
        ) < num_global_attn_indices.unsqueeze(dim=-1)
        return max_num_global_attn_indices, is_index_global_attn_nonzero, is_local_index_global_attn

    def forward(self, hidden_states, attention_mask):
        # attention_mask: 0 padding, 1 local attention, 2 global attention
        is_index_masked = attention_mask == 0
        is_index_global_attn = attention_mask > 1
        is_global_attn = is_index_global_attn.flatten().any().item()  # BREAK: compute the global rows always and select them with torch.where
        b, t, _ = hidden_states.shape
        q = self._split(self.query(hidden_states)) / math.sqrt(self.head_dim)
        k = self._split(self.key(hidden_states))
        v = self._split(self.value(hidden_states))
        pos = torch.arange(t)
        band = (pos[None, :] - pos[:, None]).abs() <= self.one_sided_attn_window_size
        allowed = band[None, None] & ~is_index_masked[:, None, None, :]
        if is_global_attn:
            _, (batch_idx, token_idx), _ = self._get_global_attn_indices(is_index_global_attn)
            key_is_global = torch.zeros_like(is_index_global_attn)
            key_is_global[batch_idx, token_idx] = True
            allowed = allowed | key_is_global[:, None, None, :]
        scores = (q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        if is_global_attn:
            # global tokens attend to every (unmasked) token with their own projections
            qg = self._split(self.query_global(hidden_states)) / math.sqrt(self.head_dim)
            kg = self._split(self.key_global(hidden_states))
            vg = self._split(self.value_global(hidden_states))
            g_scores = (qg @ kg.transpose(-1, -2)).masked_fill(is_index_masked[:, None, None, :], float("-inf"))
            g_out = (g_scores.softmax(-1) @ vg).transpose(1, 2).reshape(b, t, -1)
            out[batch_idx, token_idx] = g_out[batch_idx, token_idx]
        return out.masked_fill(is_index_masked[..., None], 0.0)


def build_longformer_global():
    seeded(1)
    model = LongformerSelfAttention()
    hidden = torch.randn(2, 8, 16)
    attention_mask = torch.tensor([[2, 1, 1, 1, 1, 2, 1, 1], [2, 1, 1, 1, 1, 1, 0, 0]])
    return model, (hidden, attention_mask)


# ------------------------------------------------------------------ ELECTRA (lucidrains/electra-pytorch)


def log(t, eps=1e-9):
    return torch.log(t + eps)


def gumbel_noise(t):
    noise = torch.zeros_like(t).uniform_(0, 1)
    return -log(-log(noise))


def gumbel_sample(t, temperature=1.0):
    return ((t / temperature) + gumbel_noise(t)).argmax(dim=-1)


def prob_mask_like(t, prob):
    return torch.zeros_like(t).float().uniform_(0, 1) < prob


class TinyEncoder(nn.Module):
    def __init__(self, vocab=40, dim=16, out=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, out or vocab)

    def forward(self, x):
        return self.head(self.layer(self.emb(x)))


class Electra(nn.Module):
    def __init__(self, vocab=40, mask_token_id=2, pad_token_id=0, mask_prob=0.25, disc_weight=50.0):
        super().__init__()
        self.generator = TinyEncoder(vocab)
        self.discriminator = TinyEncoder(vocab, out=1)
        self.mask_token_id, self.pad_token_id = mask_token_id, pad_token_id
        self.mask_prob, self.disc_weight, self.temperature = mask_prob, disc_weight, 1.0

    def forward(self, input):
        no_mask = input == self.pad_token_id
        mask = prob_mask_like(input, self.mask_prob) & ~no_mask
        mask_indices = torch.nonzero(mask, as_tuple=True)  # BREAK must-not: the gumbel noise is drawn for the masked tokens only, so their count sets which random numbers each gets
        masked_input = input.masked_fill(mask, self.mask_token_id)
        gen_labels = input.masked_fill(~mask, self.pad_token_id)
        logits = self.generator(masked_input)
        mlm_loss = F.cross_entropy(logits.transpose(1, 2), gen_labels, ignore_index=self.pad_token_id)
        sample_logits = logits[mask_indices]
        sampled = gumbel_sample(sample_logits, temperature=self.temperature)
        disc_input = input.clone()
        disc_input[mask_indices] = sampled.detach()
        disc_labels = (input != disc_input).float().detach()
        disc_logits = self.discriminator(disc_input).squeeze(-1)
        non_padded_indices = torch.nonzero(input != self.pad_token_id, as_tuple=True)  # BREAK: a BCE weighted by the non-pad mask, divided by its count
        disc_loss = F.binary_cross_entropy_with_logits(disc_logits[non_padded_indices], disc_labels[non_padded_indices])
        with torch.no_grad():
            gen_predictions = torch.argmax(logits, dim=-1)
            disc_predictions = torch.round((torch.sign(disc_logits) + 1.0) * 0.5)
            gen_acc = (gen_labels[mask] == gen_predictions[mask]).float().mean()  # BREAK: masked mean of the hits
            disc_acc = 0.5 * (disc_labels[mask] == disc_predictions[mask]).float().mean() + 0.5 * (disc_labels[~mask] == disc_predictions[~mask]).float().mean()  # BREAK: masked means of the hits
        loss = mlm_loss + self.disc_weight * disc_loss
        return loss, mlm_loss, disc_loss, gen_acc, disc_acc


def build_electra_pretrain():
    seeded(2)
    model = Electra()
    input = torch.randint(3, 40, (2, 10))
    input[1, 7:] = 0
    return model, (input,)


# ------------------------------------------------------------------ bentrevett/pytorch-seq2seq (3 - attention)


class Encoder(nn.Module):
    def __init__(self, input_dim=20, emb_dim=8, enc_hid_dim=12, dec_hid_dim=12):
        super().__init__()
        self.embedding = nn.Embedding(input_dim, emb_dim)
        self.rnn_fwd = nn.GRUCell(emb_dim, enc_hid_dim)
        self.rnn_bwd = nn.GRUCell(emb_dim, enc_hid_dim)
        self.fc = nn.Linear(enc_hid_dim * 2, dec_hid_dim)

    def forward(self, src):
        embedded = self.embedding(src)
        h_f = h_b = embedded.new_zeros(src.shape[1], self.rnn_fwd.hidden_size)
        fwd, bwd = [], []
        for t in range(src.shape[0]):
            h_f = self.rnn_fwd(embedded[t], h_f)
            h_b = self.rnn_bwd(embedded[src.shape[0] - 1 - t], h_b)
            fwd.append(h_f)
            bwd.insert(0, h_b)
        outputs = torch.cat((torch.stack(fwd), torch.stack(bwd)), dim=2)
        hidden = torch.tanh(self.fc(torch.cat((h_f, h_b), dim=1)))
        return outputs, hidden


class Attention(nn.Module):
    def __init__(self, enc_hid_dim=12, dec_hid_dim=12):
        super().__init__()
        self.attn = nn.Linear((enc_hid_dim * 2) + dec_hid_dim, dec_hid_dim)
        self.v = nn.Linear(dec_hid_dim, 1, bias=False)

    def forward(self, hidden, encoder_outputs):
        src_len = encoder_outputs.shape[0]
        hidden = hidden.unsqueeze(1).repeat(1, src_len, 1)
        encoder_outputs = encoder_outputs.permute(1, 0, 2)
        energy = torch.tanh(self.attn(torch.cat((hidden, encoder_outputs), dim=2)))
        attention = self.v(energy).squeeze(2)
        return F.softmax(attention, dim=1)


class Decoder(nn.Module):
    def __init__(self, output_dim=20, emb_dim=8, enc_hid_dim=12, dec_hid_dim=12):
        super().__init__()
        self.output_dim = output_dim
        self.attention = Attention(enc_hid_dim, dec_hid_dim)
        self.embedding = nn.Embedding(output_dim, emb_dim)
        self.rnn = nn.GRUCell((enc_hid_dim * 2) + emb_dim, dec_hid_dim)
        self.fc_out = nn.Linear((enc_hid_dim * 2) + dec_hid_dim + emb_dim, output_dim)

    def forward(self, input, hidden, encoder_outputs):
        input = input.unsqueeze(0)
        embedded = self.embedding(input)
        a = self.attention(hidden, encoder_outputs).unsqueeze(1)
        weighted = torch.bmm(a, encoder_outputs.permute(1, 0, 2)).permute(1, 0, 2)
        hidden = self.rnn(torch.cat((embedded, weighted), dim=2).squeeze(0), hidden)
        prediction = self.fc_out(torch.cat((hidden, weighted.squeeze(0), embedded.squeeze(0)), dim=1))
        return prediction, hidden


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def forward(self, src, trg, teacher_forcing_ratio=0.5):
        trg_len, batch_size = trg.shape
        outputs = torch.zeros(trg_len, batch_size, self.decoder.output_dim)
        encoder_outputs, hidden = self.encoder(src)
        input = trg[0, :]
        for t in range(1, trg_len):
            output, hidden = self.decoder(input, hidden, encoder_outputs)
            outputs[t] = output
            teacher_force = random.random() < teacher_forcing_ratio  # BREAK must-not: the coin comes from Python's random stream, which the run must keep drawing from
            top1 = output.argmax(1)
            input = trg[t] if teacher_force else top1
        output_dim = outputs.shape[-1]
        loss = F.cross_entropy(outputs[1:].view(-1, output_dim), trg[1:].reshape(-1), ignore_index=0)
        return loss, outputs


def build_seq2seq_attention():
    seeded(3)
    model = Seq2Seq()
    src = torch.randint(1, 20, (7, 3))
    trg = torch.randint(1, 20, (6, 3))
    return model, (src, trg)
