"""Speaker verification: speechbrain/speechbrain's VoxCeleb ``speaker_verification_cosine.py`` -- ``compute_embedding``
through ``InputNormalization`` (sentence mean normalisation over each utterance's unpadded frames) and a small
``ECAPA_TDNN`` (``TDNNBlock``, ``Res2NetBlock``, ``SEBlock`` and ``AttentiveStatisticsPooling`` masked by
``length_to_mask``, the blocks called with ``lengths`` unless they raise ``TypeError``), ``get_verification_scores``
over the trial list written to the score file, and ``utils.metric_stats.EER`` (candidate thresholds from
``torch.unique``, the minimum's index, the float results)."""

from __future__ import annotations

import io

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ speechbrain/dataio/dataio.py, processing/features.py


def length_to_mask(length, max_len=None, dtype=None, device=None):
    assert len(length.shape) == 1

    if max_len is None:
        max_len = length.max().long().item()  # using arange to generate mask
    mask = torch.arange(max_len, device=length.device, dtype=length.dtype).expand(len(length), max_len) < length.unsqueeze(1)

    if dtype is None:
        dtype = length.dtype

    if device is None:
        device = length.device

    mask = torch.as_tensor(mask, dtype=dtype, device=device)
    return mask


class InputNormalization(nn.Module):
    def __init__(self, mean_norm=True, std_norm=False, norm_type="sentence"):
        super().__init__()
        self.mean_norm = mean_norm
        self.std_norm = std_norm
        self.norm_type = norm_type
        self.eps = 1e-10

    def forward(self, x, lengths):
        N_batches = x.shape[0]

        for snt_id in range(N_batches):
            # Avoiding padded time steps
            actual_size = torch.round(lengths[snt_id] * x.shape[1]).int()

            # computing statistics
            current_mean, current_std = self._compute_current_stats(x[snt_id, 0:actual_size, ...])  # BREAK: the statistics over the unpadded frames as masked sums (a frame-index mask below actual_size) instead of a slice

            if self.norm_type == "sentence":
                x[snt_id] = (x[snt_id] - current_mean.data) / current_std.data
        return x

    def _compute_current_stats(self, x):
        # Compute current mean
        if self.mean_norm:
            current_mean = torch.mean(x, dim=0).detach().data
        else:
            current_mean = torch.tensor([0.0], device=x.device)

        # Compute current std
        if self.std_norm:
            current_std = torch.std(x, dim=0).detach().data
        else:
            current_std = torch.tensor([1.0], device=x.device)

        # Improving numerical stability of std
        current_std = torch.max(current_std, self.eps * torch.ones_like(current_std))
        return current_mean, current_std


# ------------------------------------------------------------------ speechbrain/lobes/models/ECAPA_TDNN.py


