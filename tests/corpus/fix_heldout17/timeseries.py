"""Time-series forecasting: ElementAI/N-BEATS (the M4 experiment).

``models/nbeats.py``'s interpretable ``NBeats`` (``NBeatsBlock``s over the ``TrendBasis`` polynomial and the
``SeasonalityBasis`` harmonics built with numpy, the doubly residual stacking on the flipped history),
``common/sampler.py``'s ``TimeseriesSampler`` (windows cut at ``np.random.randint`` points of the ragged M4 series,
with their masks), ``common/torch/losses.py``' ``mase_loss`` / ``divide_no_nan``, and one iteration of
``experiments/trainer.py``'s ``trainer`` (``next(training_set)``, ``to_tensor``, Adam, the NaN stop on
``float(training_loss)``, gradient clipping, the step-decayed learning rate).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch as t

from .helpers import seeded

# the M4 hourly subset's meta (datasets/m4.py's M4Meta, cut down) and the experiment's gin bindings
HORIZONS_MAP = {"Yearly": 6, "Quarterly": 8, "Monthly": 18, "Weekly": 13, "Daily": 14, "Hourly": 48}
FREQUENCY_MAP = {"Yearly": 1, "Quarterly": 4, "Monthly": 12, "Weekly": 1, "Daily": 1, "Hourly": 24}
GIN_BINDINGS = {
    "instance.history_size": {"Hourly": 2},
    "instance.iterations": {"Hourly": 30},
    "instance.model_type": "interpretable",
    "interpretable.seasonality_layer_size": 32,
    "interpretable.seasonality_blocks": 1,
    "interpretable.seasonality_layers": 2,
    "interpretable.trend_layer_size": 16,
    "interpretable.degree_of_polynomial": 2,
    "interpretable.trend_blocks": 1,
    "interpretable.trend_layers": 2,
    "interpretable.num_of_harmonics": 1,
    "TimeseriesSampler.batch_size": 8,
    "trainer.loss_name": "MASE",
    "trainer.learning_rate": 0.001,
}


def default_device() -> t.device:
    """PyTorch default device is GPU when available, CPU otherwise."""
    return t.device("cuda" if t.cuda.is_available() else "cpu")


def to_tensor(array: np.ndarray) -> t.Tensor:
    """Convert numpy array to tensor on default device."""
    return t.tensor(array, dtype=t.float32).to(default_device())


# ------------------------------------------------------------------ common/sampler.py


class TimeseriesSampler:
    def __init__(
        self,
        timeseries,
        insample_size: int,
        outsample_size: int,
        window_sampling_limit: int,
        batch_size: int = 1024,
    ):
        """
        Timeseries sampler.

        :param timeseries: Timeseries data to sample from. Shape: timeseries, timesteps
        :param insample_size: Insample window size. If timeseries is shorter then it will be 0-padded and masked.
        :param outsample_size: Outsample window size. If timeseries is shorter then it will be 0-padded and masked.
        :param window_sampling_limit: Size of history the sampler should use.
        :param batch_size: Number of sampled windows.
        """
        self.timeseries = [ts for ts in timeseries]
        self.window_sampling_limit = window_sampling_limit
        self.batch_size = batch_size
        self.insample_size = insample_size
        self.outsample_size = outsample_size

    def __iter__(self):
        """
        Batches of sampled windows.

        :return: Batches of:
         Insample: "batch size" windows of "insample size" each.
         Insample mask: "batch size" windows of "insample size" each.
         Outsample: "batch size" windows of "outsample size" each.
         Outsample mask: "batch size" windows of "outsample size" each.
        """
        while True:
            insample = np.zeros((self.batch_size, self.insample_size))
            insample_mask = np.zeros((self.batch_size, self.insample_size))
            outsample = np.zeros((self.batch_size, self.outsample_size))
            outsample_mask = np.zeros((self.batch_size, self.outsample_size))
            sampled_ts_indices = np.random.randint(len(self.timeseries), size=self.batch_size)
            for i, sampled_index in enumerate(sampled_ts_indices):
                sampled_timeseries = self.timeseries[sampled_index]
                cut_point = np.random.randint(
                    low=max(1, len(sampled_timeseries) - self.window_sampling_limit),
                    high=len(sampled_timeseries),
                    size=1,
                )[0]

                insample_window = sampled_timeseries[max(0, cut_point - self.insample_size) : cut_point]
                insample[i, -len(insample_window) :] = insample_window
                insample_mask[i, -len(insample_window) :] = 1.0
                outsample_window = sampled_timeseries[
                    cut_point : min(len(sampled_timeseries), cut_point + self.outsample_size)
                ]
                outsample[i, : len(outsample_window)] = outsample_window
                outsample_mask[i, : len(outsample_window)] = 1.0
            yield insample, insample_mask, outsample, outsample_mask


# ------------------------------------------------------------------ models/nbeats.py


class NBeatsBlock(t.nn.Module):
    """
    N-BEATS block which takes a basis function as an argument.
    """

    def __init__(
        self, input_size, theta_size: int, basis_function: t.nn.Module, layers: int, layer_size: int
    ):
        """
        N-BEATS block.

        :param input_size: Insample size.
        :param theta_size:  Number of parameters for the basis function.
        :param basis_function: Basis function which takes the parameters and produces backcast and forecast.
        :param layers: Number of layers.
        :param layer_size: Layer size.
        """
        super().__init__()
        self.layers = t.nn.ModuleList(
            [t.nn.Linear(in_features=input_size, out_features=layer_size)]
            + [t.nn.Linear(in_features=layer_size, out_features=layer_size) for _ in range(layers - 1)]
        )
        self.basis_parameters = t.nn.Linear(in_features=layer_size, out_features=theta_size)
        self.basis_function = basis_function

    def forward(self, x: t.Tensor):
        block_input = x
        for layer in self.layers:
            block_input = t.relu(layer(block_input))
        basis_parameters = self.basis_parameters(block_input)
        return self.basis_function(basis_parameters)


class NBeats(t.nn.Module):
    """
    N-Beats Model.
    """

    def __init__(self, blocks: t.nn.ModuleList):
        super().__init__()
        self.blocks = blocks

    def forward(self, x: t.Tensor, input_mask: t.Tensor) -> t.Tensor:
        residuals = x.flip(dims=(1,))
        input_mask = input_mask.flip(dims=(1,))
        forecast = x[:, -1:]
        for _, block in enumerate(self.blocks):
            backcast, block_forecast = block(residuals)
            residuals = (residuals - backcast) * input_mask
            forecast = forecast + block_forecast
        return forecast


class TrendBasis(t.nn.Module):
    """
    Polynomial function to model trend.
    """

    def __init__(self, degree_of_polynomial: int, backcast_size: int, forecast_size: int):
        super().__init__()
        self.polynomial_size = degree_of_polynomial + 1  # degree of polynomial with constant term
        self.backcast_time = t.nn.Parameter(
            t.tensor(
                np.concatenate(
                    [
                        np.power(np.arange(backcast_size, dtype=np.float64) / backcast_size, i)[None, :]
                        for i in range(self.polynomial_size)
                    ]
                ),
                dtype=t.float32,
            ),
            requires_grad=False,
        )
        self.forecast_time = t.nn.Parameter(
            t.tensor(
                np.concatenate(
                    [
                        np.power(np.arange(forecast_size, dtype=np.float64) / forecast_size, i)[None, :]
                        for i in range(self.polynomial_size)
                    ]
                ),
                dtype=t.float32,
            ),
            requires_grad=False,
        )

    def forward(self, theta: t.Tensor):
        backcast = t.einsum("bp,pt->bt", theta[:, self.polynomial_size :], self.backcast_time)
        forecast = t.einsum("bp,pt->bt", theta[:, : self.polynomial_size], self.forecast_time)
        return backcast, forecast


class SeasonalityBasis(t.nn.Module):
    """
    Harmonic functions to model seasonality.
    """

    def __init__(self, harmonics: int, backcast_size: int, forecast_size: int):
        super().__init__()
        self.frequency = np.append(
            np.zeros(1, dtype=np.float32),
            np.arange(harmonics, harmonics / 2 * forecast_size, dtype=np.float32) / harmonics,
        )[None, :]
        backcast_grid = (
            -2
            * np.pi
            * (np.arange(backcast_size, dtype=np.float32)[:, None] / forecast_size)
            * self.frequency
        )
        forecast_grid = (
            2 * np.pi * (np.arange(forecast_size, dtype=np.float32)[:, None] / forecast_size) * self.frequency
        )
        self.backcast_cos_template = t.nn.Parameter(
            t.tensor(np.transpose(np.cos(backcast_grid)), dtype=t.float32), requires_grad=False
        )
        self.backcast_sin_template = t.nn.Parameter(
            t.tensor(np.transpose(np.sin(backcast_grid)), dtype=t.float32), requires_grad=False
        )
        self.forecast_cos_template = t.nn.Parameter(
            t.tensor(np.transpose(np.cos(forecast_grid)), dtype=t.float32), requires_grad=False
        )
        self.forecast_sin_template = t.nn.Parameter(
            t.tensor(np.transpose(np.sin(forecast_grid)), dtype=t.float32), requires_grad=False
        )

    def forward(self, theta: t.Tensor):
        params_per_harmonic = theta.shape[1] // 4
        backcast_harmonics_cos = t.einsum(
            "bp,pt->bt",
            theta[:, 2 * params_per_harmonic : 3 * params_per_harmonic],
            self.backcast_cos_template,
        )
        backcast_harmonics_sin = t.einsum(
            "bp,pt->bt", theta[:, 3 * params_per_harmonic :], self.backcast_sin_template
        )
        backcast = backcast_harmonics_sin + backcast_harmonics_cos
        forecast_harmonics_cos = t.einsum(
            "bp,pt->bt", theta[:, :params_per_harmonic], self.forecast_cos_template
        )
        forecast_harmonics_sin = t.einsum(
            "bp,pt->bt", theta[:, params_per_harmonic : 2 * params_per_harmonic], self.forecast_sin_template
        )
        forecast = forecast_harmonics_sin + forecast_harmonics_cos

        return backcast, forecast


def interpretable(
    input_size: int,
    output_size: int,
    trend_blocks: int,
    trend_layers: int,
    trend_layer_size: int,
    degree_of_polynomial: int,
    seasonality_blocks: int,
    seasonality_layers: int,
    seasonality_layer_size: int,
    num_of_harmonics: int,
):
    """
    Create N-BEATS interpretable model.
    """
    trend_block = NBeatsBlock(
        input_size=input_size,
        theta_size=2 * (degree_of_polynomial + 1),
        basis_function=TrendBasis(
            degree_of_polynomial=degree_of_polynomial, backcast_size=input_size, forecast_size=output_size
        ),
        layers=trend_layers,
        layer_size=trend_layer_size,
    )
    seasonality_block = NBeatsBlock(
        input_size=input_size,
        theta_size=4 * int(np.ceil(num_of_harmonics / 2 * output_size) - (num_of_harmonics - 1)),
        basis_function=SeasonalityBasis(
            harmonics=num_of_harmonics, backcast_size=input_size, forecast_size=output_size
        ),
        layers=seasonality_layers,
        layer_size=seasonality_layer_size,
    )

    return NBeats(
        t.nn.ModuleList(
            [trend_block for _ in range(trend_blocks)]
            + [seasonality_block for _ in range(seasonality_blocks)]
        )
    )


# ------------------------------------------------------------------ common/torch/losses.py


def divide_no_nan(a, b):
    """
    a/b where the resulted NaN or Inf are replaced by 0.
    """
    result = a / b
    result[result != result] = 0.0
    result[result == np.inf] = 0.0
    return result


def mase_loss(insample: t.Tensor, freq: int, forecast: t.Tensor, target: t.Tensor, mask: t.Tensor) -> t.float:
    """
    MASE loss as defined in "Scaled Errors" https://robjhyndman.com/papers/mase.pdf

    :param insample: Insample values. Shape: batch, time_i
    :param freq: Frequency value
    :param forecast: Forecast values. Shape: batch, time_o
    :param target: Target values. Shape: batch, time_o
    :param mask: 0/1 mask. Shape: batch, time_o
    :return: Loss value
    """
    masep = t.mean(t.abs(insample[:, freq:] - insample[:, :-freq]), dim=1)
    masked_masep_inv = divide_no_nan(mask, masep[:, None])
    return t.mean(t.abs(target - forecast) * masked_masep_inv)


def smape_2_loss(forecast, target, mask) -> t.float:
    return 200 * t.mean(
        divide_no_nan(t.abs(forecast - target), t.abs(forecast.data) + t.abs(target.data)) * mask
    )


def __loss_fn(loss_name: str):
    def loss(x, freq, forecast, target, target_mask):
        if loss_name == "MASE":
            return mase_loss(x, freq, forecast, target, target_mask)
        elif loss_name == "SMAPE":
            return smape_2_loss(forecast, target, target_mask)
        else:
            raise Exception(f"Unknown loss function: {loss_name}")

    return loss


loss_fn = __loss_fn


# ------------------------------------------------------------------ experiments/trainer.py, experiments/m4/main.py


class Trainer(t.nn.Module):
    """``trainer``'s loop body for iteration ``i`` (the model, optimizer and sampler built as ``m4/main.py`` does)."""

    def __init__(self, seasonal_pattern, timeseries, iterations):
        super().__init__()
        history_size_in_horizons = GIN_BINDINGS["instance.history_size"][seasonal_pattern]
        horizon = HORIZONS_MAP[seasonal_pattern]
        input_size = history_size_in_horizons * horizon
        self.timeseries_frequency = FREQUENCY_MAP[seasonal_pattern]

        model_factory = partial(
            interpretable,
            trend_blocks=GIN_BINDINGS["interpretable.trend_blocks"],
            trend_layers=GIN_BINDINGS["interpretable.trend_layers"],
            trend_layer_size=GIN_BINDINGS["interpretable.trend_layer_size"],
            degree_of_polynomial=GIN_BINDINGS["interpretable.degree_of_polynomial"],
            seasonality_blocks=GIN_BINDINGS["interpretable.seasonality_blocks"],
            seasonality_layers=GIN_BINDINGS["interpretable.seasonality_layers"],
            seasonality_layer_size=GIN_BINDINGS["interpretable.seasonality_layer_size"],
            num_of_harmonics=GIN_BINDINGS["interpretable.num_of_harmonics"],
        )
        self.model = model_factory(input_size=input_size, output_size=horizon)
        self.training_set = iter(
            TimeseriesSampler(
                timeseries=timeseries,
                insample_size=input_size,
                outsample_size=horizon,
                window_sampling_limit=int(10 * horizon),
                batch_size=GIN_BINDINGS["TimeseriesSampler.batch_size"],
            )
        )
        self.learning_rate = GIN_BINDINGS["trainer.learning_rate"]
        self.optimizer = t.optim.Adam(self.model.parameters(), lr=self.learning_rate)
        self.training_loss_fn = loss_fn(GIN_BINDINGS["trainer.loss_name"])
        self.lr_decay_step = iterations // 3
        if self.lr_decay_step == 0:
            self.lr_decay_step = 1

    def forward(self, i):
        model, optimizer = self.model, self.optimizer
        model.train()
        x, x_mask, y, y_mask = map(to_tensor, next(self.training_set))  # BREAK must-not: numpy RNG
        optimizer.zero_grad()  # BREAK: set the grads to None directly
        forecast = model(x, x_mask)
        training_loss = self.training_loss_fn(x, self.timeseries_frequency, forecast, y, y_mask)

        if np.isnan(float(training_loss)):  # BREAK must-not: stops before backward and step at a NaN
            return None

        training_loss.backward()  # BREAK must-not: the step needs the gradients
        t.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        for param_group in optimizer.param_groups:
            param_group["lr"] = self.learning_rate * 0.5 ** (i // self.lr_decay_step)
        return training_loss.detach(), forecast.detach(), optimizer.param_groups[0]["lr"]


def build_nbeats_train_iteration():
    seeded(1712)
    # ragged hourly series with a daily cycle (M4's training part, a few of them)
    timeseries = []
    for n in (150, 200, 120, 260, 90):
        steps = np.arange(n)
        timeseries.append(10 + np.sin(2 * np.pi * steps / 24) * 3 + np.random.randn(n) * 0.3 + steps * 0.01)
    m = Trainer("Hourly", timeseries, iterations=GIN_BINDINGS["instance.iterations"]["Hourly"])
    return m, (11,)
