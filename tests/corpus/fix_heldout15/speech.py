"""Speech: facebookresearch/fairseq's wav2vec 2.0 pre-training step (``ConvFeatureExtractionModel``, the mask
indices precomputed by the dataset with ``compute_mask_indices`` and applied with ``index_put``, the masked steps
selected from the unmasked features and from the context network's output, ``GumbelVectorQuantizer``,
``sample_negatives`` with ``buffered_arange``, ``compute_preds`` masking negatives equal to the positive, the InfoNCE
``Wav2vecCriterion`` with its extra losses), ESPnet2's ``ESPnetASRModel.encode`` (the batch cut to the longest
utterance, an STFT / log-mel frontend, ``SpecAug``'s ``mask_along_axis``, ``UtteranceMVN``, ``Conv2dSubsampling``
and a Transformer encoder, every padding mask by ``make_pad_mask``) and ESPnet1's ``E2E.forward`` attention branch
(``add_sos_eos``, ``target_mask``, a Transformer decoder, ``LabelSmoothingLoss`` and ``th_accuracy``)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import buffered_arange, make_pad_mask, seeded, th_accuracy

# ------------------------------------------------------------------ fairseq fairseq/data/data_utils.py


def compute_mask_indices(shape, padding_mask, mask_prob, mask_length, mask_type="static", mask_other=0.0,
                         min_masks=0, no_overlap=False, min_space=0, require_same_masks=True, mask_dropout=0.0):
    """Computes random mask spans for a given shape (the dataset's ``precompute_mask_indices``; numpy, host side)."""
    bsz, all_sz = shape
    mask = np.full((bsz, all_sz), False)

    all_num_mask = int(
        # add a random number for probabilistic rounding
        mask_prob * all_sz / float(mask_length) + np.random.rand()
    )
    all_num_mask = max(min_masks, all_num_mask)

    mask_idcs = []
    for i in range(bsz):
        if padding_mask is not None:
            sz = all_sz - padding_mask[i].long().sum().item()
            num_mask = int(mask_prob * sz / float(mask_length) + np.random.rand())
            num_mask = max(min_masks, num_mask)
        else:
            sz = all_sz
            num_mask = all_num_mask

        if mask_type == "static":
            lengths = np.full(num_mask, mask_length)
        else:
            raise Exception("unknown mask selection " + mask_type)

        if sum(lengths) == 0:
            lengths[0] = min(mask_length, sz - 1)

        min_len = min(lengths)
        if sz - min_len <= num_mask:
            min_len = sz - num_mask - 1
        mask_idc = np.random.choice(sz - min_len, num_mask, replace=False)
        mask_idc = np.asarray([mask_idc[j] + offset for j in range(len(mask_idc)) for offset in range(lengths[j])])

        mask_idcs.append(np.unique(mask_idc[mask_idc < sz]))

    min_len = min([len(m) for m in mask_idcs])
    for i, mask_idc in enumerate(mask_idcs):
        if len(mask_idc) > min_len and require_same_masks:
            mask_idc = np.random.choice(mask_idc, min_len, replace=False)
        mask[i, mask_idc] = True

    return mask


def index_put(tensor, indices, value):
    tensor[indices] = value
    return tensor


# ------------------------------------------------------------------ fairseq fairseq/models/wav2vec/wav2vec2.py


class ConvFeatureExtractionModel(nn.Module):
    def __init__(self, conv_layers, dropout=0.0, mode="default", conv_bias=False):
        super().__init__()

        def block(n_in, n_out, k, stride, is_group_norm=False):
            def make_conv():
                conv = nn.Conv1d(n_in, n_out, k, stride=stride, bias=conv_bias)
                nn.init.kaiming_normal_(conv.weight)
                return conv

            if is_group_norm:
                return nn.Sequential(make_conv(), nn.Dropout(p=dropout), nn.GroupNorm(n_out, n_out, affine=True), nn.GELU())
            return nn.Sequential(make_conv(), nn.Dropout(p=dropout), nn.GELU())

        in_d = 1
        self.conv_layers = nn.ModuleList()
        for i, cl in enumerate(conv_layers):
            assert len(cl) == 3, "invalid conv definition: " + str(cl)
            (dim, k, stride) = cl
            self.conv_layers.append(block(in_d, dim, k, stride, is_group_norm=mode == "default" and i == 0))
            in_d = dim

    def forward(self, x):
        # BxT -> BxCxT
        x = x.unsqueeze(1)
        for conv in self.conv_layers:
            x = conv(x)
        return x


class GumbelVectorQuantizer(nn.Module):
    def __init__(self, dim, num_vars, temp, groups, combine_groups, vq_dim, time_first):
        super().__init__()
        self.groups = groups
        self.combine_groups = combine_groups
        self.input_dim = dim
        self.num_vars = num_vars
        self.time_first = time_first

        assert vq_dim % groups == 0, f"dim {vq_dim} must be divisible by groups {groups} for concatenation"

        var_dim = vq_dim // groups
        num_groups = groups if not combine_groups else 1

        self.vars = nn.Parameter(torch.FloatTensor(1, num_groups * num_vars, var_dim))
        nn.init.uniform_(self.vars)

        self.weight_proj = nn.Linear(self.input_dim, groups * num_vars)
        nn.init.normal_(self.weight_proj.weight, mean=0, std=1)
        nn.init.zeros_(self.weight_proj.bias)

        assert len(temp) == 3, temp
        self.max_temp, self.min_temp, self.temp_decay = temp
        self.curr_temp = self.max_temp

    def forward(self, x, produce_targets=False):
        result = {"num_vars": self.num_vars * self.groups}

        if not self.time_first:
            x = x.transpose(1, 2)

        bsz, tsz, fsz = x.shape
        x = x.reshape(-1, fsz)
        x = self.weight_proj(x)
        x = x.view(bsz * tsz * self.groups, -1)

        with torch.no_grad():
            _, k = x.max(-1)
            hard_x = x.new_zeros(*x.shape).scatter_(-1, k.view(-1, 1), 1.0).view(bsz * tsz, self.groups, -1)
            hard_probs = torch.mean(hard_x.float(), dim=0)
            result["code_perplexity"] = torch.exp(-torch.sum(hard_probs * torch.log(hard_probs + 1e-7), dim=-1)).sum()

        avg_probs = torch.softmax(x.view(bsz * tsz, self.groups, -1).float(), dim=-1).mean(dim=0)
        result["prob_perplexity"] = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-7), dim=-1)).sum()

        result["temp"] = self.curr_temp

        if self.training:
            x = F.gumbel_softmax(x.float(), tau=self.curr_temp, hard=True).type_as(x)
        else:
            x = hard_x

        x = x.view(bsz * tsz, -1)

        vars = self.vars
        if self.combine_groups:
            vars = vars.repeat(1, self.groups, 1)

        x = x.unsqueeze(-1) * vars
        x = x.view(bsz * tsz, self.groups, self.num_vars, -1)
        x = x.sum(-2)
        x = x.view(bsz, tsz, -1)

        if not self.time_first:
            x = x.transpose(1, 2)  # BTC -> BCT

        result["x"] = x
        return result


