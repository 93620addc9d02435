"""Forecasting: zhykoties/TimeSeries' DeepAR training window (the LSTM ``Net`` fed one step at a time with its series
embedding, missing inputs replaced by the previous step's mu, the Gaussian likelihood ``loss_fn`` over the observed
labels only) and thuml/Time-Series-Library's TimesNet long-term forecaster (``FFT_for_Period`` reading the top
frequencies back through numpy, each ``TimesBlock`` folding the series into a 2-D period grid for its inception
convs, the experiment's train step appending ``loss.item()``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ zhykoties/TimeSeries model/net.py + train.py


class Net(nn.Module):
    def __init__(self, params):
        """We define a recurrent network that predicts the future values of a time-dependent variable based on
        past inputs and covariates."""
        super().__init__()
        self.params = params
        self.embedding = nn.Embedding(params.num_class, params.embedding_dim)

        self.lstm = nn.LSTM(input_size=1 + params.cov_dim + params.embedding_dim, hidden_size=params.lstm_hidden_dim,
                            num_layers=params.lstm_layers, bias=True, batch_first=False, dropout=params.lstm_dropout)
        # initialize LSTM forget gate bias to be 1 as recommanded by http://proceedings.mlr.press/v37/jozefowicz15.pdf
        for names in self.lstm._all_weights:
            for name in filter(lambda n: "bias" in n, names):
                bias = getattr(self.lstm, name)
                n = bias.size(0)
                start, end = n // 4, n // 2
                bias.data[start:end].fill_(1.0)

        self.relu = nn.ReLU()
        self.distribution_mu = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_presigma = nn.Linear(params.lstm_hidden_dim * params.lstm_layers, 1)
        self.distribution_sigma = nn.Softplus()

    def forward(self, x, idx, hidden, cell):
        """Predict mu and sigma of the distribution for z_t."""
        onehot_embed = self.embedding(idx)  # TODO: is it possible to do this only once per window instead of per step?
        lstm_input = torch.cat((x, onehot_embed), dim=2)
        output, (hidden, cell) = self.lstm(lstm_input, (hidden, cell))  # BREAK: Dynamo does not trace nn.LSTM: run the one-step cell by hand with the module's own weight_ih_l*/weight_hh_l* and biases (gates i, f, g, o)
        # use h from all three layers to calculate mu and sigma
        hidden_permute = hidden.permute(1, 2, 0).contiguous().view(hidden.shape[1], -1)
        pre_sigma = self.distribution_presigma(hidden_permute)
        mu = self.distribution_mu(hidden_permute)
        sigma = self.distribution_sigma(pre_sigma)  # softplus to make sure standard deviation is positive
        return torch.squeeze(mu), torch.squeeze(sigma), hidden, cell

    def init_hidden(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim)

    def init_cell(self, input_size):
        return torch.zeros(self.params.lstm_layers, input_size, self.params.lstm_hidden_dim)


def loss_fn(mu, sigma, labels):
    """Compute using gaussian the log-likehood which needs to be maximized. Ignore time steps where labels are
    missing."""
    zero_index = labels != 0
    distribution = torch.distributions.normal.Normal(mu[zero_index], sigma[zero_index])  # BREAK: take the likelihood of every step and average it under the observed mask (sum of log_prob * mask / mask.sum())
    likelihood = distribution.log_prob(labels[zero_index])  # BREAK: the same masked mean: log_prob of all the labels, weighted by the observed mask
    return -torch.mean(likelihood)


class DeepARTrainStep(nn.Module):
    """One batch of ``train()`` in ``train.py``, up to the backward."""

    def __init__(self, params):
        super().__init__()
        self.params = params
        self.model = Net(params)

    def forward(self, train_batch, idx, labels_batch):
        batch_size = train_batch.shape[0]
        train_batch = train_batch.permute(1, 0, 2).to(torch.float32)  # not scaled
        labels_batch = labels_batch.permute(1, 0).to(torch.float32)  # not scaled
        idx = idx.unsqueeze(0)

        loss = torch.zeros(1)
        hidden = self.model.init_hidden(batch_size)
        cell = self.model.init_cell(batch_size)

        for t in range(self.params.train_window):
            # if z_t is missing, replace it by output mu from the last time step
            zero_index = train_batch[t, :, 0] == 0
            if t > 0 and torch.sum(zero_index) > 0:
                train_batch[t, zero_index, 0] = mu[zero_index]  # noqa: F821
            mu, sigma, hidden, cell = self.model(train_batch[t].unsqueeze_(0).clone(), idx, hidden, cell)
            loss += loss_fn(mu, sigma, labels_batch[t])
        return loss


def build_deepar_train():
    seeded(1408)
    params = SimpleNamespace(num_class=4, embedding_dim=3, cov_dim=2, lstm_hidden_dim=8, lstm_layers=2, lstm_dropout=0.0, train_window=6)
    z = torch.rand(5, params.train_window + 1) * 2 + 0.5
    z[1, :3] = 0.0  # a series that starts late: its first inputs and labels are missing
    z[3, 4] = 0.0  # a missing observation in the middle of a window
    covariates = torch.randn(5, params.train_window, params.cov_dim)
    train_batch = torch.cat([z[:, :-1, None], covariates], dim=2)
    labels = z[:, 1:]
    idx = torch.tensor([0, 1, 2, 3, 1])
    return DeepARTrainStep(params).train(), (train_batch, idx, labels)


# ------------------------------------------------------------------ thuml/Time-Series-Library models/TimesNet.py


def FFT_for_Period(x, k=2):
    # [B, T, C]
    xf = torch.fft.rfft(x, dim=1)
    # find period by amplitudes
    frequency_list = abs(xf).mean(0).mean(-1)
    frequency_list[0] = 0
    _, top_list = torch.topk(frequency_list, k)
    top_list = top_list.detach().cpu().numpy()
    period = x.shape[1] // top_list
    return period, abs(xf).mean(-1)[:, top_list]


class Inception_Block_V1(nn.Module):
    def __init__(self, in_channels, out_channels, num_kernels=6):
        super().__init__()
        self.num_kernels = num_kernels
        self.kernels = nn.ModuleList([nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i) for i in range(num_kernels)])

    def forward(self, x):
        res_list = []
        for i in range(self.num_kernels):
            res_list.append(self.kernels[i](x))
        res = torch.stack(res_list, dim=-1).mean(-1)
        return res


class TimesBlock(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.k = configs.top_k
        # parameter-efficient design
        self.conv = nn.Sequential(
            Inception_Block_V1(configs.d_model, configs.d_ff, num_kernels=configs.num_kernels),
            nn.GELU(),
            Inception_Block_V1(configs.d_ff, configs.d_model, num_kernels=configs.num_kernels),
        )

    def forward(self, x):
        B, T, N = x.size()
        period_list, period_weight = FFT_for_Period(x, self.k)

        res = []
        for i in range(self.k):
            period = period_list[i]
            # padding
            if (self.seq_len + self.pred_len) % period != 0:  # BREAK must-not: the period found by the FFT sets the 2-D fold's shape; the graph cannot be static in it
                length = (((self.seq_len + self.pred_len) // period) + 1) * period
                padding = torch.zeros([x.shape[0], (length - (self.seq_len + self.pred_len)), x.shape[2]]).to(x.device)
                out = torch.cat([x, padding], dim=1)
            else:
                length = self.seq_len + self.pred_len
                out = x
            # reshape
            out = out.reshape(B, length // period, period, N).permute(0, 3, 1, 2).contiguous()
            # 2D conv: from 1d Variation to 2d Variation
            out = self.conv(out)
            # reshape back
            out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
            res.append(out[:, : (self.seq_len + self.pred_len), :])
        res = torch.stack(res, dim=-1)
        # adaptive aggregation
        period_weight = F.softmax(period_weight, dim=1)
        period_weight = period_weight.unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)
        res = torch.sum(res * period_weight, -1)
        # residual connection
        res = res + x
        return res


class DataEmbedding(nn.Module):
    """TokenEmbedding (circular conv) + TimeFeatureEmbedding ('timeF', hourly) + PositionalEmbedding."""

    def __init__(self, c_in, d_model, d_inp=4, dropout=0.1, max_len=64):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        self.temporal = nn.Linear(d_inp, d_model, bias=False)
        pe = torch.zeros(max_len, d_model).float()
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2) + self.temporal(x_mark) + self.pe[:, : x.size(1)]
        return self.dropout(x)


class TimesNet(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.model = nn.ModuleList([TimesBlock(configs) for _ in range(configs.e_layers)])
        self.enc_embedding = DataEmbedding(configs.enc_in, configs.d_model, dropout=configs.dropout)
        self.layer = configs.e_layers
        self.layer_norm = nn.LayerNorm(configs.d_model)
        self.predict_linear = nn.Linear(self.seq_len, self.pred_len + self.seq_len)
        self.projection = nn.Linear(configs.d_model, configs.c_out, bias=True)

    def forecast(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        # Normalization from Non-stationary Transformer
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc.sub(means)
        stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc.div(stdev)
        # embedding
        enc_out = self.enc_embedding(x_enc, x_mark_enc)  # [B,T,C]
        enc_out = self.predict_linear(enc_out.permute(0, 2, 1)).permute(0, 2, 1)  # align temporal dimension
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))
        # project back
        dec_out = self.projection(enc_out)
        # De-Normalization from Non-stationary Transformer
        dec_out = dec_out.mul(stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1))
        dec_out = dec_out.add(means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len + self.seq_len, 1))
        return dec_out

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        dec_out = self.forecast(x_enc, x_mark_enc, x_dec, x_mark_dec)
        return dec_out[:, -self.pred_len :, :]  # [B, L, D]


class LongTermForecastStep(nn.Module):
    """One iteration of ``Exp_Long_Term_Forecast.train``, up to the backward."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.model = TimesNet(args)
        self.criterion = nn.MSELoss()
        self.train_loss = []

    def forward(self, batch_x, batch_y, batch_x_mark, batch_y_mark):
        batch_x = batch_x.float()
        batch_y = batch_y.float()
        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -self.args.pred_len :, :]).float()
        dec_inp = torch.cat([batch_y[:, : self.args.label_len, :], dec_inp], dim=1).float()
        outputs = self.model(batch_x, batch_x_mark, dec_inp, batch_y_mark)
        f_dim = -1 if self.args.features == "MS" else 0
        outputs = outputs[:, -self.args.pred_len :, f_dim:]
        batch_y = batch_y[:, -self.args.pred_len :, f_dim:]
        loss = self.criterion(outputs, batch_y)
        self.train_loss.append(loss.item())  # BREAK must-not: the epoch's train loss is np.average over these Python floats, printed and early-stopped on
        return loss


def build_timesnet_train():
    seeded(1409)
    args = SimpleNamespace(seq_len=24, label_len=8, pred_len=8, top_k=2, d_model=8, d_ff=8, num_kernels=3, e_layers=2,
                           enc_in=3, c_out=3, dropout=0.1, features="M")
    t = torch.arange(40).float()
    series = torch.stack([torch.sin(2 * math.pi * t / 8), torch.cos(2 * math.pi * t / 6), torch.sin(2 * math.pi * t / 12)], -1)
    series = series + 0.1 * torch.randn(2, 40, 3)
    batch_x, batch_y = series[:, :24], series[:, 16:40]
    marks = torch.randn(2, 40, 4)
    return LongTermForecastStep(args).train(), (batch_x, batch_y, marks[:, :24], marks[:, 16:40])
