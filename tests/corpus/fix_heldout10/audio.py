"""Speech: fairseq's HuBERT masked prediction (logits against every cluster embedding for the masked
frames, negatives equal to the positive masked to -inf), HiFi-GAN's adversarial / feature-matching / mel
losses over the multi-period and multi-scale discriminators, and a VITS training forward with monotonic
alignment search between the prior and the flowed posterior and a random segment cut for the decoder."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import rand_slice_segments, seeded, sequence_mask

# --------------------------------------------------------------------------- HuBERT


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers=((16, 4, 2), (16, 3, 2), (16, 3, 2))):
        super().__init__()
        layers = []
        in_d = 1
        for i, (dim, k, stride) in enumerate(conv_layers):
            layers.append(nn.Sequential(nn.Conv1d(in_d, dim, k, stride=stride, bias=False),
                                        nn.GroupNorm(dim, dim) if i == 0 else nn.Identity(), nn.GELU()))
            in_d = dim
        self.conv_layers = nn.ModuleList(layers)

    def forward(self, x):
        x = x.unsqueeze(1)  # BxT -> BxCxT
        for conv in self.conv_layers:
            x = conv(x)
        return x


class HubertModel(nn.Module):
    def __init__(self, embed=16, encoder_dim=24, final_dim=12, num_classes=(10,), logit_temp=0.1):
        super().__init__()
        self.feature_extractor = ConvFeatureExtractionModel()
        self.layer_norm = nn.LayerNorm(embed)
        self.post_extract_proj = nn.Linear(embed, encoder_dim)
        self.mask_emb = nn.Parameter(torch.FloatTensor(encoder_dim).uniform_())
        layer = nn.TransformerEncoderLayer(encoder_dim, 4, 2 * encoder_dim, dropout=0.0, batch_first=True)
        self.encoder = nn.ModuleList([layer, nn.TransformerEncoderLayer(encoder_dim, 4, 2 * encoder_dim, dropout=0.0, batch_first=True)])
        self.final_proj = nn.Linear(encoder_dim, final_dim * len(num_classes))
        self.num_classes = list(num_classes)
        self.label_embs_concat = nn.Parameter(torch.FloatTensor(sum(num_classes), final_dim))
        nn.init.uniform_(self.label_embs_concat)
        self.logit_temp = logit_temp
        self.skip_masked = False
        self.skip_nomask = True

    def compute_nce(self, x, pos, negs):
        neg_is_pos = (pos == negs).all(-1)
        pos = pos.unsqueeze(0)
        targets = torch.cat([pos, negs], dim=0)
        logits = torch.cosine_similarity(x.float(), targets.float(), dim=-1).type_as(x)
        logits /= self.logit_temp
        if neg_is_pos.any():  # BREAK: masked_fill unconditionally (a no-op where no negative equals the positive)
            logits[1:][neg_is_pos] = float("-inf")
        logits = logits.transpose(0, 1)  # (num_x, num_cls+1)
        return logits

    def forward(self, source, target_list, padding_mask, mask_indices):
        features = self.feature_extractor(source).transpose(1, 2)
        features = self.layer_norm(features)
        features = self.post_extract_proj(features)
        x = features.clone()
        x[mask_indices] = self.mask_emb
        for layer in self.encoder:
            x = layer(x, src_key_padding_mask=padding_mask)

        def compute_pred(proj_x, target, label_embs):
            # compute logits for the i-th label set
            y = torch.index_select(label_embs, 0, target.long())
            negs = label_embs.unsqueeze(1).expand(-1, proj_x.size(0), -1)
            # proj_x: (S, D); y: (S, D); negs: (Neg, S, D)
            return self.compute_nce(proj_x, y, negs)

        label_embs_list = self.label_embs_concat.split(self.num_classes, 0)
        if not self.skip_masked:
            masked_indices = torch.logical_and(~padding_mask, mask_indices)
            proj_x_m = self.final_proj(x[masked_indices])  # BREAK: project every frame; the loss weighs the masked ones
            proj_x_m_list = [proj_x_m for _ in range(len(target_list))]
            logit_m_list = [
                compute_pred(proj_x_m, t[masked_indices], label_embs_list[i])  # BREAK: every frame's target, masked in the loss
                for i, (proj_x_m, t) in enumerate(zip(proj_x_m_list, target_list, strict=True))
            ]
        else:
            logit_m_list = [None for _ in target_list]
        return {"logit_m_list": logit_m_list, "padding_mask": padding_mask}


class HubertCriterion(nn.Module):
    def __init__(self, model: HubertModel, pred_masked_weight=1.0):
        super().__init__()
        self.model = model
        self.pred_masked_weight = pred_masked_weight

    def forward(self, source, target_list, padding_mask, mask_indices):
        net_output = self.model(source, target_list, padding_mask, mask_indices)
        loss = 0.0
        sample_size = 0
        loss_m_list = []
        logp_m_list = [x.float() for x in net_output["logit_m_list"] if x is not None]
        targ_m_list = [x.new_zeros(x.size(0), dtype=torch.long) for x in logp_m_list]
        for logp_m, targ_m in zip(logp_m_list, targ_m_list, strict=True):
            loss_m = F.cross_entropy(logp_m, targ_m, reduction="sum")
            loss_m_list.append(loss_m)
        if self.pred_masked_weight > 0:
            loss += self.pred_masked_weight * sum(loss_m_list)
            sample_size += targ_m_list[0].numel()
        return loss / sample_size


def compute_mask_indices(shape, mask_prob, mask_length, g):
    """Spans of ``mask_length`` frames starting at ``mask_prob * T / mask_length`` random positions per row."""
    bsz, all_sz = shape
    mask = torch.zeros(shape, dtype=torch.bool)
    num_mask = int(mask_prob * all_sz / float(mask_length) + 0.5)
    for i in range(bsz):
        starts = torch.randperm(all_sz - mask_length, generator=g)[:num_mask]
        for s in starts.tolist():
            mask[i, s : s + mask_length] = True
    return mask


def build_hubert_masked():
    torch.manual_seed(1401)
    model = HubertCriterion(HubertModel())
    g = seeded(1402)
    source = torch.randn(2, 160, generator=g)
    T = 19  # frames after the conv stack
    padding_mask = torch.zeros(2, T, dtype=torch.bool)
    padding_mask[1, 15:] = True
    mask_indices = compute_mask_indices((2, T), 0.65, 3, g) & ~padding_mask
    target_list = [torch.randint(0, 10, (2, T), generator=g)]
    return model, (source, target_list, padding_mask, mask_indices)


# --------------------------------------------------------------------------- HiFi-GAN losses

LRELU_SLOPE = 0.1


def get_padding(kernel_size, dilation=1):
    return int((kernel_size * dilation - dilation) / 2)


class DiscriminatorP(nn.Module):
    def __init__(self, period, kernel_size=5, stride=3):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([
            nn.Conv2d(1, 8, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0)),
            nn.Conv2d(8, 16, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0)),
            nn.Conv2d(16, 16, (kernel_size, 1), 1, padding=(2, 0)),
        ])
        self.conv_post = nn.Conv2d(16, 1, (3, 1), 1, padding=(1, 0))

    def forward(self, x):
        fmap = []
        # 1d to 2d
        b, c, t = x.shape
        if t % self.period != 0:  # pad first
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)
        for layer in self.convs:
            x = layer(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        x = torch.flatten(x, 1, -1)
        return x, fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods=(2, 3, 5)):
        super().__init__()
        self.discriminators = nn.ModuleList(DiscriminatorP(p) for p in periods)

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class DiscriminatorS(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 8, 15, 1, padding=7), nn.Conv1d(8, 16, 41, 4, groups=4, padding=20), nn.Conv1d(16, 16, 5, 1, padding=2)])
        self.conv_post = nn.Conv1d(16, 1, 3, 1, padding=1)

    def forward(self, x):
        fmap = []
        for layer in self.convs:
            x = layer(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiScaleDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorS(), DiscriminatorS()])
        self.meanpools = nn.ModuleList([nn.AvgPool1d(4, 2, padding=2)])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i - 1](y)
                y_hat = self.meanpools[i - 1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g, strict=True):
        for rl, gl in zip(dr, dg, strict=True):
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    r_losses = []
    g_losses = []
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs, strict=True):
        r_loss = torch.mean((1 - dr) ** 2)
        g_loss = torch.mean(dg**2)
        loss += r_loss + g_loss
        r_losses.append(r_loss.item())  # BREAK: keep the per-discriminator losses as tensors (the step never reads them)
        g_losses.append(g_loss.item())
    return loss, r_losses, g_losses


def generator_loss(disc_outputs):
    loss = 0
    gen_losses = []
    for dg in disc_outputs:
        dg_loss = torch.mean((1 - dg) ** 2)
        gen_losses.append(dg_loss)
        loss += dg_loss
    return loss, gen_losses


def mel_filterbank(sr, n_fft, n_mels, fmin, fmax):
    """Slaney-style triangular mel filters, [n_mels, n_fft // 2 + 1] (librosa.filters.mel)."""
    def hz_to_mel(f):
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    def mel_to_hz(m):
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    fftfreqs = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    mel_f = mel_to_hz(torch.linspace(float(hz_to_mel(torch.tensor(float(fmin)))), float(hz_to_mel(torch.tensor(float(fmax)))), n_mels + 2))
    fdiff = mel_f[1:] - mel_f[:-1]
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0)
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    return weights * enorm[:, None]


