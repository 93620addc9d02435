"""Speech enhancement in the waveform domain: haoxiangsnr/Wave-U-Net-for-Speech-Enhancement.

``model/unet_basic.py``'s ``Model`` (``DownSamplingLayer`` / ``UpSamplingLayer`` stacks, decimation by ``[:, :, ::2]``,
linear upsampling and the skip concatenations, the ``tanh`` output on the input concatenated back) under
``trainer/trainer.py``'s ``_validation_epoch``: each utterance (batch size one) split into ``sample_length`` chunks with
the short tail dropped, the chunks enhanced one by one, moved back to numpy and trimmed to the shortest, the
clean / noisy and clean / enhanced STOI and PESQ lists, their means written to the writer and the score mixed from
STOI and the PESQ mapped to [0, 1].  ``pystoi`` and ``pesq`` are replaced by small numpy stand-ins in the shape of
``pystoi.stoi`` (silent frames removed by an energy threshold, third-octave-free short-time correlation).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import SummaryWriter, seeded


class DownSamplingLayer(nn.Module):
    def __init__(self, channel_in, channel_out, dilation=1, kernel_size=15, stride=1, padding=7):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv1d(
                channel_in,
                channel_out,
                kernel_size=kernel_size,
                stride=stride,
                padding=padding,
                dilation=dilation,
            ),
            nn.BatchNorm1d(channel_out),
            nn.LeakyReLU(negative_slope=0.1),
        )

    def forward(self, ipt):
        return self.main(ipt)


class UpSamplingLayer(nn.Module):
    def __init__(self, channel_in, channel_out, kernel_size=5, stride=1, padding=2):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv1d(channel_in, channel_out, kernel_size=kernel_size, stride=stride, padding=padding),
            nn.BatchNorm1d(channel_out),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
        )

    def forward(self, ipt):
        return self.main(ipt)


class Model(nn.Module):
    def __init__(self, n_layers=12, channels_interval=24):
        super().__init__()

        self.n_layers = n_layers
        self.channels_interval = channels_interval
        encoder_in_channels_list = [1] + [i * self.channels_interval for i in range(1, self.n_layers)]
        encoder_out_channels_list = [i * self.channels_interval for i in range(1, self.n_layers + 1)]

        #          1    => 2    => 3    => 4    => 5    => 6   => 7   => 8   => 9  => 10 => 11 =>12
        # 16384 => 8192 => 4096 => 2048 => 1024 => 512 => 256 => 128 => 64 => 32 => 16 =>  8 => 4
        self.encoder = nn.ModuleList()
        for i in range(self.n_layers):
            self.encoder.append(
                DownSamplingLayer(
                    channel_in=encoder_in_channels_list[i], channel_out=encoder_out_channels_list[i]
                )
            )

        self.middle = nn.Sequential(
            nn.Conv1d(
                self.n_layers * self.channels_interval,
                self.n_layers * self.channels_interval,
                15,
                stride=1,
                padding=7,
            ),
            nn.BatchNorm1d(self.n_layers * self.channels_interval),
            nn.LeakyReLU(negative_slope=0.1, inplace=True),
        )

        decoder_in_channels_list = [(2 * i + 1) * self.channels_interval for i in range(1, self.n_layers)] + [
            2 * self.n_layers * self.channels_interval
        ]
        decoder_in_channels_list = decoder_in_channels_list[::-1]
        decoder_out_channels_list = encoder_out_channels_list[::-1]
        self.decoder = nn.ModuleList()
        for i in range(self.n_layers):
            self.decoder.append(
                UpSamplingLayer(
                    channel_in=decoder_in_channels_list[i], channel_out=decoder_out_channels_list[i]
                )
            )

        self.out = nn.Sequential(nn.Conv1d(1 + self.channels_interval, 1, kernel_size=1, stride=1), nn.Tanh())

    def forward(self, input):
        tmp = []
        o = input

        # Up Sampling
        for i in range(self.n_layers):
            o = self.encoder[i](o)
            tmp.append(o)
            # [batch_size, T // 2, channels]
            o = o[:, :, ::2]

        o = self.middle(o)

        # Down Sampling
        for i in range(self.n_layers):
            # [batch_size, T * 2, channels]
            o = F.interpolate(o, scale_factor=2, mode="linear", align_corners=True)
            # Skip Connection
            o = torch.cat([o, tmp[self.n_layers - i - 1]], dim=1)
            o = self.decoder[i](o)

        o = torch.cat([o, input], dim=1)
        o = self.out(o)
        return o


# ------------------------------------------------------------------ util/metrics.py (pystoi / pesq stand-ins)


def remove_silent_frames(x, y, dyn_range, framelen, hop):
    """pystoi.utils.remove_silent_frames: drop the frames of both signals where the clean one is 40 dB down."""
    w = np.hanning(framelen + 2)[1:-1]
    x_frames = np.array([w * x[i : i + framelen] for i in range(0, len(x) - framelen, hop)])
    y_frames = np.array([w * y[i : i + framelen] for i in range(0, len(x) - framelen, hop)])
    # Compute energies in dB
    x_energies = 20 * np.log10(np.linalg.norm(x_frames, axis=1) + np.finfo(float).eps)
    # Find boolean mask of energies lower than dynamic_range dB
    # with respect to maximum clean speech energy frame
    mask = (np.max(x_energies) - dyn_range - x_energies) < 0
    # Remove silent frames by masking
    x_frames = x_frames[mask]  # BREAK: keep every frame, weight by the mask
    y_frames = y_frames[mask]  # BREAK: keep every frame, weight by the mask
    return x_frames, y_frames


def stoi(x, y, fs_sig, extended=False):
    """A short-time objective intelligibility stand-in: the mean correlation of the non-silent frames' envelopes."""
    x_frames, y_frames = remove_silent_frames(x, y, 40, 64, 32)
    x_env = np.abs(np.fft.rfft(x_frames, axis=1))
    y_env = np.abs(np.fft.rfft(y_frames, axis=1))
    x_norm = x_env - np.mean(x_env, axis=1, keepdims=True)
    y_norm = y_env - np.mean(y_env, axis=1, keepdims=True)
    num = np.sum(x_norm * y_norm, axis=1)
    den = np.linalg.norm(x_norm, axis=1) * np.linalg.norm(y_norm, axis=1) + np.finfo(float).eps
    return np.mean(num / den)