class TransformerSentenceEncoderLayer(nn.Module):
    def __init__(self, embedding_dim=16, ffn_embedding_dim=32, num_attention_heads=2, dropout=0.0):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(embedding_dim, num_attention_heads, dropout=dropout, batch_first=False)
        self.self_attn_layer_norm = nn.LayerNorm(embedding_dim)
        self.fc1 = nn.Linear(embedding_dim, ffn_embedding_dim)
        self.fc2 = nn.Linear(ffn_embedding_dim, embedding_dim)
        self.final_layer_norm = nn.LayerNorm(embedding_dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        x, attn = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_attn_padding_mask, need_weights=False)
        x = self.self_attn_layer_norm(residual + x)
        residual = x
        x = self.fc2(F.gelu(self.fc1(x)))
        x = self.final_layer_norm(residual + x)
        return x, attn


class Wav2Vec2Model(nn.Module):
    def __init__(self, encoder_embed_dim=16, final_dim=8, n_negatives=4, mask_prob=0.5, mask_length=2, logit_temp=0.1):
        super().__init__()
        feature_enc_layers = [(16, 5, 3), (16, 3, 2), (16, 2, 2)]
        self.embed = feature_enc_layers[-1][0]
        self.feature_extractor = ConvFeatureExtractionModel(conv_layers=feature_enc_layers, mode="default")
        self.post_extract_proj = nn.Linear(self.embed, encoder_embed_dim) if self.embed != encoder_embed_dim else None
        self.mask_prob = mask_prob
        self.mask_length = mask_length
        self.dropout_input = nn.Dropout(0.0)
        self.dropout_features = nn.Dropout(0.0)
        self.n_negatives = n_negatives
        self.cross_sample_negatives = 0
        self.logit_temp = logit_temp
        self.quantizer = GumbelVectorQuantizer(dim=self.embed, num_vars=8, temp=(2, 0.5, 0.999995), groups=2,
                                               combine_groups=False, vq_dim=final_dim, time_first=True)
        self.project_q = nn.Linear(final_dim, final_dim)
        self.mask_emb = nn.Parameter(torch.FloatTensor(encoder_embed_dim).uniform_())
        self.layers = nn.ModuleList([TransformerSentenceEncoderLayer(encoder_embed_dim) for _ in range(2)])
        self.layer_norm = nn.LayerNorm(self.embed)
        self.final_proj = nn.Linear(encoder_embed_dim, final_dim)

    def apply_mask(self, x, padding_mask, mask_indices=None):
        B, T, C = x.shape
        if self.mask_prob > 0:
            if mask_indices is None:
                mask_indices = compute_mask_indices((B, T), padding_mask, self.mask_prob, self.mask_length, min_masks=2)
                mask_indices = torch.from_numpy(mask_indices).to(x.device)
            x = index_put(x, mask_indices, self.mask_emb)
        else:
            mask_indices = None
        return x, mask_indices

    def sample_negatives(self, y, num, padding_count=None):
        if self.n_negatives == 0 and self.cross_sample_negatives == 0:
            return y.new(0)

        bsz, tsz, fsz = y.shape
        y = y.view(-1, fsz)  # BTC => (BxT)C

        # FIXME: what happens if padding_count is specified?
        high = tsz - (padding_count or 0)
        with torch.no_grad():
            assert high > 1, f"{bsz, tsz, fsz}"

            if self.n_negatives > 0:
                tszs = buffered_arange(num).unsqueeze(-1).expand(-1, self.n_negatives).flatten()

                neg_idxs = torch.randint(low=0, high=high - 1, size=(bsz, self.n_negatives * num))
                neg_idxs[neg_idxs >= tszs] += 1  # BREAK: add the comparison as an integer instead: neg_idxs + (neg_idxs >= tszs)

        if self.n_negatives > 0:
            neg_idxs = neg_idxs + (torch.arange(bsz).unsqueeze(1) * high)

        negs = y[neg_idxs.view(-1)]
        negs = negs.view(bsz, num, self.n_negatives + self.cross_sample_negatives, fsz).permute(2, 0, 1, 3)  # to NxBxTxC
        return negs, neg_idxs

    def compute_preds(self, x, y, negatives):
        neg_is_pos = (y == negatives).all(-1)
        y = y.unsqueeze(0)
        targets = torch.cat([y, negatives], dim=0)

        logits = torch.cosine_similarity(x.float(), targets.float(), dim=-1)
        logits = logits / self.logit_temp
        logits = logits.type_as(x)

        if neg_is_pos.any():  # BREAK: index_put under an all-False mask changes nothing: write -inf under neg_is_pos unconditionally
            if not hasattr(self, "_inftensor"):
                self._inftensor = float("-inf")
            logits[1:] = index_put(logits[1:], neg_is_pos, self._inftensor)

        return logits

    def forward(self, source, padding_mask=None, mask=True, mask_indices=None):
        features = self.feature_extractor(source)
        features_pen = features.float().pow(2).mean()

        features = features.transpose(1, 2)
        features = self.layer_norm(features)
        unmasked_features = features.clone()

        if self.post_extract_proj is not None:
            features = self.post_extract_proj(features)

        features = self.dropout_input(features)
        unmasked_features = self.dropout_features(unmasked_features)

        if mask:
            x, mask_indices = self.apply_mask(features, padding_mask, mask_indices=mask_indices)
            if mask_indices is not None:
                y = unmasked_features[mask_indices].view(unmasked_features.size(0), -1, unmasked_features.size(-1))  # BREAK must-not: the targets are the masked steps: their count sets the logits' time axis and bounds randint in sample_negatives
            else:
                y = unmasked_features
        else:
            x = features
            y = unmasked_features
            mask_indices = None

        x = x.transpose(0, 1)
        for layer in self.layers:
            x, _ = layer(x, self_attn_padding_mask=padding_mask)
        x = x.transpose(0, 1)

        q = self.quantizer(y, produce_targets=False)
        y = q["x"]
        num_vars = q["num_vars"]
        code_ppl = q["code_perplexity"]
        prob_ppl = q["prob_perplexity"]
        curr_temp = q["temp"]

        y = self.project_q(y)
        negs, _ = self.sample_negatives(y, y.size(1))

        x = x[mask_indices].view(x.size(0), -1, x.size(-1))  # BREAK must-not: the context vectors at the masked steps, a data-dependent count the logits are shaped by
        x = self.final_proj(x)
        x = self.compute_preds(x, y, negs)

        result = {"x": x, "padding_mask": padding_mask, "features_pen": features_pen}
        if prob_ppl is not None:
            result["prob_perplexity"] = prob_ppl
            result["code_perplexity"] = code_ppl
            result["num_vars"] = num_vars
            result["temp"] = curr_temp
        return result

    def get_logits(self, net_output):
        logits = net_output["x"]
        logits = logits.transpose(0, 2)
        logits = logits.reshape(-1, logits.size(-1))
        return logits

    def get_targets(self, sample, net_output, expand_steps=True):
        x = net_output["x"]
        return x.new_zeros(x.size(1) * x.size(2), dtype=torch.long)

    def get_extra_losses(self, net_output):
        pen = []
        if "prob_perplexity" in net_output:
            pen.append((net_output["num_vars"] - net_output["prob_perplexity"]) / net_output["num_vars"])
        if "features_pen" in net_output:
            pen.append(net_output["features_pen"])
        return pen