def dynamic_range_compression_torch(x, C=1, clip_val=1e-5):
    return torch.log(torch.clamp(x, min=clip_val) * C)


class MelSpectrogram(nn.Module):
    def __init__(self, n_fft=64, num_mels=16, sampling_rate=8000, hop_size=16, win_size=64, fmin=0, fmax=4000):
        super().__init__()
        self.n_fft, self.hop_size, self.win_size = n_fft, hop_size, win_size
        self.register_buffer("mel_basis", mel_filterbank(sampling_rate, n_fft, num_mels, fmin, fmax))
        self.register_buffer("hann_window", torch.hann_window(win_size))

    def forward(self, y):
        if torch.min(y) < -1.0:  # BREAK must-not: the warning prints the clipped value when the audio leaves [-1, 1]; only a host check can
            print("min value is ", torch.min(y))
        if torch.max(y) > 1.0:  # BREAK must-not: the warning prints the clipped value when the audio leaves [-1, 1]; only a host check can
            print("max value is ", torch.max(y))
        pad = int((self.n_fft - self.hop_size) / 2)
        y = F.pad(y.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
        spec = torch.stft(y, self.n_fft, hop_length=self.hop_size, win_length=self.win_size, window=self.hann_window,
                          center=False, pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
        spec = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + 1e-9)
        spec = torch.matmul(self.mel_basis, spec)
        return dynamic_range_compression_torch(spec)


class TinyGenerator(nn.Module):
    def __init__(self, num_mels=16, upsample=16):
        super().__init__()
        self.conv_pre = nn.Conv1d(num_mels, 16, 7, 1, padding=3)
        self.up = nn.ConvTranspose1d(16, 8, upsample, upsample)
        self.conv_post = nn.Conv1d(8, 1, 7, 1, padding=3)

    def forward(self, x):
        x = F.leaky_relu(self.conv_pre(x), LRELU_SLOPE)
        x = F.leaky_relu(self.up(x), LRELU_SLOPE)
        return torch.tanh(self.conv_post(x))


class HiFiGANTrainStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = TinyGenerator()
        self.mpd = MultiPeriodDiscriminator()
        self.msd = MultiScaleDiscriminator()
        self.mel = MelSpectrogram()

    def forward(self, x, y, y_mel):
        y = y.unsqueeze(1)
        y_g_hat = self.generator(x)
        y_g_hat_mel = self.mel(y_g_hat.squeeze(1))

        # Discriminator
        y_df_hat_r, y_df_hat_g, _, _ = self.mpd(y, y_g_hat.detach())
        loss_disc_f, losses_disc_f_r, losses_disc_f_g = discriminator_loss(y_df_hat_r, y_df_hat_g)
        y_ds_hat_r, y_ds_hat_g, _, _ = self.msd(y, y_g_hat.detach())
        loss_disc_s, losses_disc_s_r, losses_disc_s_g = discriminator_loss(y_ds_hat_r, y_ds_hat_g)
        loss_disc_all = loss_disc_s + loss_disc_f

        # Generator: L1 Mel-Spectrogram Loss
        loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45
        y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = self.mpd(y, y_g_hat)
        y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = self.msd(y, y_g_hat)
        loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
        loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
        loss_gen_f, losses_gen_f = generator_loss(y_df_hat_g)
        loss_gen_s, losses_gen_s = generator_loss(y_ds_hat_g)
        loss_gen_all = loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel
        return loss_disc_all, loss_gen_all, loss_mel.detach()


def build_hifigan_losses():
    torch.manual_seed(1411)
    model = HiFiGANTrainStep()
    g = seeded(1412)
    y = torch.sin(torch.linspace(0, 60, 256))[None].repeat(2, 1) * 0.5 + 0.05 * torch.randn(2, 256, generator=g)
    y_mel = model.mel(y)
    x = y_mel + 0.1 * torch.randn(y_mel.shape, generator=g)
    return model, (x, y, y_mel)


# --------------------------------------------------------------------------- VITS: monotonic alignment search


def maximum_path_each(path, value, t_y, t_x, max_neg_val=-1e9):
    """monotonic_align/core.pyx, one sample: ``value`` [t_y, t_x] is updated in place with the best scores."""
    index = t_x - 1
    for y in range(t_y):
        for x in range(max(0, t_x + y - t_y), min(t_x, y + 1)):
            if x == y:
                v_cur = max_neg_val
            else:
                v_cur = value[y - 1, x]
            if x == 0:
                if y == 0:
                    v_prev = 0.0
                else:
                    v_prev = max_neg_val
            else:
                v_prev = value[y - 1, x - 1]
            value[y, x] += max(v_prev, v_cur)
    for y in range(t_y - 1, -1, -1):
        path[y, index] = 1
        if index != 0 and (index == y or value[y - 1, index] < value[y - 1, index - 1]):  # BREAK: vectorised search over the batch with torch.where
            index = index - 1


@torch.no_grad()
def maximum_path(neg_cent, mask):
    """neg_cent: [b, t_t, t_s]; mask: [b, t_t, t_s]"""
    neg_cent = neg_cent.clone()
    path = torch.zeros_like(neg_cent)
    t_t_max = mask.sum(1)[:, 0].long()
    t_s_max = mask.sum(2)[:, 0].long()
    for i in range(neg_cent.size(0)):
        maximum_path_each(path[i], neg_cent[i], int(t_t_max[i]), int(t_s_max[i]))  # BREAK: vectorised search over the batch with torch.where
    return path


class WN(nn.Module):
    def __init__(self, channels, layers=2):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(channels, 2 * channels, 3, padding=1) for _ in range(layers))

    def forward(self, x, mask):
        for conv in self.convs:
            a, b = conv(x * mask).chunk(2, 1)
            x = x + torch.tanh(a) * torch.sigmoid(b)
        return x * mask


