"""Time series: an Autoformer encoder-forecaster training step (series decomposition, FFT auto-correlation with
the training-phase time-delay aggregation), and the Anomaly Transformer's evaluation (association discrepancy
energies, a percentile threshold over train and test energies, point adjustment, precision/recall/F1)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- Autoformer


class my_Layernorm(nn.Module):
    """
    Special designed layernorm for the seasonal part
    """

    def __init__(self, channels):
        super().__init__()
        self.layernorm = nn.LayerNorm(channels)

    def forward(self, x):
        x_hat = self.layernorm(x)
        bias = torch.mean(x_hat, dim=1).unsqueeze(1).repeat(1, x.shape[1], 1)
        return x_hat - bias


class moving_avg(nn.Module):
    """
    Moving average block to highlight the trend of time series
    """

    def __init__(self, kernel_size, stride):
        super().__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=0)

    def forward(self, x):
        # padding on the both ends of time series
        front = x[:, 0:1, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        end = x[:, -1:, :].repeat(1, (self.kernel_size - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        x = self.avg(x.permute(0, 2, 1))
        x = x.permute(0, 2, 1)
        return x


class series_decomp(nn.Module):
    """
    Series decomposition block
    """

    def __init__(self, kernel_size):
        super().__init__()
        self.moving_avg = moving_avg(kernel_size, stride=1)

    def forward(self, x):
        moving_mean = self.moving_avg(x)
        res = x - moving_mean
        return res, moving_mean


class AutoCorrelation(nn.Module):
    """
    AutoCorrelation Mechanism with the following two phases:
    (1) period-based dependencies discovery
    (2) time delay aggregation
    This block can replace the self-attention family mechanism seamlessly.
    """

    def __init__(self, mask_flag=True, factor=1, scale=None, attention_dropout=0.1, output_attention=False):
        super().__init__()
        self.factor = factor
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)

    def time_delay_agg_training(self, values, corr):
        """
        SpeedUp version of Autocorrelation (a batch-normalization style design)
        This is for the training phase.
        """
        head = values.shape[1]
        channel = values.shape[2]
        length = values.shape[3]
        # find top k
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        index = torch.topk(torch.mean(mean_value, dim=0), top_k, dim=-1)[1]
        weights = torch.stack([mean_value[:, index[i]] for i in range(top_k)], dim=-1)  # BREAK: mean_value[:, index]
        # update corr
        tmp_corr = torch.softmax(weights, dim=-1)
        # aggregation
        tmp_values = values
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            pattern = torch.roll(tmp_values, -int(index[i]), -1)  # BREAK: gather at (arange + delay) % length
            delays_agg = delays_agg + pattern * \
                (tmp_corr[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length))
        return delays_agg

    def time_delay_agg_inference(self, values, corr):
        """
        SpeedUp version of Autocorrelation (a batch-normalization style design)
        This is for the inference phase.
        """
        batch = values.shape[0]
        head = values.shape[1]
        channel = values.shape[2]
        length = values.shape[3]
        # index init
        init_index = torch.arange(length).unsqueeze(0).unsqueeze(0).unsqueeze(0).repeat(batch, head, channel, 1)
        # find top k
        top_k = int(self.factor * math.log(length))
        mean_value = torch.mean(torch.mean(corr, dim=1), dim=1)
        weights, delay = torch.topk(mean_value, top_k, dim=-1)
        # update corr
        tmp_corr = torch.softmax(weights, dim=-1)
        # aggregation
        tmp_values = values.repeat(1, 1, 1, 2)
        delays_agg = torch.zeros_like(values).float()
        for i in range(top_k):
            tmp_delay = init_index + delay[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length)
            pattern = torch.gather(tmp_values, dim=-1, index=tmp_delay)
            delays_agg = delays_agg + pattern * \
                (tmp_corr[:, i].unsqueeze(1).unsqueeze(1).unsqueeze(1).repeat(1, head, channel, length))
        return delays_agg

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        if L > S:
            zeros = torch.zeros_like(queries[:, :(L - S), :]).float()
            values = torch.cat([values, zeros], dim=1)
            keys = torch.cat([keys, zeros], dim=1)
        else:
            values = values[:, :L, :, :]
            keys = keys[:, :L, :, :]

        # period-based dependencies
        q_fft = torch.fft.rfft(queries.permute(0, 2, 3, 1).contiguous(), dim=-1)
        k_fft = torch.fft.rfft(keys.permute(0, 2, 3, 1).contiguous(), dim=-1)
        res = q_fft * torch.conj(k_fft)
        corr = torch.fft.irfft(res, n=L, dim=-1)

        # time delay agg
        if self.training:
            V = self.time_delay_agg_training(values.permute(0, 2, 3, 1).contiguous(), corr).permute(0, 3, 1, 2)
        else:
            V = self.time_delay_agg_inference(values.permute(0, 2, 3, 1).contiguous(), corr).permute(0, 3, 1, 2)

        if self.output_attention:
            return (V.contiguous(), corr.permute(0, 3, 1, 2))
        else:
            return (V.contiguous(), None)


class AutoCorrelationLayer(nn.Module):
    def __init__(self, correlation, d_model, n_heads, d_keys=None, d_values=None):
        super().__init__()
        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)
        self.inner_correlation = correlation
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads

        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)

        out, attn = self.inner_correlation(queries, keys, values, attn_mask)
        out = out.view(B, L, -1)

        return self.out_projection(out), attn


class EncoderLayer(nn.Module):
    """
    Autoformer encoder layer with the progressive decomposition architecture
    """

    def __init__(self, attention, d_model, d_ff=None, moving_avg=25, dropout=0.1, activation="relu"):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1, bias=False)
        self.decomp1 = series_decomp(moving_avg)
        self.decomp2 = series_decomp(moving_avg)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.relu if activation == "relu" else F.gelu

    def forward(self, x, attn_mask=None):
        new_x, attn = self.attention(x, x, x, attn_mask=attn_mask)
        x = x + self.dropout(new_x)
        x, _ = self.decomp1(x)
        y = x
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        res, _ = self.decomp2(x + y)
        return res, attn


class AutoformerLite(nn.Module):
    """Token embedding, one auto-correlation encoder layer, and a decomposed linear forecaster (trend + season)."""

    def __init__(self, enc_in: int = 3, seq_len: int = 24, pred_len: int = 8, d_model: int = 16, n_heads: int = 2,
                 moving_avg: int = 5, factor: int = 1, dropout: float = 0.05) -> None:
        super().__init__()
        self.pred_len = pred_len
        self.decomp = series_decomp(moving_avg)
        self.enc_embedding = nn.Conv1d(enc_in, d_model, kernel_size=3, padding=1, padding_mode="circular",
                                       bias=False)
        self.encoder = EncoderLayer(
            AutoCorrelationLayer(AutoCorrelation(False, factor, attention_dropout=dropout), d_model, n_heads),
            d_model, 32, moving_avg=moving_avg, dropout=dropout,
        )
        self.norm = my_Layernorm(d_model)
        self.seasonal_head = nn.Linear(seq_len * d_model, pred_len * enc_in)
        self.trend_head = nn.Linear(seq_len, pred_len)

    def forward(self, x_enc):
        seasonal_init, trend_init = self.decomp(x_enc)
        enc_out = self.enc_embedding(seasonal_init.permute(0, 2, 1)).transpose(1, 2)
        enc_out, _ = self.encoder(enc_out)
        enc_out = self.norm(enc_out)
        seasonal = self.seasonal_head(enc_out.flatten(1)).view(x_enc.shape[0], self.pred_len, -1)
        trend = self.trend_head(trend_init.permute(0, 2, 1)).permute(0, 2, 1)
        return seasonal + trend


class ForecastStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = AutoformerLite()
        self.criterion = nn.MSELoss()

    def forward(self, batch_x, batch_y):
        outputs = self.model(batch_x)
        loss = self.criterion(outputs, batch_y)
        return loss, outputs


def build_autoformer_autocorr():
    torch.manual_seed(1400)
    model = ForecastStep().train()
    g = seeded(1401)
    t = torch.arange(32, dtype=torch.float32)
    series = torch.stack([torch.sin(2 * math.pi * t / p) for p in (6.0, 8.0, 12.0)], dim=-1)
    series = series[None].repeat(4, 1, 1) + 0.1 * torch.randn(4, 32, 3, generator=g)
    return model, (series[:, :24], series[:, 24:])


# --------------------------------------------------------------------------- Anomaly Transformer evaluation


class AnomalyAttention(nn.Module):
    def __init__(self, win_size, mask_flag=True, scale=None, attention_dropout=0.0, output_attention=False):
        super().__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.output_attention = output_attention
        self.dropout = nn.Dropout(attention_dropout)
        window_size = win_size
        self.distances = torch.zeros((window_size, window_size))
        for i in range(window_size):
            for j in range(window_size):
                self.distances[i][j] = abs(i - j)

    def forward(self, queries, keys, values, sigma, attn_mask):
        B, L, H, E = queries.shape
        _, S, _, D = values.shape
        scale = self.scale or 1. / math.sqrt(E)

        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
            scores.masked_fill_(causal, -np.inf)
        attn = scale * scores

        sigma = sigma.transpose(1, 2)  # B L H ->  B H L
        window_size = attn.shape[-1]
        sigma = torch.sigmoid(sigma * 5) + 1e-5
        sigma = torch.pow(3, sigma) - 1
        sigma = sigma.unsqueeze(-1).repeat(1, 1, 1, window_size)  # B H L L
        prior = self.distances.unsqueeze(0).unsqueeze(0).repeat(sigma.shape[0], sigma.shape[1], 1, 1)
        prior = 1.0 / (math.sqrt(2 * math.pi) * sigma) * torch.exp(-prior ** 2 / 2 / (sigma ** 2))

        series = self.dropout(torch.softmax(attn, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", series, values)

        if self.output_attention:
            return (V.contiguous(), series, prior, sigma)
        else:
            return (V.contiguous(), None)


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, d_keys=None, d_values=None):
        super().__init__()
        d_keys = d_keys or (d_model // n_heads)
        d_values = d_values or (d_model // n_heads)
        self.norm = nn.LayerNorm(d_model)
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.sigma_projection = nn.Linear(d_model, n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        x = queries
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        sigma = self.sigma_projection(x).view(B, L, H)

        out, series, prior, sigma = self.inner_attention(queries, keys, values, sigma, attn_mask)
        out = out.view(B, L, -1)

        return self.out_projection(out), series, prior, sigma


class AnomalyTransformerLite(nn.Module):
    def __init__(self, win_size: int = 12, enc_in: int = 2, c_out: int = 2, d_model: int = 16, n_heads: int = 2):
        super().__init__()
        self.embedding = nn.Conv1d(enc_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        self.attention = AttentionLayer(AnomalyAttention(win_size, False, output_attention=True), d_model, n_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, 32), nn.GELU(), nn.Linear(32, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.projection = nn.Linear(d_model, c_out, bias=True)

    def forward(self, x):
        enc_out = self.embedding(x.permute(0, 2, 1)).transpose(1, 2)
        new_x, series, prior, sigma = self.attention(enc_out, enc_out, enc_out, attn_mask=None)
        x = self.norm1(enc_out + new_x)
        enc_out = self.norm2(x + self.ff(x))
        return self.projection(enc_out), [series], [prior], [sigma]


def my_kl_loss(p, q):
    res = p * (torch.log(p + 0.0001) - torch.log(q + 0.0001))
    return torch.mean(torch.sum(res, dim=-1), dim=1)


def precision_recall_fscore(gt, pred):
    """sklearn's accuracy_score and precision_recall_fscore_support(average='binary') for 0/1 labels."""
    tn, fp, fn, tp = np.bincount(gt * 2 + pred, minlength=4).tolist()  # BREAK must-not: the scores are returned as Python floats
    accuracy = (tp + tn) / len(gt)
    precision = tp / (tp + fp) if tp + fp > 0 else 0.0
    recall = tp / (tp + fn) if tp + fn > 0 else 0.0
    f_score = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return accuracy, precision, recall, f_score


