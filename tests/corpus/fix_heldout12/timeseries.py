"""Long-sequence forecasting: Informer's ProbSparse self-attention (zhouhaoyi/Informer2020, ``models/attn.py``)
and Autoformer's auto-correlation with its top-k time-delay aggregation (thuml/Autoformer,
``layers/AutoCorrelation.py``), each inside a small encoder-decoder forecaster trained on MSE."""

from __future__ import annotations

import math
from math import sqrt

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ shared embedding (both repos' embed.py)


class TokenEmbedding(nn.Module):
    def __init__(self, c_in: int, d_model: int) -> None:
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.tokenConv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x):
        return self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)


class PositionalEmbedding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512) -> None:
        super().__init__()
        pe = torch.zeros(max_len, d_model).float()
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.pe[:, : x.size(1)]


class DataEmbedding(nn.Module):
    def __init__(self, c_in: int, d_model: int, with_position: bool = True) -> None:
        super().__init__()
        self.value_embedding = TokenEmbedding(c_in, d_model)
        self.position_embedding = PositionalEmbedding(d_model) if with_position else None

    def forward(self, x):
        x = self.value_embedding(x)
        if self.position_embedding is not None:
            x = x + self.position_embedding(x)
        return x


# ------------------------------------------------------------------ Informer


class ProbMask:
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool, device=device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :].to(device)
        self._mask = indicator.view(scores.shape).to(device)

    @property
    def mask(self):
        return self._mask


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None):
        super().__init__()
        self.factor, self.scale, self.mask_flag = factor, scale, mask_flag

    def _prob_QK(self, Q, K, sample_k, n_top):
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape
        # score every query against a random sample of keys
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = torch.randint(L_K, (L_Q, sample_k))
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        # sparsity measurement: max minus mean, keep the top queries
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]
        Q_K = torch.matmul(Q_reduce, K.transpose(-2, -1))
        return Q_K, M_top

    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            V_sum = V.mean(dim=-2)
            contex = V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        else:
            assert L_Q == L_V
            contex = V.cumsum(dim=-2)
        return contex

    def _update_context(self, context_in, V, scores, index, L_Q):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores.masked_fill_(attn_mask.mask, -np.inf)
        attn = torch.softmax(scores, dim=-1)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = \
            torch.matmul(attn, V).type_as(context_in)
        return context_in

    def forward(self, queries, keys, values):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys, values = queries.transpose(2, 1), keys.transpose(2, 1), values.transpose(2, 1)

        U_part = self.factor * np.ceil(np.log(L_K)).astype("int").item()  # BREAK: math.ceil(math.log(L_K)) on the Python int
        u = self.factor * np.ceil(np.log(L_Q)).astype("int").item()  # BREAK: math.ceil(math.log(L_Q)) on the Python int
        U_part = U_part if U_part < L_K else L_K
        u = u if u < L_Q else L_Q

        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scale = self.scale or 1.0 / sqrt(D)
        scores_top = scores_top * scale
        context = self._get_initial_context(values, L_Q)
        context = self._update_context(context, values, scores_top, index, L_Q)
        return context.transpose(2, 1).contiguous()


class FullAttention(nn.Module):
    def forward(self, queries, keys, values):
        B, L, H, E = queries.shape
        scores = torch.einsum("blhe,bshe->bhls", queries, keys) / sqrt(E)
        return torch.einsum("bhls,bshd->blhd", torch.softmax(scores, dim=-1), values).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, mix=False):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads, self.mix = n_heads, mix

    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        out = self.inner_attention(self.query_projection(queries).view(B, L, H, -1),
                                   self.key_projection(keys).view(B, S, H, -1),
                                   self.value_projection(values).view(B, S, H, -1))
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B, L, -1))


class ConvLayer(nn.Module):
    """Informer's self-attention distilling: halve the length between encoder layers."""

    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.maxPool(self.activation(self.norm(self.downConv(x.permute(0, 2, 1)))))
        return x.transpose(1, 2)


class InformerLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff):
        super().__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.conv1, self.conv2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, cross=None):
        x = self.norm1(x + self.self_attention(x, x, x))
        if cross is not None:
            x = self.norm2(x + self.cross_attention(x, cross, cross))
        y = self.conv2(F.gelu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        return self.norm3(x + y)


class Informer(nn.Module):
    def __init__(self, c_in=3, c_out=3, d_model=16, n_heads=2, d_ff=32, factor=5, pred_len=6):
        super().__init__()
        self.pred_len = pred_len
        self.enc_embedding, self.dec_embedding = DataEmbedding(c_in, d_model), DataEmbedding(c_in, d_model)
        self.encoder = nn.ModuleList([
            InformerLayer(AttentionLayer(ProbAttention(False, factor), d_model, n_heads), None, d_model, d_ff)
            for _ in range(2)
        ])
        self.distil = ConvLayer(d_model)
        self.enc_norm = nn.LayerNorm(d_model)
        self.decoder = InformerLayer(AttentionLayer(ProbAttention(True, factor), d_model, n_heads, mix=True),
                                     AttentionLayer(FullAttention(), d_model, n_heads), d_model, d_ff)
        self.projection = nn.Linear(d_model, c_out)

    def forward(self, x_enc, x_dec, batch_y):
        enc_out = self.enc_embedding(x_enc)
        enc_out = self.distil(self.encoder[0](enc_out))
        enc_out = self.enc_norm(self.encoder[1](enc_out))
        dec_out = self.decoder(self.dec_embedding(x_dec), enc_out)
        pred = self.projection(dec_out)[:, -self.pred_len:, :]
        loss = F.mse_loss(pred, batch_y[:, -self.pred_len:, :])
        return loss, pred


def _series(batch: int, length: int, channels: int) -> torch.Tensor:
    t = torch.arange(length).float()[None, :, None]
    phase = torch.rand(batch, 1, channels) * 6.28
    return torch.sin(0.3 * t + phase) + 0.1 * torch.randn(batch, length, channels)


def build_informer_probsparse():
    seeded(1201)
    model = Informer()
    seq_len, label_len, pred_len = 24, 12, 6
    series = _series(2, seq_len + pred_len, 3)
    x_enc = series[:, :seq_len]
    batch_y = series[:, seq_len - label_len:]
    x_dec = torch.cat([batch_y[:, :label_len], torch.zeros(2, pred_len, 3)], dim=1)
    return model, (x_enc, x_dec, batch_y)


# ------------------------------------------------------------------ Autoformer


class moving_avg(nn.Module):
    def __init__(self, kernel_size, stride=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

    def forward(self, x):
        # pad both ends of the series with its edge values
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        return self.avg(x.permute(0, 2, 1)).permute(0, 2, 1)


class series_decomp(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.moving_avg = moving_avg(kernel_size)

    def forward(self, x):
        moving_mean = self.moving_avg(x)
        return x - moving_mean, moving_mean


class AutoCorrelation(nn.Module):
    """Period-based dependencies: the top-k delays of the FFT autocorrelation, each a rolled copy of the values."""

    def __init__(self, factor=1):
        super().__init__()
        self.factor = factor

    def time_delay_agg_training(self, values, corr):
        head, channel, length = values.shape[1], values.shape[2], values.shape[3]
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        index = torch.topk(torch.mean(mean_value, dim=0), top_k, dim=-1)[1]
        weights = torch.stack([mean_value[:, index[i]] for i in range(top_k)], dim=-1)  # BREAK: mean_value[:, index] gathers every delay's column at once
        tmp_corr = torch.softmax(weights, dim=-1)
        tmp_values = values
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            pattern = torch.roll(tmp_values, -int(index[i]), -1)  # BREAK: gather from the values repeated twice at arange + delay
            delays_agg = delays_agg + pattern * (
                tmp_corr[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length))
        return delays_agg

    def forward(self, queries, keys, values):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        if L > S:
            zeros = torch.zeros_like(queries[:, : (L - S), :]).float()
            values = torch.cat([values, zeros], dim=1)
            keys = torch.cat([keys, zeros], dim=1)
        else:
            values = values[:, :L, :, :]
            keys = keys[:, :L, :, :]
        q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
        corr = torch.fft.irfft(q_fft * torch.conj(k_fft), n=L, dim=-1)
        V = self.time_delay_agg_training(values.permute(0, 2, 3, 1).contiguous(), corr).permute(0, 3, 1, 2)
        return V.contiguous()


class AutoformerEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, moving_avg=5):
        super().__init__()
        self.attention = AttentionLayer(AutoCorrelation(), d_model, n_heads)
        self.conv1 = nn.Conv1d(d_model, d_ff, 1, bias=False)
        self.conv2 = nn.Conv1d(d_ff, d_model, 1, bias=False)
        self.decomp1, self.decomp2 = series_decomp(moving_avg), series_decomp(moving_avg)

    def forward(self, x):
        x, _ = self.decomp1(x + self.attention(x, x, x))
        y = self.conv2(F.relu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        res, _ = self.decomp2(x + y)
        return res


class AutoformerDecoderLayer(nn.Module):
    def __init__(self, d_model, c_out, n_heads, d_ff, moving_avg=5):
        super().__init__()
        self.self_attention = AttentionLayer(AutoCorrelation(), d_model, n_heads)
        self.cross_attention = AttentionLayer(AutoCorrelation(), d_model, n_heads)
        self.conv1 = nn.Conv1d(d_model, d_ff, 1, bias=False)
        self.conv2 = nn.Conv1d(d_ff, d_model, 1, bias=False)
        self.decomp1, self.decomp2, self.decomp3 = series_decomp(moving_avg), series_decomp(moving_avg), series_decomp(moving_avg)
        self.projection = nn.Conv1d(d_model, c_out, 3, padding=1, padding_mode="circular", bias=False)

    def forward(self, x, cross):
        x, trend1 = self.decomp1(x + self.self_attention(x, x, x))
        x, trend2 = self.decomp2(x + self.cross_attention(x, cross, cross))
        y = self.conv2(F.relu(self.conv1(x.transpose(-1, 1)))).transpose(-1, 1)
        x, trend3 = self.decomp3(x + y)
        residual_trend = self.projection((trend1 + trend2 + trend3).permute(0, 2, 1)).transpose(1, 2)
        return x, residual_trend


class Autoformer(nn.Module):
    def __init__(self, c_in=3, d_model=16, n_heads=2, d_ff=32, label_len=12, pred_len=6):
        super().__init__()
        self.label_len, self.pred_len = label_len, pred_len
        self.decomp = series_decomp(5)
        self.enc_embedding = DataEmbedding(c_in, d_model, with_position=False)
        self.dec_embedding = DataEmbedding(c_in, d_model, with_position=False)
        self.encoder = AutoformerEncoderLayer(d_model, n_heads, d_ff)
        self.decoder = AutoformerDecoderLayer(d_model, c_in, n_heads, d_ff)
        self.projection = nn.Linear(d_model, c_in)

    def forward(self, x_enc, batch_y):
        mean = torch.mean(x_enc, dim=1).unsqueeze(1).repeat(1, self.pred_len, 1)
        zeros = torch.zeros([x_enc.shape[0], self.pred_len, x_enc.shape[2]], device=x_enc.device)
        seasonal_init, trend_init = self.decomp(x_enc)
        trend_init = torch.cat([trend_init[:, -self.label_len:, :], mean], dim=1)
        seasonal_init = torch.cat([seasonal_init[:, -self.label_len:, :], zeros], dim=1)
        enc_out = self.encoder(self.enc_embedding(x_enc))
        seasonal_part, residual_trend = self.decoder(self.dec_embedding(seasonal_init), enc_out)
        dec_out = trend_init + residual_trend + self.projection(seasonal_part)
        pred = dec_out[:, -self.pred_len:, :]
        return F.mse_loss(pred, batch_y[:, -self.pred_len:, :]), pred


def build_autoformer_autocorr():
    seeded(1202)
    model = Autoformer()
    series = _series(2, 30, 3)
    return model, (series[:, :24], series[:, 12:])
