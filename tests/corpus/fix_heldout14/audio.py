"""Audio: open-mmlab/mmaction2's audio recognizer (``ResNetAudio`` on log-mel features, ``AudioTSNHead``, the
``AudioRecognizer.forward_train`` / ``train_step`` pair sharing ``BaseHead.loss`` and ``_parse_losses`` with the
video recognizers) and NVIDIA/waveglow's training step (``WaveGlow`` with its ``Invertible1x1Conv`` flows and
weight-normed ``WN`` coupling networks through the TorchScript ``fused_add_tanh_sigmoid_multiply``, ``WaveGlowLoss``,
the loss read back and printed each iteration)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import BaseHead, parse_losses, seeded

# ------------------------------------------------------------------ mmaction2 ResNetAudio + AudioTSNHead + AudioRecognizer


class Bottleneck2dAudio(nn.Module):
    """A residual block whose 3x3 conv is factorised into frequency (k x 1) and time (1 x k) convs."""

    def __init__(self, inplanes, planes, stride=2, kernel_size=3, factorize=True):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        if factorize:
            self.conv2 = nn.Sequential(
                nn.Conv2d(planes, planes, (kernel_size, 1), padding=(kernel_size // 2, 0), bias=False),
                nn.Conv2d(planes, planes, (1, kernel_size), padding=(0, kernel_size // 2), bias=False),
            )
        else:
            self.conv2 = nn.Conv2d(planes, planes, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNetAudio(nn.Module):
    def __init__(self, in_channels=1, base_channels=8, conv1_kernel=9):
        super().__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, base_channels, (conv1_kernel, 1), padding=(conv1_kernel // 2, 0), bias=False),
            nn.BatchNorm2d(base_channels),
            nn.ReLU(),
        )
        self.layer1 = Bottleneck2dAudio(base_channels, base_channels * 2)
        self.layer2 = Bottleneck2dAudio(base_channels * 2, base_channels * 4, factorize=False)

    def forward(self, x):
        return self.layer2(self.layer1(self.conv1(x)))


class AudioTSNHead(BaseHead):
    def __init__(self, num_classes, in_channels, dropout_ratio=0.4, **kwargs):
        super().__init__(num_classes, in_channels, **kwargs)
        # use `nn.AdaptiveAvgPool2d` to adaptively match the in_channels.
        self.avg_pool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout_ratio)
        self.fc_cls = nn.Linear(self.in_channels, self.num_classes)

    def forward(self, x):
        # [N * num_segs, in_channels, h, w]
        x = self.avg_pool(x)
        # [N, in_channels, 1, 1]
        x = x.view(x.size(0), -1)
        # [N, in_channels]
        x = self.dropout(x)
        # [N, num_classes]
        return self.fc_cls(x)


class AudioRecognizer(nn.Module):
    def __init__(self, num_classes=8):
        super().__init__()
        self.backbone = ResNetAudio()
        self.cls_head = AudioTSNHead(num_classes, 32, topk=(1, 3))

    def forward_train(self, audios, labels):
        audios = audios.reshape((-1,) + audios.shape[2:])
        x = self.backbone(audios)
        cls_score = self.cls_head(x)
        gt_labels = labels.squeeze()
        loss = self.cls_head.loss(cls_score, gt_labels)
        return loss

    def forward(self, data_batch):
        """``train_step``: the losses, parsed for the optimizer hook and the log buffer."""
        audios = data_batch["audios"]
        label = data_batch["label"]
        losses = self.forward_train(audios, label)
        loss, log_vars = parse_losses(losses)
        return dict(loss=loss, log_vars=log_vars, num_samples=len(next(iter(data_batch.values()))))


def build_audio_recognizer():
    seeded(1404)
    model = AudioRecognizer().train()
    batch = {"audios": torch.randn(4, 1, 1, 32, 16), "label": torch.tensor([[1], [7], [3], [1]])}
    return model, (batch,)


# ------------------------------------------------------------------ NVIDIA/waveglow glow.py + train.py


@torch.jit.script
def fused_add_tanh_sigmoid_multiply(input_a, input_b, n_channels):
    n_channels_int = n_channels[0]
    in_act = input_a + input_b
    t_act = torch.tanh(in_act[:, :n_channels_int, :])  # BREAK: a slice bound read from an IntTensor: pass the channel count as a list of Python ints (List[int] in TorchScript)
    s_act = torch.sigmoid(in_act[:, n_channels_int:, :])
    acts = t_act * s_act
    return acts


class WaveGlowLoss(nn.Module):
    def __init__(self, sigma=1.0):
        super().__init__()
        self.sigma = sigma

    def forward(self, model_output):
        z, log_s_list, log_det_W_list = model_output
        for i, log_s in enumerate(log_s_list):
            if i == 0:
                log_s_total = torch.sum(log_s)
                log_det_W_total = log_det_W_list[i]
            else:
                log_s_total = log_s_total + torch.sum(log_s)
                log_det_W_total += log_det_W_list[i]

        loss = torch.sum(z * z) / (2 * self.sigma * self.sigma) - log_s_total - log_det_W_total
        return loss / (z.size(0) * z.size(1) * z.size(2))


class Invertible1x1Conv(nn.Module):
    """The layer outputs both the convolution, and the log determinant of its weight matrix."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv1d(c, c, kernel_size=1, stride=1, padding=0, bias=False)

        # Sample a random orthonormal matrix to initialize weights
        W = torch.linalg.qr(torch.FloatTensor(c, c).normal_())[0]

        # Ensure determinant is 1.0 not -1.0
        if torch.det(W) < 0:
            W[:, 0] = -1 * W[:, 0]
        W = W.view(c, c, 1)
        self.conv.weight.data = W

    def forward(self, z):
        # shape
        batch_size, group_size, n_of_groups = z.size()
        W = self.conv.weight.squeeze()
        # Forward computation
        log_det_W = batch_size * n_of_groups * torch.logdet(W)
        z = self.conv(z)
        return z, log_det_W