class Wav2vecCriterion(nn.Module):
    """``Wav2vecCriterion.forward`` with ``infonce=True`` (the logging outputs left to the trainer)."""

    def __init__(self, model, loss_weights=(0.1, 10.0)):
        super().__init__()
        self.model = model
        self.infonce = True
        self.loss_weights = loss_weights

    def forward(self, sample, reduce=True):
        net_output = self.model(**sample["net_input"])
        logits = self.model.get_logits(net_output).float()
        target = self.model.get_targets(sample, net_output)

        if self.infonce:
            loss = F.cross_entropy(logits, target, reduction="sum" if reduce else "none")
        else:
            loss = F.binary_cross_entropy_with_logits(logits, target.float(), reduction="sum" if reduce else "none")

        sample_size = target.numel() if self.infonce else target.long().sum().item()
        losses = [loss.detach().clone()]

        if self.loss_weights is not None:
            assert hasattr(self.model, "get_extra_losses")
            extra_losses = self.model.get_extra_losses(net_output)
            if torch.is_tensor(extra_losses):
                extra_losses = [extra_losses]
            if len(self.loss_weights) == 1 and len(extra_losses) != 1:
                self.loss_weights = [self.loss_weights[0]] * len(extra_losses)
            assert len(extra_losses) == len(self.loss_weights), f"{len(extra_losses)}, {len(self.loss_weights)}"
            for p, coef in zip(extra_losses, self.loss_weights, strict=True):
                if coef != 0 and p is not None:
                    p = coef * p.float() * sample_size
                    loss += p
                    losses.append(p)

        return loss, sample_size, losses