def pesq(fs, ref, deg, mode):
    """A perceptual-quality stand-in on the MOS-LQO scale: the log-spectral distance mapped into [-0.5, 4.5]."""
    ref_spec = np.abs(np.fft.rfft(ref.reshape(-1, 128), axis=1)) + 1e-8
    deg_spec = np.abs(np.fft.rfft(deg.reshape(-1, 128), axis=1)) + 1e-8
    lsd = np.mean(np.sqrt(np.mean((10 * np.log10(ref_spec / deg_spec)) ** 2, axis=1)))
    return 4.5 - 5.0 / (1.0 + np.exp(-0.2 * (lsd - 10.0)))


def compute_STOI(clean_signal, noisy_signal, sr=16000):
    return stoi(clean_signal, noisy_signal, sr, extended=False)


def compute_PESQ(clean_signal, noisy_signal, sr=16000):
    return pesq(sr, clean_signal, noisy_signal, "wb")


# ------------------------------------------------------------------ trainer/trainer.py


class Trainer(nn.Module):
    """The validation half of ``Trainer``: ``_validation_epoch`` over the validation data loader."""

    def __init__(self, config):
        super().__init__()
        self.model = Model(
            n_layers=config["model"]["n_layers"], channels_interval=config["model"]["channels_interval"]
        )
        self.validation_custom_config = config["trainer"]["validation"]["custom"]
        self.writer = SummaryWriter("logs")
        self.device = torch.device("cpu")

    @staticmethod
    def _transform_pesq_range(pesq_score):
        """transform [-0.5 ~ 4.5] to [0 ~ 1]"""
        return (pesq_score + 0.5) / 5

    @torch.no_grad()
    def _validation_epoch(self, epoch, validation_data_loader):
        visualize_audio_limit = self.validation_custom_config["visualize_audio_limit"]
        sample_length = self.validation_custom_config["sample_length"]

        stoi_c_n = []  # clean and noisy
        stoi_c_e = []  # clean and enhanced
        pesq_c_n = []
        pesq_c_e = []

        for i, (mixture, clean, name) in enumerate(validation_data_loader):
            assert len(name) == 1, "Only support batch size is 1 in enhancement stage."
            name = name[0]

            # [1, 1, T]
            mixture = mixture.to(self.device)
            clean = clean.to(self.device)

            # Input of model should fixed length
            mixture_chunks = torch.split(mixture, sample_length, dim=2)
            if mixture_chunks[-1].shape[-1] != sample_length:
                mixture_chunks = mixture_chunks[:-1]

            enhanced_chunks = []
            for chunk in mixture_chunks:
                enhanced_chunks.append(self.model(chunk).detach().cpu())

            enhanced = torch.cat(enhanced_chunks, dim=2)

            # Back to numpy array
            mixture = mixture.cpu().numpy().reshape(-1)
            enhanced = enhanced.numpy().reshape(-1)
            clean = clean.cpu().numpy().reshape(-1)

            min_len = min(len(mixture), len(clean), len(enhanced))

            mixture = mixture[:min_len]
            clean = clean[:min_len]
            enhanced = enhanced[:min_len]

            # Visualize audio
            if i <= visualize_audio_limit:
                self.writer.add_histogram(f"Speech/{name}_Noisy", mixture, epoch)
                self.writer.add_histogram(f"Speech/{name}_Enhanced", enhanced, epoch)
                self.writer.add_histogram(f"Speech/{name}_Clean", clean, epoch)

            # Metric
            stoi_c_n.append(compute_STOI(clean, mixture, sr=16000))
            stoi_c_e.append(compute_STOI(clean, enhanced, sr=16000))
            pesq_c_n.append(compute_PESQ(clean, mixture, sr=16000))
            pesq_c_e.append(compute_PESQ(clean, enhanced, sr=16000))

        def get_metrics_ave(metrics):
            return np.sum(metrics) / len(metrics)

        self.writer.add_scalars(
            "Metric/STOI",
            {"Clean and noisy": get_metrics_ave(stoi_c_n), "Clean and enhanced": get_metrics_ave(stoi_c_e)},
            epoch,
        )
        self.writer.add_scalars(
            "Metric/PESQ",
            {"Clean and noisy": get_metrics_ave(pesq_c_n), "Clean and enhanced": get_metrics_ave(pesq_c_e)},
            epoch,
        )

        score = (get_metrics_ave(stoi_c_e) + self._transform_pesq_range(get_metrics_ave(pesq_c_e))) / 2
        return score

    def forward(self, epoch, validation_data_loader):
        self.model.eval()
        return self._validation_epoch(epoch, validation_data_loader)


def build_waveunet_validation():
    seeded(1801)
    config = {
        "model": {"n_layers": 3, "channels_interval": 6},
        "trainer": {"validation": {"custom": {"visualize_audio_limit": 1, "sample_length": 256}}},
    }
    m = Trainer(config)
    loader = []
    for k, length in enumerate((700, 600)):
        t = torch.arange(length, dtype=torch.float32)
        clean = 0.4 * torch.sin(2 * torch.pi * t / (23 + 7 * k)) * (t > 90).float()
        mixture = clean + 0.05 * torch.randn(length)
        loader.append((mixture.view(1, 1, -1), clean.view(1, 1, -1), [f"utt_{k:03d}"]))
    return m, (3, loader)