class WN(nn.Module):
    """The WaveNet like layer for the affine coupling: non-causal convs whose dilation doubles on each layer."""

    def __init__(self, n_in_channels, n_mel_channels, n_layers, n_channels, kernel_size):
        super().__init__()
        assert kernel_size % 2 == 1
        assert n_channels % 2 == 0
        self.n_layers = n_layers
        self.n_channels = n_channels
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()

        start = nn.Conv1d(n_in_channels, n_channels, 1)
        start = nn.utils.weight_norm(start, name="weight")
        self.start = start

        # Initializing last layer to 0 makes the affine coupling layers
        # do nothing at first (upstream); a partly trained end layer here
        end = nn.Conv1d(n_channels, 2 * n_in_channels, 1)
        end.weight.data.normal_(0, 0.01)
        end.bias.data.zero_()
        self.end = end

        cond_layer = nn.Conv1d(n_mel_channels, 2 * n_channels * n_layers, 1)
        self.cond_layer = nn.utils.weight_norm(cond_layer, name="weight")

        for i in range(n_layers):
            dilation = 2**i
            padding = int((kernel_size * dilation - dilation) / 2)
            in_layer = nn.Conv1d(n_channels, 2 * n_channels, kernel_size, dilation=dilation, padding=padding)
            in_layer = nn.utils.weight_norm(in_layer, name="weight")
            self.in_layers.append(in_layer)

            # last one is not necessary
            res_skip_channels = 2 * n_channels if i < n_layers - 1 else n_channels
            res_skip_layer = nn.Conv1d(n_channels, res_skip_channels, 1)
            res_skip_layer = nn.utils.weight_norm(res_skip_layer, name="weight")
            self.res_skip_layers.append(res_skip_layer)

    def forward(self, forward_input):
        audio, spect = forward_input
        audio = self.start(audio)
        output = torch.zeros_like(audio)
        n_channels_tensor = torch.IntTensor([self.n_channels])

        spect = self.cond_layer(spect)

        for i in range(self.n_layers):
            spect_offset = i * 2 * self.n_channels
            acts = fused_add_tanh_sigmoid_multiply(
                self.in_layers[i](audio), spect[:, spect_offset : spect_offset + 2 * self.n_channels, :], n_channels_tensor
            )

            res_skip_acts = self.res_skip_layers[i](acts)
            if i < self.n_layers - 1:
                audio = audio + res_skip_acts[:, : self.n_channels, :]
                output = output + res_skip_acts[:, self.n_channels :, :]
            else:
                output = output + res_skip_acts

        return self.end(output)