class TDNNBlock(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation, groups=1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups, padding=dilation * (kernel_size - 1) // 2)
        self.activation = nn.ReLU()
        self.norm = nn.BatchNorm1d(out_channels)

    def forward(self, x):
        return self.norm(self.activation(self.conv(x)))


class Res2NetBlock(nn.Module):
    def __init__(self, in_channels, out_channels, scale=4, kernel_size=3, dilation=1):
        super().__init__()
        in_channel = in_channels // scale
        hidden_channel = out_channels // scale
        self.blocks = nn.ModuleList([TDNNBlock(in_channel, hidden_channel, kernel_size=kernel_size, dilation=dilation) for _ in range(scale - 1)])
        self.scale = scale

    def forward(self, x):
        y = []
        for i, x_i in enumerate(torch.chunk(x, self.scale, dim=1)):
            if i == 0:
                y_i = x_i
            elif i == 1:
                y_i = self.blocks[i - 1](x_i)
            else:
                y_i = self.blocks[i - 1](x_i + y_i)
            y.append(y_i)
        return torch.cat(y, dim=1)


class SEBlock(nn.Module):
    def __init__(self, in_channels, se_channels, out_channels):
        super().__init__()
        self.conv1 = nn.Conv1d(in_channels, se_channels, 1)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv1d(se_channels, out_channels, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x, lengths=None):
        L = x.shape[-1]
        if lengths is not None:
            mask = length_to_mask(lengths * L, max_len=L, device=x.device)
            mask = mask.unsqueeze(1)
            total = mask.sum(dim=2, keepdim=True)
            s = (x * mask).sum(dim=2, keepdim=True) / total
        else:
            s = x.mean(dim=2, keepdim=True)

        s = self.relu(self.conv1(s))
        s = self.sigmoid(self.conv2(s))
        return s * x


class SERes2NetBlock(nn.Module):
    def __init__(self, in_channels, out_channels, res2net_scale=4, se_channels=8, kernel_size=3, dilation=1):
        super().__init__()
        self.out_channels = out_channels
        self.tdnn1 = TDNNBlock(in_channels, out_channels, kernel_size=1, dilation=1)
        self.res2net_block = Res2NetBlock(out_channels, out_channels, res2net_scale, kernel_size, dilation)
        self.tdnn2 = TDNNBlock(out_channels, out_channels, kernel_size=1, dilation=1)
        self.se_block = SEBlock(out_channels, se_channels, out_channels)

    def forward(self, x, lengths=None):
        residual = x
        x = self.tdnn1(x)
        x = self.res2net_block(x)
        x = self.tdnn2(x)
        x = self.se_block(x, lengths)
        return x + residual


class AttentiveStatisticsPooling(nn.Module):
    def __init__(self, channels, attention_channels=8, global_context=True):
        super().__init__()
        self.eps = 1e-12
        self.global_context = global_context
        if global_context:
            self.tdnn = TDNNBlock(channels * 3, attention_channels, 1, 1)
        else:
            self.tdnn = TDNNBlock(channels, attention_channels, 1, 1)
        self.tanh = nn.Tanh()
        self.conv = nn.Conv1d(attention_channels, channels, 1)

    def forward(self, x, lengths=None):
        L = x.shape[-1]

        def _compute_statistics(x, m, dim=2, eps=self.eps):
            mean = (m * x).sum(dim)
            std = torch.sqrt((m * (x - mean.unsqueeze(dim)).pow(2)).sum(dim).clamp(eps))
            return mean, std

        if lengths is None:
            lengths = torch.ones(x.shape[0], device=x.device)

        # Make binary mask of shape [N, 1, L]
        mask = length_to_mask(lengths * L, max_len=L, device=x.device)
        mask = mask.unsqueeze(1)

        # Expand the temporal context of the pooling layer by allowing the
        # self-attention to look at global properties of the utterance.
        if self.global_context:
            # torch.std is unstable for backward computation
            # https://github.com/pytorch/pytorch/issues/4320
            total = mask.sum(dim=2, keepdim=True).float()
            mean, std = _compute_statistics(x, mask / total)
            mean = mean.unsqueeze(2).repeat(1, 1, L)
            std = std.unsqueeze(2).repeat(1, 1, L)
            attn = torch.cat([x, mean, std], dim=1)
        else:
            attn = x

        # Apply layers
        attn = self.conv(self.tanh(self.tdnn(attn)))

        # Filter out zero-paddings
        attn = attn.masked_fill(mask == 0, float("-inf"))

        attn = F.softmax(attn, dim=2)
        mean, std = _compute_statistics(x, attn)
        # Append mean and std of the batch
        pooled_stats = torch.cat((mean, std), dim=1)
        pooled_stats = pooled_stats.unsqueeze(2)
        return pooled_stats


class ECAPA_TDNN(nn.Module):
    def __init__(self, input_size, lin_neurons=16, channels=(16, 16, 16, 48), kernel_sizes=(5, 3, 3, 1), dilations=(1, 2, 3, 1)):
        super().__init__()
        self.blocks = nn.ModuleList()
        self.blocks.append(TDNNBlock(input_size, channels[0], kernel_sizes[0], dilations[0]))
        for i in range(1, len(channels) - 1):
            self.blocks.append(SERes2NetBlock(channels[i - 1], channels[i], kernel_size=kernel_sizes[i], dilation=dilations[i]))
        self.mfa = TDNNBlock(channels[-2] * (len(channels) - 2), channels[-1], kernel_sizes[-1], dilations[-1])
        self.asp = AttentiveStatisticsPooling(channels[-1])
        self.asp_bn = nn.BatchNorm1d(channels[-1] * 2)
        self.fc = nn.Conv1d(channels[-1] * 2, lin_neurons, kernel_size=1)

    def forward(self, x, lengths=None):
        # Minimize transpose for efficiency
        x = x.transpose(1, 2)

        xl = []
        for layer in self.blocks:
            try:
                x = layer(x, lengths=lengths)  # BREAK: only the SE-Res2Net blocks take lengths: choose the call by the layer's type instead of catching the TypeError
            except TypeError:
                x = layer(x)
            xl.append(x)

        # Multi-layer feature aggregation
        x = torch.cat(xl[1:], dim=1)
        x = self.mfa(x)

        # Attentive Statistical Pooling
        x = self.asp(x, lengths=lengths)
        x = self.asp_bn(x)

        # Final linear transformation
        x = self.fc(x)

        x = x.transpose(1, 2)
        return x


# ------------------------------------------------------------------ speechbrain/utils/metric_stats.py


def EER(positive_scores, negative_scores):
    # Computing candidate thresholds
    thresholds, _ = torch.sort(torch.cat([positive_scores, negative_scores]))
    thresholds = torch.unique(thresholds)  # BREAK: duplicated candidates give the same rates and argmin keeps the first: sort without the unique

    # Adding intermediate thresholds
    intermediate_thresholds = (thresholds[0:-1] + thresholds[1:]) / 2
    thresholds, _ = torch.sort(torch.cat([thresholds, intermediate_thresholds]))

    # Computing False Rejection Rate (miss detection)
    positive_scores = torch.cat(len(thresholds) * [positive_scores.unsqueeze(0)])
    pos_scores_threshold = positive_scores.transpose(0, 1) <= thresholds
    FRR = (pos_scores_threshold.sum(0)).float() / positive_scores.shape[1]
    del positive_scores
    del pos_scores_threshold

    # Computing False Acceptance Rate (false alarm)
    negative_scores = torch.cat(len(thresholds) * [negative_scores.unsqueeze(0)])
    neg_scores_threshold = negative_scores.transpose(0, 1) > thresholds
    FAR = (neg_scores_threshold.sum(0)).float() / negative_scores.shape[1]
    del negative_scores
    del neg_scores_threshold

    # Finding the threshold for EER
    min_index = (FAR - FRR).abs().argmin()

    # It is possible that eer != fpr != fnr. We return (FAR  + FRR) / 2 as EER.
    EER = (FAR[min_index] + FRR[min_index]) / 2  # BREAK: indexing by a 0-d index tensor reads it back: gather (index_select) at min_index instead

    return float(EER), float(thresholds[min_index])  # BREAK must-not: the EER and its threshold are returned as Python floats


# ------------------------------------------------------------------ recipes/VoxCeleb/SpeakerRec/speaker_verification_cosine.py


class ComputeEmbedding(nn.Module):
    """``compute_embedding`` on a padded batch of Fbank features (the recipe's ``compute_embedding_loop`` body)."""

    def __init__(self, n_mels=12):
        super().__init__()
        self.mean_var_norm = InputNormalization(norm_type="sentence", std_norm=False)
        self.embedding_model = ECAPA_TDNN(n_mels)

    def forward(self, feats, wav_lens):
        with torch.no_grad():
            feats = self.mean_var_norm(feats, wav_lens)
            embeddings = self.embedding_model(feats, wav_lens)
        return embeddings.squeeze(1)


class VerificationScores(nn.Module):
    """``get_verification_scores`` over the trial list (cosine, no score normalisation), then ``EER``."""

    def __init__(self):
        super().__init__()
        self.similarity = torch.nn.CosineSimilarity(dim=-1, eps=1e-6)

    def get_verification_scores(self, veri_test, enrol_dict, test_dict, s_file):
        positive_scores = []
        negative_scores = []
        for i, line in enumerate(veri_test):  # noqa: B007
            # Reading verification file (enrol_file test_file label)
            lab_pair = int(line.split(" ")[0].rstrip().split(".")[0].strip())
            enrol_id = line.split(" ")[1].rstrip().split(".")[0].strip()
            test_id = line.split(" ")[2].rstrip().split(".")[0].strip()
            enrol = enrol_dict[enrol_id]
            test = test_dict[test_id]

            # Compute the score for the given sentence
            score = self.similarity(enrol, test)[0]

            # write score file
            s_file.write("%s %s %i %f\n" % (enrol_id, test_id, lab_pair, score))  # BREAK must-not: the score file holds each score printed as text: formatting it needs the value on the host  # noqa: UP031
            if lab_pair == 1:
                positive_scores.append(score)
            else:
                negative_scores.append(score)
        return positive_scores, negative_scores

    def forward(self, enrol_dict, test_dict, veri_test):
        s_file = io.StringIO()
        positive_scores, negative_scores = self.get_verification_scores(veri_test, enrol_dict, test_dict, s_file)
        eer, th = EER(torch.tensor(positive_scores), torch.tensor(negative_scores))
        return eer, th, s_file.getvalue()


def build_speechbrain_embedding():
    seeded(1609)
    model = ComputeEmbedding().eval()
    n, T = 4, 20
    feats = torch.randn(n, T, 12)
    wav_lens = torch.tensor([1.0, 0.8, 0.65, 0.9])
    return model, (feats, wav_lens)


def build_speechbrain_eer():
    seeded(1610)
    enrol = {f"id1000{k}/utt{k}": torch.randn(1, 16) for k in range(4)}
    test = {f"id1000{k}/utt{k}": enrol[f"id1000{k}/utt{k}"] + 0.5 * torch.randn(1, 16) for k in range(4)}
    veri_test = [f"{int(a == b)} id1000{a}/utt{a}.wav id1000{b}/utt{b}.wav" for a in range(4) for b in range(4)]
    return VerificationScores().eval(), (enrol, test, veri_test)