def anomaly_energy(model, input_data, win_size, temperature=50):
    criterion = nn.MSELoss(reduction="none")
    input = input_data.float()
    output, series, prior, _ = model(input)
    loss = torch.mean(criterion(input, output), dim=-1)
    series_loss = 0.0
    prior_loss = 0.0
    for u in range(len(prior)):
        normalized_prior = prior[u] / torch.unsqueeze(torch.sum(prior[u], dim=-1), dim=-1).repeat(1, 1, 1, win_size)
        series_loss += my_kl_loss(series[u], normalized_prior.detach()) * temperature
        prior_loss += my_kl_loss(normalized_prior, series[u].detach()) * temperature
    metric = torch.softmax((-series_loss - prior_loss), dim=-1)
    cri = metric * loss
    return cri.detach().cpu().numpy()


@torch.no_grad()
def test(model, train_loader, test_loader, win_size, anormly_ratio=4.0):
    """Solver.test: energies on the train and test windows, the threshold, point adjustment, the scores."""
    model.eval()

    # (1) stastic on the train set
    attens_energy = []
    for input_data, _labels in train_loader:
        attens_energy.append(anomaly_energy(model, input_data, win_size))
    attens_energy = np.concatenate(attens_energy, axis=0).reshape(-1)
    train_energy = np.array(attens_energy)

    # (2) find the threshold
    attens_energy = []
    test_labels = []
    for input_data, labels in test_loader:
        attens_energy.append(anomaly_energy(model, input_data, win_size))
        test_labels.append(labels)
    attens_energy = np.concatenate(attens_energy, axis=0).reshape(-1)
    test_energy = np.array(attens_energy)
    combined_energy = np.concatenate([train_energy, test_energy], axis=0)
    thresh = np.percentile(combined_energy, 100 - anormly_ratio)

    # (3) evaluation on the test set
    test_labels = np.concatenate([t.numpy() for t in test_labels], axis=0).reshape(-1)
    pred = (test_energy > thresh).astype(int)
    gt = test_labels.astype(int)

    # detection adjustment: please see this issue for more information
    # https://github.com/thuml/Anomaly-Transformer/issues/14
    anomaly_state = False
    for i in range(len(gt)):
        if gt[i] == 1 and pred[i] == 1 and not anomaly_state:  # BREAK: per-segment any() with cumsum ids
            anomaly_state = True
            for j in range(i, 0, -1):
                if gt[j] == 0:
                    break
                else:
                    if pred[j] == 0:
                        pred[j] = 1
            for j in range(i, len(gt)):
                if gt[j] == 0:
                    break
                else:
                    if pred[j] == 0:
                        pred[j] = 1
        elif gt[i] == 0:
            anomaly_state = False
        if anomaly_state:
            pred[i] = 1

    pred = np.array(pred)
    gt = np.array(gt)
    accuracy, precision, recall, f_score = precision_recall_fscore(gt, pred)
    return thresh, accuracy, precision, recall, f_score


def build_anomaly_threshold():
    torch.manual_seed(1410)
    win_size = 12
    model = AnomalyTransformerLite(win_size=win_size)
    g = seeded(1411)
    t = torch.arange(4 * win_size, dtype=torch.float32)
    normal = torch.stack([torch.sin(t / 3.0), torch.cos(t / 5.0)], dim=-1)
    train = normal + 0.05 * torch.randn(4 * win_size, 2, generator=g)
    test_series = normal + 0.05 * torch.randn(4 * win_size, 2, generator=g)
    labels = torch.zeros(4 * win_size)
    test_series[17:21] += 2.0  # an anomalous segment
    labels[17:21] = 1
    test_series[38] -= 2.5
    labels[37:40] = 1
    train_loader = [(train.view(-1, win_size, 2)[i:i + 2], None) for i in (0, 2)]
    test_loader = [(test_series.view(-1, win_size, 2)[i:i + 2], labels.view(-1, win_size)[i:i + 2]) for i in (0, 2)]
    return test, (model, train_loader, test_loader, win_size, 10.0)
