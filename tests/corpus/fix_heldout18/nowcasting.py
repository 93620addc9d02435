"""Precipitation nowcasting: Hzzone/Precipitation-Nowcasting.

``nowcasting/models/convLSTM.py``'s ``ConvLSTM`` (peephole weights, the forecaster's cells started from no input),
``nowcasting/models/encoder.py`` / ``forecaster.py`` / ``model.py``'s ``Encoder`` / ``Forecaster`` / ``EF`` built by
``make_layers`` from ordered parameter dicts, ``nowcasting/models/loss.py``'s ``Weighted_mse_mae`` (balancing weights
at the rainfall thresholds through ``rainfall_to_pixel``), and ``nowcasting/hko/evaluation.py``'s ``HKOEvaluation``
(numpy versions of the numba kernels: balanced MSE / MAE, GDL, hit / miss / false-alarm counts, then
``calculate_stat``'s POD / FAR / CSI / HSS), under the loss half of one ``train_and_test`` iteration at a test
interval: the HKO batch moved from uint8 numpy, ``train_loss += loss.item()``, the clipped prediction back in numpy
for the evaluator, and the interval's statistics written to the ``SummaryWriter``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

from .helpers import SummaryWriter, seeded


class _Cfg:
    class HKO:
        class EVALUATION:
            THRESHOLDS = (0.5, 2, 5, 10, 30)
            BALANCING_WEIGHTS = (1, 1, 2, 5, 10, 30)

        class BENCHMARK:
            IN_LEN = 3
            OUT_LEN = 3

    class GLOBAL:
        DEVICE = torch.device("cpu")


cfg = _Cfg

# ------------------------------------------------------------------ nowcasting/hko/evaluation.py


def rainfall_to_pixel(rainfall_intensity, a=58.53, b=1.56):
    """Convert the rainfall intensity to pixel values

    Parameters
    ----------
    rainfall_intensity : np.ndarray
    a : float32, optional
    b : float32, optional

    Returns
    -------
    pixel_vals : np.ndarray
    """
    dBR = np.log10(rainfall_intensity) * 10.0
    # dBZ = 10b log(R) +10log(a)
    dBZ = dBR * b + 10.0 * np.log10(a)
    pixel_vals = (dBZ + 10.0) / 70.0
    return pixel_vals


def get_GDL(prediction, truth, mask):
    """Calculate the masked gradient difference loss"""
    prediction_diff_h = np.abs(np.diff(prediction, axis=3))
    prediction_diff_w = np.abs(np.diff(prediction, axis=4))
    gt_diff_h = np.abs(np.diff(truth, axis=3))
    gt_diff_w = np.abs(np.diff(truth, axis=4))
    mask_h = mask[:, :, :, :-1, :] * mask[:, :, :, 1:, :]
    mask_w = mask[:, :, :, :, :-1] * mask[:, :, :, :, 1:]
    gd_h = np.abs(prediction_diff_h - gt_diff_h)
    gd_w = np.abs(prediction_diff_w - gt_diff_w)
    gd_h[:] *= mask_h
    gd_w[:] *= mask_w
    return np.sum(gd_h, axis=(2, 3, 4)) + np.sum(gd_w, axis=(2, 3, 4))


def get_hit_miss_counts(prediction, truth, mask=None, thresholds=None):
    """This function calculates the overall hits and misses for the prediction, which could be used
    to get the skill scores and threat scores:

    Returns
    -------
    hits : np.ndarray
        (seq_len, batch_size, len(thresholds))
    misses, false_alarms, correct_negatives : np.ndarray
    """
    if thresholds is None:
        thresholds = cfg.HKO.EVALUATION.THRESHOLDS
    assert 5 == prediction.ndim
    assert 5 == truth.ndim
    assert prediction.shape == truth.shape
    assert prediction.shape[2] == 1
    thresholds = [rainfall_to_pixel(thresholds[i]) for i in range(len(thresholds))]
    thresholds = sorted(thresholds)  # BREAK: np.sort of the thresholds' array
    thresholds = np.array(thresholds).reshape((1, 1, 1, 1, 1, -1))
    bpred = np.expand_dims(prediction, axis=5) >= thresholds
    btruth = np.expand_dims(truth, axis=5) >= thresholds
    valid = np.expand_dims(mask, axis=5).astype(bool)
    hits = np.sum(bpred & btruth & valid, axis=(2, 3, 4))
    misses = np.sum(~bpred & btruth & valid, axis=(2, 3, 4))
    false_alarms = np.sum(bpred & ~btruth & valid, axis=(2, 3, 4))
    correct_negatives = np.sum(~bpred & ~btruth & valid, axis=(2, 3, 4))
    return hits, misses, false_alarms, correct_negatives


def get_balancing_weights(data, mask, base_balancing_weights=None, thresholds=None):
    if thresholds is None:
        thresholds = cfg.HKO.EVALUATION.THRESHOLDS
    if base_balancing_weights is None:
        base_balancing_weights = cfg.HKO.EVALUATION.BALANCING_WEIGHTS
    thresholds = [rainfall_to_pixel(ele) for ele in thresholds]
    weights = np.ones_like(data) * base_balancing_weights[0]
    threshold_mask = np.expand_dims(data, axis=5) >= np.array(thresholds).reshape((1, 1, 1, 1, 1, -1))
    base_weights = np.diff(np.array(base_balancing_weights, dtype=np.float32))
    weights = weights + (threshold_mask * base_weights).sum(axis=-1)
    weights = weights * mask
    return weights


class HKOEvaluation:
    def __init__(self, seq_len, use_central, no_ssim=True, threholds=None):
        self._thresholds = cfg.HKO.EVALUATION.THRESHOLDS if threholds is None else threholds
        self._seq_len = seq_len
        self._no_ssim = no_ssim
        self._use_central = use_central
        self._central_region = None
        self.begin()

    def begin(self):
        self._total_hits = np.zeros((self._seq_len, len(self._thresholds)), dtype=int)
        self._total_misses = np.zeros((self._seq_len, len(self._thresholds)), dtype=int)
        self._total_false_alarms = np.zeros((self._seq_len, len(self._thresholds)), dtype=int)
        self._total_correct_negatives = np.zeros((self._seq_len, len(self._thresholds)), dtype=int)
        self._mse = np.zeros((self._seq_len,), dtype=np.float32)
        self._mae = np.zeros((self._seq_len,), dtype=np.float32)
        self._balanced_mse = np.zeros((self._seq_len,), dtype=np.float32)
        self._balanced_mae = np.zeros((self._seq_len,), dtype=np.float32)
        self._gdl = np.zeros((self._seq_len,), dtype=np.float32)
        self._total_batch_num = 0

    def clear_all(self):
        self._total_hits[:] = 0
        self._total_misses[:] = 0
        self._total_false_alarms[:] = 0
        self._total_correct_negatives[:] = 0
        self._mse[:] = 0
        self._mae[:] = 0
        self._gdl[:] = 0
        self._balanced_mse[:] = 0
        self._balanced_mae[:] = 0
        self._total_batch_num = 0

    def update(self, gt, pred, mask, start_datetimes=None):
        """

        Parameters
        ----------
        gt : np.ndarray
        pred : np.ndarray
        mask : np.ndarray
            0 indicates not use and 1 indicates that the location will be taken into account
        start_datetimes : list
            The starting datetimes of all the testing instances

        Returns
        -------

        """
        if start_datetimes is not None:
            batch_size = len(start_datetimes)
            assert gt.shape[1] == batch_size
        else:
            batch_size = gt.shape[1]
        assert gt.shape[0] == self._seq_len
        assert gt.shape == pred.shape
        assert gt.shape == mask.shape

        self._total_batch_num += batch_size
        # TODO Save all the mse, mae, gdl, hits, misses, false_alarms and correct_negatives
        mse = (mask * np.square(pred - gt)).sum(axis=(2, 3, 4))
        mae = (mask * np.abs(pred - gt)).sum(axis=(2, 3, 4))
        weights = get_balancing_weights(
            data=gt,
            mask=mask,
            base_balancing_weights=cfg.HKO.EVALUATION.BALANCING_WEIGHTS,
            thresholds=self._thresholds,
        )
        # S*B
        balanced_mse = (weights * np.square(pred - gt)).sum(axis=(2, 3, 4))
        balanced_mae = (weights * np.abs(pred - gt)).sum(axis=(2, 3, 4))
        gdl = get_GDL(prediction=pred, truth=gt, mask=mask)
        self._mse += mse.sum(axis=1)
        self._mae += mae.sum(axis=1)
        self._balanced_mse += balanced_mse.sum(axis=1)
        self._balanced_mae += balanced_mae.sum(axis=1)
        self._gdl += gdl.sum(axis=1)
        hits, misses, false_alarms, correct_negatives = get_hit_miss_counts(
            prediction=pred, truth=gt, mask=mask, thresholds=self._thresholds
        )
        self._total_hits += hits.sum(axis=1)
        self._total_misses += misses.sum(axis=1)
        self._total_false_alarms += false_alarms.sum(axis=1)
        self._total_correct_negatives += correct_negatives.sum(axis=1)

    def calculate_stat(self):
        """The following measurements will be used to measure the score of the forecaster

        See Also
        [Weather and Forecasting 2010] Equitability Revisited: Why the "Equitable Threat Score" Is Not Equitable
        http://www.wxonline.info/topics/verif2.html

        We will denote
        (a b    (hits       false alarms
         c d) =  misses   correct negatives)

        We will report the
        POD = a / (a + c)
        FAR = b / (a + b)
        CSI = a / (a + b + c)
        Heidke Skill Score (HSS) = 2(ad - bc) / ((a+c) (c+d) + (a+b)(b+d))
        Gilbert Skill Score (GSS) = HSS / (2 - HSS), also known as the Equitable Threat Score
            HSS = 2 * GSS / (GSS + 1)
        MSE = mask * (gt - pred) **2
        MAE = mask * abs(gt - pred)
        GDL = valid_mask_h * abs(gd_h(gt) - gd_h(pred)) + valid_mask_w * abs(gd_w(gt) - gd_w(pred))
        Returns
        -------

        """

        a = self._total_hits.astype(np.float64)
        b = self._total_false_alarms.astype(np.float64)
        c = self._total_misses.astype(np.float64)
        d = self._total_correct_negatives.astype(np.float64)
        pod = a / (a + c)
        far = b / (a + b)
        csi = a / (a + b + c)
        n = a + b + c + d
        aref = (a + b) / n * (a + c)
        gss = (a - aref) / (a + b + c - aref)
        hss = 2 * gss / (gss + 1)
        mse = self._mse / self._total_batch_num
        mae = self._mae / self._total_batch_num
        balanced_mse = self._balanced_mse / self._total_batch_num
        balanced_mae = self._balanced_mae / self._total_batch_num
        gdl = self._gdl / self._total_batch_num
        ssim = None
        return pod, far, csi, hss, gss, mse, mae, balanced_mse, balanced_mae, gdl, ssim


# ------------------------------------------------------------------ nowcasting/models/loss.py


class Weighted_mse_mae(nn.Module):
    def __init__(self, mse_weight=1.0, mae_weight=1.0, NORMAL_LOSS_GLOBAL_SCALE=0.00005, LAMBDA=None):
        super().__init__()
        self.NORMAL_LOSS_GLOBAL_SCALE = NORMAL_LOSS_GLOBAL_SCALE
        self.mse_weight = mse_weight
        self.mae_weight = mae_weight
        self._lambda = LAMBDA

    def forward(self, input, target, mask):
        balancing_weights = cfg.HKO.EVALUATION.BALANCING_WEIGHTS
        weights = torch.ones_like(input) * balancing_weights[0]
        thresholds = [rainfall_to_pixel(ele) for ele in cfg.HKO.EVALUATION.THRESHOLDS]
        for i, threshold in enumerate(thresholds):
            weights = (
                weights + (balancing_weights[i + 1] - balancing_weights[i]) * (target >= threshold).float()
            )
        weights = weights * mask.float()
        # input: S*B*1*H*W
        # error: S*B
        mse = torch.sum(weights * ((input - target) ** 2), (2, 3, 4))
        mae = torch.sum(weights * (torch.abs(input - target)), (2, 3, 4))
        if self._lambda is not None:
            S, B = mse.size()
            w = torch.arange(1.0, 1.0 + S * self._lambda, self._lambda)
            mse = (w * mse.permute(1, 0)).permute(1, 0)
            mae = (w * mae.permute(1, 0)).permute(1, 0)
        return self.NORMAL_LOSS_GLOBAL_SCALE * (
            self.mse_weight * torch.mean(mse) + self.mae_weight * torch.mean(mae)
        )


# ------------------------------------------------------------------ nowcasting/models/convLSTM.py


class ConvLSTM(nn.Module):
    def __init__(self, input_channel, num_filter, b_h_w, kernel_size, stride=1, padding=1):
        super().__init__()
        self._conv = nn.Conv2d(
            in_channels=input_channel + num_filter,
            out_channels=num_filter * 4,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
        )
        self._batch_size, self._state_height, self._state_width = b_h_w
        # if using requires_grad flag, torch.save will not save parameters in deed although it may be updated every epoch.
        # Howerver, if you use declare an optimizer like Adam(model.parameters()),
        # parameters will not be updated forever.
        self.Wci = nn.Parameter(torch.zeros(1, num_filter, self._state_height, self._state_width)).to(
            cfg.GLOBAL.DEVICE
        )
        self.Wcf = nn.Parameter(torch.zeros(1, num_filter, self._state_height, self._state_width)).to(
            cfg.GLOBAL.DEVICE
        )
        self.Wco = nn.Parameter(torch.zeros(1, num_filter, self._state_height, self._state_width)).to(
            cfg.GLOBAL.DEVICE
        )
        self._input_channel = input_channel
        self._num_filter = num_filter

    # inputs and states should not be all none
    # inputs: S*B*C*H*W
    def forward(self, inputs=None, states=None, seq_len=cfg.HKO.BENCHMARK.IN_LEN):
        if states is None:
            c = torch.zeros(
                (inputs.size(1), self._num_filter, self._state_height, self._state_width), dtype=torch.float
            ).to(cfg.GLOBAL.DEVICE)
            h = torch.zeros(
                (inputs.size(1), self._num_filter, self._state_height, self._state_width), dtype=torch.float
            ).to(cfg.GLOBAL.DEVICE)
        else:
            h, c = states

        outputs = []
        for index in range(seq_len):
            # initial inputs
            if inputs is None:
                x = torch.zeros(
                    (h.size(0), self._input_channel, self._state_height, self._state_width), dtype=torch.float
                ).to(cfg.GLOBAL.DEVICE)
            else:
                x = inputs[index, ...]
            cat_x = torch.cat([x, h], dim=1)
            conv_x = self._conv(cat_x)

            i, f, tmp_c, o = torch.chunk(conv_x, 4, dim=1)

            i = torch.sigmoid(i + self.Wci * c)
            f = torch.sigmoid(f + self.Wcf * c)
            c = f * c + i * torch.tanh(tmp_c)
            o = torch.sigmoid(o + self.Wco * c)
            h = o * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs), (h, c)


# ------------------------------------------------------------------ nowcasting/utils.py, models/encoder.py, forecaster.py, model.py


def make_layers(block):
    layers = []
    for layer_name, v in block.items():
        if "pool" in layer_name:
            layer = nn.MaxPool2d(kernel_size=v[0], stride=v[1], padding=v[2])
            layers.append((layer_name, layer))
        elif "deconv" in layer_name:
            transposeConv2d = nn.ConvTranspose2d(
                in_channels=v[0], out_channels=v[1], kernel_size=v[2], stride=v[3], padding=v[4]
            )
            layers.append((layer_name, transposeConv2d))
            if "relu" in layer_name:
                layers.append(("relu_" + layer_name, nn.ReLU(inplace=True)))
            elif "leaky" in layer_name:
                layers.append(("leaky_" + layer_name, nn.LeakyReLU(negative_slope=0.2, inplace=True)))
        elif "conv" in layer_name:
            conv2d = nn.Conv2d(
                in_channels=v[0], out_channels=v[1], kernel_size=v[2], stride=v[3], padding=v[4]
            )
            layers.append((layer_name, conv2d))
            if "relu" in layer_name:
                layers.append(("relu_" + layer_name, nn.ReLU(inplace=True)))
            elif "leaky" in layer_name:
                layers.append(("leaky_" + layer_name, nn.LeakyReLU(negative_slope=0.2, inplace=True)))
        else:
            raise NotImplementedError
    return nn.Sequential(OrderedDict(layers))


class Encoder(nn.Module):
    def __init__(self, subnets, rnns):
        super().__init__()
        assert len(subnets) == len(rnns)

        self.blocks = len(subnets)

        for index, (params, rnn) in enumerate(zip(subnets, rnns), 1):  # noqa: B905
            setattr(self, "stage" + str(index), make_layers(params))
            setattr(self, "rnn" + str(index), rnn)

    def forward_by_stage(self, input, subnet, rnn):
        seq_number, batch_size, input_channel, height, width = input.size()
        input = torch.reshape(input, (-1, input_channel, height, width))
        input = subnet(input)
        input = torch.reshape(input, (seq_number, batch_size, input.size(1), input.size(2), input.size(3)))
        outputs_stage, state_stage = rnn(input, None)

        return outputs_stage, state_stage

    # input: 5D S*B*I*H*W
    def forward(self, input):
        hidden_states = []
        logging.debug(input.size())  # BREAK must-not: the debug log call is made
        for i in range(1, self.blocks + 1):
            input, state_stage = self.forward_by_stage(
                input, getattr(self, "stage" + str(i)), getattr(self, "rnn" + str(i))
            )
            hidden_states.append(state_stage)
        return tuple(hidden_states)


class Forecaster(nn.Module):
    def __init__(self, subnets, rnns):
        super().__init__()
        assert len(subnets) == len(rnns)

        self.blocks = len(subnets)

        for index, (params, rnn) in enumerate(zip(subnets, rnns)):  # noqa: B905
            setattr(self, "rnn" + str(self.blocks - index), rnn)
            setattr(self, "stage" + str(self.blocks - index), make_layers(params))

    def forward_by_stage(self, input, state, subnet, rnn):
        input, state_stage = rnn(input, state, seq_len=cfg.HKO.BENCHMARK.OUT_LEN)
        seq_number, batch_size, input_channel, height, width = input.size()
        input = torch.reshape(input, (-1, input_channel, height, width))
        input = subnet(input)
        input = torch.reshape(input, (seq_number, batch_size, input.size(1), input.size(2), input.size(3)))

        return input

        # input: 5D S*B*I*H*W

    def forward(self, hidden_states):
        input = self.forward_by_stage(
            None,
            hidden_states[-1],
            getattr(self, "stage" + str(self.blocks)),
            getattr(self, "rnn" + str(self.blocks)),
        )
        for i in list(range(1, self.blocks))[::-1]:
            input = self.forward_by_stage(
                input, hidden_states[i - 1], getattr(self, "stage" + str(i)), getattr(self, "rnn" + str(i))
            )
        return input


class EF(nn.Module):
    def __init__(self, encoder, forecaster):
        super().__init__()
        self.encoder = encoder
        self.forecaster = forecaster

    def forward(self, input):
        state = self.encoder(input)
        output = self.forecaster(state)
        return output


# ------------------------------------------------------------------ nowcasting/train_and_test.py, experiments/.../main.py


class TrainIteration(nn.Module):
    """The loss half of one ``while`` iteration of ``train_and_test``, at a test interval."""

    def __init__(self, batch_size, height):
        super().__init__()
        h2, h4 = height // 2, height // 4
        encoder_params = [
            [
                OrderedDict({"conv1_leaky_1": [1, 4, 3, 2, 1]}),
                OrderedDict({"conv2_leaky_1": [8, 8, 3, 2, 1]}),
            ],
            [
                ConvLSTM(
                    input_channel=4,
                    num_filter=8,
                    b_h_w=(batch_size, h2, h2),
                    kernel_size=3,
                    stride=1,
                    padding=1,
                ),
                ConvLSTM(
                    input_channel=8,
                    num_filter=8,
                    b_h_w=(batch_size, h4, h4),
                    kernel_size=3,
                    stride=1,
                    padding=1,
                ),
            ],
        ]
        forecaster_params = [
            [
                OrderedDict({"deconv1_leaky_1": [8, 8, 4, 2, 1]}),
                OrderedDict(
                    {
                        "deconv2_leaky_1": [8, 4, 4, 2, 1],
                        "conv3_leaky_2": [4, 4, 3, 1, 1],
                        "conv3_3": [4, 1, 1, 1, 0],
                    }
                ),
            ],
            [
                ConvLSTM(
                    input_channel=8,
                    num_filter=8,
                    b_h_w=(batch_size, h4, h4),
                    kernel_size=3,
                    stride=1,
                    padding=1,
                ),
                ConvLSTM(
                    input_channel=8,
                    num_filter=8,
                    b_h_w=(batch_size, h2, h2),
                    kernel_size=3,
                    stride=1,
                    padding=1,
                ),
            ],
        ]
        encoder = Encoder(encoder_params[0], encoder_params[1])
        forecaster = Forecaster(forecaster_params[0], forecaster_params[1])
        self.encoder_forecaster = EF(encoder, forecaster)
        self.criterion = Weighted_mse_mae()
        self.evaluater = HKOEvaluation(seq_len=cfg.HKO.BENCHMARK.OUT_LEN, use_central=False)
        self.writer = SummaryWriter()
        self.train_loss = 0.0

    def forward(self, train_loss_iter, test_iteration_interval, train_batch, train_mask):
        IN_LEN = cfg.HKO.BENCHMARK.IN_LEN
        OUT_LEN = cfg.HKO.BENCHMARK.OUT_LEN
        encoder_forecaster, evaluater, writer = self.encoder_forecaster, self.evaluater, self.writer

        train_batch = torch.from_numpy(train_batch.astype(np.float32)).to(cfg.GLOBAL.DEVICE) / 255.0
        train_data = train_batch[:IN_LEN, ...]
        train_label = train_batch[IN_LEN : IN_LEN + OUT_LEN, ...]
        mask = torch.from_numpy(train_mask[IN_LEN : IN_LEN + OUT_LEN, ...].astype(int)).to(cfg.GLOBAL.DEVICE)

        encoder_forecaster.train()
        output = encoder_forecaster(train_data)
        loss = self.criterion(output, train_label, mask)
        self.train_loss += loss.item()  # BREAK: the running loss can stay a tensor for the writer

        train_label_numpy = train_label.cpu().numpy()
        output_numpy = np.clip(output.detach().cpu().numpy(), 0.0, 1.0)

        evaluater.update(train_label_numpy, output_numpy, mask.cpu().numpy())

        if train_loss_iter % test_iteration_interval == 0:
            (
                _,
                _,
                train_csi,
                train_hss,
                _,
                train_mse,
                train_mae,
                train_balanced_mse,
                train_balanced_mae,
                _,
                _,
            ) = evaluater.calculate_stat()

            train_loss = self.train_loss / test_iteration_interval

            train_mse = train_mse.mean()
            train_mae = train_mae.mean()
            train_balanced_mse = train_balanced_mse.mean()
            train_balanced_mae = train_balanced_mae.mean()

            evaluater.clear_all()

            writer.add_scalars("loss", {"train": train_loss}, train_loss_iter)

            for i, thresh in enumerate(cfg.HKO.EVALUATION.THRESHOLDS):
                writer.add_scalars(f"csi/{thresh}", {"train": train_csi[:, i].mean()}, train_loss_iter)

            for i, thresh in enumerate(cfg.HKO.EVALUATION.THRESHOLDS):
                writer.add_scalars(f"hss/{thresh}", {"train": train_hss[:, i].mean()}, train_loss_iter)

            writer.add_scalars("mse", {"train": train_mse}, train_loss_iter)
            writer.add_scalars("mae", {"train": train_mae}, train_loss_iter)
            writer.add_scalars("balanced_mse", {"train": train_balanced_mse}, train_loss_iter)
            writer.add_scalars("balanced_mae", {"train": train_balanced_mae}, train_loss_iter)
            self.train_loss = 0.0

        return loss, output_numpy


def build_convlstm_nowcasting():
    seeded(1814)
    batch_size, height = 2, 16
    m = TrainIteration(batch_size, height)
    rng = np.random.RandomState(1814)
    yy, xx = np.meshgrid(np.arange(height), np.arange(height), indexing="ij")
    frames = []
    for t in range(6):
        cell = 230.0 * np.exp(-((yy - 5.0 - t) ** 2 + (xx - 4.0 - t) ** 2) / 12.0)
        frames.append(np.stack([cell + 20.0 * rng.rand(height, height) for _ in range(batch_size)])[:, None])
    train_batch = np.stack(frames).astype(np.uint8)  # S*B*1*H*W
    train_mask = np.ones_like(train_batch, dtype=bool)
    train_mask[:, :, :, :2, :] = False
    return m, (20, 10, train_batch, train_mask)