class TextEncoder(nn.Module):
    def __init__(self, n_vocab, out_channels, hidden):
        super().__init__()
        self.emb = nn.Embedding(n_vocab, hidden)
        self.encoder = WN(hidden)
        self.proj = nn.Conv1d(hidden, out_channels * 2, 1)

    def forward(self, x, x_lengths):
        x = self.emb(x).transpose(1, 2) * math.sqrt(self.emb.embedding_dim)
        x_mask = torch.unsqueeze(sequence_mask(x_lengths, x.size(2)), 1).to(x.dtype)
        x = self.encoder(x, x_mask)
        m, logs = torch.split(self.proj(x) * x_mask, self.proj.out_channels // 2, dim=1)
        return x, m, logs, x_mask


class PosteriorEncoder(nn.Module):
    def __init__(self, in_channels, out_channels, hidden):
        super().__init__()
        self.pre = nn.Conv1d(in_channels, hidden, 1)
        self.enc = WN(hidden)
        self.proj = nn.Conv1d(hidden, out_channels * 2, 1)

    def forward(self, x, x_lengths):
        x_mask = torch.unsqueeze(sequence_mask(x_lengths, x.size(2)), 1).to(x.dtype)
        x = self.enc(self.pre(x) * x_mask, x_mask)
        m, logs = torch.split(self.proj(x) * x_mask, self.proj.out_channels // 2, dim=1)
        z = (m + torch.randn_like(m) * torch.exp(logs)) * x_mask
        return z, m, logs, x_mask


class ResidualCouplingLayer(nn.Module):
    def __init__(self, channels, hidden):
        super().__init__()
        self.half = channels // 2
        self.pre = nn.Conv1d(self.half, hidden, 1)
        self.enc = WN(hidden)
        self.post = nn.Conv1d(hidden, self.half, 1)
        self.post.weight.data.zero_()
        self.post.bias.data.zero_()

    def forward(self, x, x_mask):
        x0, x1 = torch.split(x, [self.half] * 2, 1)
        h = self.enc(self.pre(x0) * x_mask, x_mask)
        m = self.post(h) * x_mask
        x1 = m + x1 * x_mask
        return torch.cat([x0, x1], 1).flip(1)


class VITSTrainForward(nn.Module):
    def __init__(self, n_vocab=20, spec_channels=12, inter_channels=4, hidden=16, segment_size=4):
        super().__init__()
        self.enc_p = TextEncoder(n_vocab, inter_channels, hidden)
        self.enc_q = PosteriorEncoder(spec_channels, inter_channels, hidden)
        self.flow = ResidualCouplingLayer(inter_channels, hidden)
        self.dp = nn.Sequential(nn.Conv1d(hidden, hidden, 3, padding=1), nn.ReLU(), nn.Conv1d(hidden, 1, 1))
        self.dec = nn.Sequential(nn.Conv1d(inter_channels, hidden, 3, padding=1), nn.LeakyReLU(0.1), nn.ConvTranspose1d(hidden, 1, 8, 8))
        self.segment_size = segment_size

    def forward(self, x, x_lengths, y, y_lengths):
        x, m_p, logs_p, x_mask = self.enc_p(x, x_lengths)
        z, m_q, logs_q, y_mask = self.enc_q(y, y_lengths)
        z_p = self.flow(z, y_mask)

        with torch.no_grad():
            # negative cross-entropy
            s_p_sq_r = torch.exp(-2 * logs_p)  # [b, d, t]
            neg_cent1 = torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, [1], keepdim=True)  # [b, 1, t_s]
            neg_cent2 = torch.matmul(-0.5 * (z_p**2).transpose(1, 2), s_p_sq_r)  # [b, t_t, d] x [b, d, t_s] = [b, t_t, t_s]
            neg_cent3 = torch.matmul(z_p.transpose(1, 2), (m_p * s_p_sq_r))  # [b, t_t, d] x [b, d, t_s] = [b, t_t, t_s]
            neg_cent4 = torch.sum(-0.5 * (m_p**2) * s_p_sq_r, [1], keepdim=True)  # [b, 1, t_s]
            neg_cent = neg_cent1 + neg_cent2 + neg_cent3 + neg_cent4
            attn_mask = torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1)
            attn = maximum_path(neg_cent, attn_mask.squeeze(1)).unsqueeze(1).detach()

        w = attn.sum(2)
        logw_ = torch.log(w + 1e-6) * x_mask
        logw = self.dp(x.detach()) * x_mask
        l_length = torch.sum((logw - logw_) ** 2, [1, 2]) / torch.sum(x_mask)  # for averaging

        # expand prior
        m_p = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
        logs_p = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)

        z_slice, ids_slice = rand_slice_segments(z, y_lengths, self.segment_size)
        o = self.dec(z_slice)
        kl = torch.sum((logs_p - logs_q - 0.5) + 0.5 * ((z_p - m_p) ** 2) * torch.exp(-2.0 * logs_p) * y_mask) / torch.sum(y_mask)
        return o, l_length, attn, ids_slice, kl


def build_vits_mas():
    torch.manual_seed(1421)
    model = VITSTrainForward()
    g = seeded(1422)
    x_lengths = torch.tensor([5, 4])
    y_lengths = torch.tensor([10, 8])
    x = torch.randint(1, 20, (2, 5), generator=g) * sequence_mask(x_lengths, 5)
    y = torch.randn(2, 12, 10, generator=g) * sequence_mask(y_lengths, 10)[:, None]
    return model, (x, x_lengths, y, y_lengths)