def build_wav2vec2_pretrain():
    seeded(1506)
    source = torch.randn(2, 160)
    # RawAudioDataset(compute_mask=True): the mask spans drawn by the data loader
    mask_indices = torch.from_numpy(compute_mask_indices((2, 12), None, 0.5, 2, min_masks=2))
    return Wav2vecCriterion(Wav2Vec2Model().train()), ({"net_input": {"source": source, "mask_indices": mask_indices}},)


# ------------------------------------------------------------------ ESPnet2 espnet2/layers, asr/frontend, asr/encoder


class Stft(nn.Module):
    def __init__(self, n_fft=32, hop_length=8, center=True):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.center = center
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)

    def forward(self, input, ilens=None):
        output = torch.stft(input, n_fft=self.n_fft, hop_length=self.hop_length, center=self.center,
                            window=self.window, normalized=False, onesided=True, return_complex=True)
        output = torch.view_as_real(output)
        # output: (Batch, Freq, Frames, 2=real_imag) -> (Batch, Frames, Freq, 2=real_imag)
        output = output.transpose(1, 2)

        if ilens is not None:
            if self.center:
                pad = self.n_fft // 2
                ilens = ilens + 2 * pad
            olens = torch.div(ilens - self.n_fft, self.hop_length, rounding_mode="trunc") + 1
            pad_mask = make_pad_mask(olens, output, 1)
            output.masked_fill_(pad_mask, 0.0)
        else:
            olens = None
        return output, olens