class WaveGlow(nn.Module):
    def __init__(self, n_mel_channels=8, n_flows=4, n_group=4, n_early_every=2, n_early_size=2, WN_config=None):
        super().__init__()
        WN_config = WN_config or dict(n_layers=2, n_channels=8, kernel_size=3)
        self.upsample = nn.ConvTranspose1d(n_mel_channels, n_mel_channels, 16, stride=4)
        assert n_group % 2 == 0
        self.n_flows = n_flows
        self.n_group = n_group
        self.n_early_every = n_early_every
        self.n_early_size = n_early_size
        self.WN = nn.ModuleList()
        self.convinv = nn.ModuleList()

        n_half = int(n_group / 2)

        # Set up layers with the right sizes based on how many dimensions
        # have been output already
        n_remaining_channels = n_group
        for k in range(n_flows):
            if k % self.n_early_every == 0 and k > 0:
                n_half = n_half - int(self.n_early_size / 2)
                n_remaining_channels = n_remaining_channels - self.n_early_size
            self.convinv.append(Invertible1x1Conv(n_remaining_channels))
            self.WN.append(WN(n_half, n_mel_channels * n_group, **WN_config))
        self.n_remaining_channels = n_remaining_channels  # Useful during inference

    def forward(self, forward_input):
        """forward_input[0] = mel_spectrogram: batch x n_mel_channels x frames; forward_input[1] = audio: batch x time"""
        spect, audio = forward_input

        #  Upsample spectrogram to size of audio
        spect = self.upsample(spect)
        assert spect.size(2) >= audio.size(1)
        if spect.size(2) > audio.size(1):
            spect = spect[:, :, : audio.size(1)]

        spect = spect.unfold(2, self.n_group, self.n_group).permute(0, 2, 1, 3)
        spect = spect.contiguous().view(spect.size(0), spect.size(1), -1).permute(0, 2, 1)

        audio = audio.unfold(1, self.n_group, self.n_group).permute(0, 2, 1)
        output_audio = []
        log_s_list = []
        log_det_W_list = []

        for k in range(self.n_flows):
            if k % self.n_early_every == 0 and k > 0:
                output_audio.append(audio[:, : self.n_early_size, :])
                audio = audio[:, self.n_early_size :, :]

            audio, log_det_W = self.convinv[k](audio)
            log_det_W_list.append(log_det_W)

            n_half = int(audio.size(1) / 2)
            audio_0 = audio[:, :n_half, :]
            audio_1 = audio[:, n_half:, :]

            output = self.WN[k]((audio_0, spect))
            log_s = output[:, n_half:, :]
            b = output[:, :n_half, :]
            audio_1 = torch.exp(log_s) * audio_1 + b
            log_s_list.append(log_s)

            audio = torch.cat([audio_0, audio_1], 1)

        output_audio.append(audio)
        return torch.cat(output_audio, 1), log_s_list, log_det_W_list


class WaveGlowTrainStep(nn.Module):
    """One iteration of ``train.py``'s loop on one GPU, up to the backward."""

    def __init__(self, sigma=1.0):
        super().__init__()
        self.model = WaveGlow()
        self.criterion = WaveGlowLoss(sigma)
        self.iteration = 0

    def forward(self, mel, audio):
        outputs = self.model((mel, audio))
        loss = self.criterion(outputs)
        reduced_loss = loss.item()  # BREAK: only the print reads it: keep the detached loss, str.format prints a 0-d tensor's value the same
        print(f"{self.iteration}:\t{reduced_loss:.9f}")  # BREAK must-not: the per-iteration log line is the user's output
        self.iteration += 1
        return loss


def build_waveglow_step():
    seeded(1405)
    return WaveGlowTrainStep(), (torch.randn(2, 8, 6), torch.randn(2, 32) * 0.1)