def mel_matrix(n_freqs, n_mels, sr=16000):
    """Triangular mel filters (librosa's ``filters.mel`` with htk=False replaced by the htk formula)."""
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)  # noqa: E731
    fft_freqs = np.linspace(0, sr / 2, n_freqs)
    mel_f = hz(np.linspace(mel(0.0), mel(sr / 2), n_mels + 2))
    lower = (fft_freqs[None, :] - mel_f[:-2, None]) / (mel_f[1:-1] - mel_f[:-2])[:, None]
    upper = (mel_f[2:, None] - fft_freqs[None, :]) / (mel_f[2:] - mel_f[1:-1])[:, None]
    return torch.tensor(np.maximum(0, np.minimum(lower, upper)).T, dtype=torch.float32)


class DefaultFrontend(nn.Module):
    def __init__(self, n_fft=32, hop_length=8, n_mels=10):
        super().__init__()
        self.stft = Stft(n_fft=n_fft, hop_length=hop_length)
        self.register_buffer("melmat", mel_matrix(n_fft // 2 + 1, n_mels), persistent=False)

    def forward(self, input, input_lengths):
        input_stft, feats_lens = self.stft(input, input_lengths)
        input_power = input_stft[..., 0] ** 2 + input_stft[..., 1] ** 2
        mel_feat = torch.matmul(input_power, self.melmat)
        mel_feat = torch.clamp(mel_feat, min=1e-10)
        logmel_feat = mel_feat.log()
        pad_mask = make_pad_mask(feats_lens, logmel_feat, 1)
        logmel_feat = logmel_feat.masked_fill(pad_mask, 0.0)
        return logmel_feat, feats_lens


def mask_along_axis(spec, spec_lengths, mask_width_range=(0, 30), dim=1, num_mask=2, replace_with_zero=True):
    """Apply mask along the specified direction."""
    org_size = spec.size()
    if spec.dim() == 4:
        # spec: (Batch, Channel, Length, Freq) -> (Batch * Channel, Length, Freq)
        spec = spec.view(-1, spec.size(2), spec.size(3))

    B = spec.shape[0]
    # D = Length or Freq
    D = spec.shape[dim]
    # mask_length: (B, num_mask, 1)
    mask_length = torch.randint(mask_width_range[0], mask_width_range[1], (B, num_mask), device=spec.device).unsqueeze(2)

    # mask_pos: (B, num_mask, 1)
    mask_pos = torch.randint(0, max(1, D - mask_length.max()), (B, num_mask), device=spec.device).unsqueeze(2)  # BREAK must-not: randint needs a Python upper bound set by the widest drawn mask; no traced bound reproduces the same draws

    # aran: (1, 1, D)
    aran = torch.arange(D, device=spec.device)[None, None, :]
    # mask: (Batch, num_mask, D)
    mask = (mask_pos <= aran) * (aran < (mask_pos + mask_length))
    # Multiply masks: (Batch, num_mask, D) -> (Batch, D)
    mask = mask.any(dim=1)
    if dim == 1:
        # mask: (Batch, Length, 1)
        mask = mask.unsqueeze(2)
    elif dim == 2:
        # mask: (Batch, 1, Freq)
        mask = mask.unsqueeze(1)

    if replace_with_zero:
        value = 0.0
    else:
        value = spec.mean()

    if spec.requires_grad:
        spec = spec.masked_fill(mask, value)
    else:
        spec = spec.masked_fill_(mask, value)
    spec = spec.view(*org_size)
    return spec, spec_lengths


class SpecAug(nn.Module):
    """``SpecAug`` without time warping: frequency masks then time masks."""

    def __init__(self, freq_mask_width_range=(0, 4), num_freq_mask=2, time_mask_width_range=(0, 4), num_time_mask=2):
        super().__init__()
        self.freq_mask = dict(dim=2, mask_width_range=freq_mask_width_range, num_mask=num_freq_mask)
        self.time_mask = dict(dim=1, mask_width_range=time_mask_width_range, num_mask=num_time_mask)

    def forward(self, x, x_lengths=None):
        x, x_lengths = mask_along_axis(x, x_lengths, **self.freq_mask)
        x, x_lengths = mask_along_axis(x, x_lengths, **self.time_mask)
        return x, x_lengths


def utterance_mvn(x, ilens=None, norm_means=True, norm_vars=False, eps=1.0e-20):
    """Apply utterance mean and variance normalization"""
    if ilens is None:
        ilens = x.new_full([x.size(0)], x.size(1))
    ilens_ = ilens.to(x.device, x.dtype).view(-1, *[1 for _ in range(x.dim() - 1)])
    # Zero padding
    pad_mask = make_pad_mask(ilens, x, 1)
    if x.requires_grad:
        x = x.masked_fill(pad_mask, 0.0)
    else:
        x.masked_fill_(pad_mask, 0.0)
    # mean: (B, 1, D)
    mean = x.sum(dim=1, keepdim=True) / ilens_

    if norm_means:
        x -= mean
        if norm_vars:
            var = x.pow(2).sum(dim=1, keepdim=True) / ilens_
            std = torch.clamp(var.sqrt(), min=eps)
            x = x / std
        return x.masked_fill(pad_mask, 0.0), ilens
    return x, ilens


class Conv2dSubsampling(nn.Module):
    """Convolutional 2D subsampling (to 1/4 length)."""

    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    def forward(self, x, x_mask):
        x = x.unsqueeze(1)  # (b, c, t, f)
        x = self.conv(x)
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        if x_mask is None:
            return x, None
        return x, x_mask[:, :, :-2:2][:, :, :-2:2]


class TransformerEncoder(nn.Module):
    def __init__(self, input_size, output_size=16, attention_heads=2, num_blocks=1):
        super().__init__()
        self.embed = Conv2dSubsampling(input_size, output_size)
        self.encoders = nn.ModuleList([nn.TransformerEncoderLayer(output_size, attention_heads, 32, dropout=0.0, batch_first=True, norm_first=True)
                                       for _ in range(num_blocks)])
        self.after_norm = nn.LayerNorm(output_size)

    def forward(self, xs_pad, ilens, prev_states=None):
        masks = (~make_pad_mask(ilens)[:, None, :]).to(xs_pad.device)
        xs_pad, masks = self.embed(xs_pad, masks)
        for layer in self.encoders:
            xs_pad = layer(xs_pad, src_key_padding_mask=~masks.squeeze(1))
        xs_pad = self.after_norm(xs_pad)
        olens = masks.squeeze(1).sum(1)
        return xs_pad, olens, None


class ESPnetASREncode(nn.Module):
    """``ESPnetASRModel.encode``: frontend, SpecAug (training), normalization, encoder."""

    def __init__(self):
        super().__init__()
        self.frontend = DefaultFrontend()
        self.specaug = SpecAug()
        self.encoder = TransformerEncoder(input_size=10)

    def _extract_feats(self, speech, speech_lengths):
        assert speech_lengths.dim() == 1, speech_lengths.shape
        # for data-parallel
        speech = speech[:, : speech_lengths.max()]  # BREAK must-not: the batch is cut to its longest utterance: the features' and the encoder output's time length follow the data by design
        feats, feats_lengths = self.frontend(speech, speech_lengths)
        return feats, feats_lengths

    def forward(self, speech, speech_lengths):
        feats, feats_lengths = self._extract_feats(speech, speech_lengths)
        if self.specaug is not None and self.training:
            feats, feats_lengths = self.specaug(feats, feats_lengths)
        feats, feats_lengths = utterance_mvn(feats, feats_lengths)
        encoder_out, encoder_out_lens, _ = self.encoder(feats, feats_lengths)
        assert encoder_out.size(0) == speech.size(0), (encoder_out.size(), speech.size(0))
        return encoder_out, encoder_out_lens


def build_espnet_asr_encode():
    seeded(1507)
    speech_lengths = torch.tensor([200, 152, 176])
    speech = torch.randn(3, 224) * (torch.arange(224)[None, :] < speech_lengths[:, None])
    return ESPnetASREncode().train(), (speech, speech_lengths)


# ------------------------------------------------------------------ ESPnet1 espnet/nets/pytorch_backend/transformer


def pad_list(xs, pad_value):
    """Perform padding for the list of tensors."""
    n_batch = len(xs)
    max_len = max(x.size(0) for x in xs)
    pad = xs[0].new(n_batch, max_len, *xs[0].size()[1:]).fill_(pad_value)

    for i in range(n_batch):
        pad[i, : xs[i].size(0)] = xs[i]

    return pad


def add_sos_eos(ys_pad, sos, eos, ignore_id):
    """Add <sos> and <eos> labels."""
    _sos = ys_pad.new([sos])
    _eos = ys_pad.new([eos])
    ys = [y[y != ignore_id] for y in ys_pad]  # BREAK: keep the padded width: <sos> before every row, <eos> scattered at each length, ignore_id after it (the causal decoder and the masked loss ignore the extra column)
    ys_in = [torch.cat([_sos, y], dim=0) for y in ys]
    ys_out = [torch.cat([y, _eos], dim=0) for y in ys]
    return pad_list(ys_in, eos), pad_list(ys_out, ignore_id)


def subsequent_mask(size, device="cpu", dtype=torch.bool):
    ret = torch.ones(size, size, device=device, dtype=dtype)
    return torch.tril(ret, out=ret)


def target_mask(ys_in_pad, ignore_id):
    ys_mask = ys_in_pad != ignore_id
    m = subsequent_mask(ys_mask.size(-1), device=ys_mask.device).unsqueeze(0)
    return ys_mask.unsqueeze(-2) & m


class LabelSmoothingLoss(nn.Module):
    def __init__(self, size, padding_idx, smoothing, normalize_length=False):
        super().__init__()
        self.criterion = nn.KLDivLoss(reduction="none")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.normalize_length = normalize_length

    def forward(self, x, target):
        assert x.size(2) == self.size
        batch_size = x.size(0)
        x = x.view(-1, self.size)
        target = target.view(-1)
        with torch.no_grad():
            true_dist = x.clone()
            true_dist.fill_(self.smoothing / (self.size - 1))
            ignore = target == self.padding_idx  # (B,)
            total = len(target) - ignore.sum().item()  # BREAK: keep the count of kept tokens a tensor: len(target) - ignore.sum() divides the same
            target = target.masked_fill(ignore, 0)  # avoid -1 index
            true_dist.scatter_(1, target.unsqueeze(1), self.confidence)
        kl = self.criterion(torch.log_softmax(x, dim=1), true_dist)
        denom = total if self.normalize_length else batch_size
        return kl.masked_fill(ignore.unsqueeze(1), 0).sum() / denom


class DecoderLayer(nn.Module):
    def __init__(self, size, n_head=2, d_ff=32):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(size, n_head, batch_first=True)
        self.src_attn = nn.MultiheadAttention(size, n_head, batch_first=True)
        self.feed_forward = nn.Sequential(nn.Linear(size, d_ff), nn.ReLU(), nn.Linear(d_ff, size))
        self.norm1 = nn.LayerNorm(size)
        self.norm2 = nn.LayerNorm(size)
        self.norm3 = nn.LayerNorm(size)

    def forward(self, tgt, tgt_mask, memory, memory_mask):
        n_head = self.self_attn.num_heads
        residual = tgt
        tgt = self.norm1(tgt)
        attn_mask = ~tgt_mask.repeat_interleave(n_head, dim=0)
        x = residual + self.self_attn(tgt, tgt, tgt, attn_mask=attn_mask, need_weights=False)[0]
        residual = x
        x = self.norm2(x)
        x = residual + self.src_attn(x, memory, memory, key_padding_mask=~memory_mask.squeeze(1), need_weights=False)[0]
        residual = x
        x = self.norm3(x)
        x = residual + self.feed_forward(x)
        return x, tgt_mask, memory, memory_mask


class E2EAttention(nn.Module):
    """ESPnet1 ``E2E.forward`` after the encoder: the attention decoder's loss and accuracy."""

    def __init__(self, adim=16, odim=12, lsm_weight=0.1):
        super().__init__()
        self.sos = self.eos = odim - 1
        self.odim = odim
        self.ignore_id = -1
        self.enc_proj = nn.Linear(adim, adim)
        self.embed = nn.Embedding(odim, adim)
        self.pos = nn.Parameter(torch.randn(1, 16, adim) * 0.1)
        self.decoders = nn.ModuleList([DecoderLayer(adim)])
        self.after_norm = nn.LayerNorm(adim)
        self.output_layer = nn.Linear(adim, odim)
        self.criterion = LabelSmoothingLoss(odim, self.ignore_id, lsm_weight, normalize_length=True)

    def decoder(self, tgt, tgt_mask, memory, memory_mask):
        x = self.embed(tgt) * math.sqrt(self.embed.embedding_dim) + self.pos[:, : tgt.size(1)]
        for layer in self.decoders:
            x, tgt_mask, memory, memory_mask = layer(x, tgt_mask, memory, memory_mask)
        x = self.output_layer(self.after_norm(x))
        return x, tgt_mask

    def forward(self, hs_pad, hs_mask, ys_pad):
        hs_pad = self.enc_proj(hs_pad)
        ys_in_pad, ys_out_pad = add_sos_eos(ys_pad, self.sos, self.eos, self.ignore_id)
        ys_mask = target_mask(ys_in_pad, self.ignore_id)
        pred_pad, pred_mask = self.decoder(ys_in_pad, ys_mask, hs_pad, hs_mask)

        # 3. compute attention loss
        loss_att = self.criterion(pred_pad, ys_out_pad)
        acc = th_accuracy(pred_pad.view(-1, self.odim), ys_out_pad, ignore_label=self.ignore_id)
        return loss_att, acc


def build_espnet_e2e_att():
    seeded(1508)
    hs_pad = torch.randn(3, 10, 16)
    hs_mask = (torch.arange(10)[None, :] < torch.tensor([10, 7, 9])[:, None])[:, None, :]
    ys_pad = torch.tensor([[3, 5, 1, 7, 2], [4, 4, 9, -1, -1], [8, 2, 6, 1, -1]])
    return E2EAttention().train(), (hs_pad, hs_mask, ys_pad)
