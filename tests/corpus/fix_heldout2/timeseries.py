"""Time series: a learnable Kalman filter over a series with missing observations, and a GRU
forecaster that stops rolling out when its forecast diverges."""

from __future__ import annotations

import torch
from torch import nn


class LocalLinearTrendKF(nn.Module):
    """x_t = F x_{t-1} + w,  y_t = H x_t + v; the noise scales are learned by maximising the likelihood."""

    def __init__(self) -> None:
        super().__init__()
        self.transition = nn.Parameter(torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
        self.emission = nn.Parameter(torch.tensor([[1.0, 0.0]]))
        self.log_q = nn.Parameter(torch.tensor([-2.0, -4.0]))
        self.log_r = nn.Parameter(torch.tensor([-1.0]))

    def forward(self, ys: torch.Tensor):
        F_, H = self.transition, self.emission
        Q, R = torch.diag(self.log_q.exp()), torch.diag(self.log_r.exp())
        eye = torch.eye(2)
        x = torch.zeros(2)
        P = torch.eye(2) * 10.0
        nll = 0.0
        filtered = []
        for t in range(ys.shape[0]):
            x = F_ @ x
            P = F_ @ P @ F_.T + Q
            y = ys[t]
            if torch.isnan(y).any():  # BREAK: computing the update on nan_to_num(y) and selecting it with torch.where(observed, ...) keeps the states, the likelihood and its gradients
                filtered.append(x)
                continue
            S = H @ P @ H.T + R
            K = P @ H.T @ torch.linalg.inv(S)
            innovation = y - H @ x
            x = x + K @ innovation
            P = (eye - K @ H) @ P
            nll = nll + 0.5 * (innovation @ torch.linalg.solve(S, innovation) + torch.logdet(S))
            filtered.append(x)
        return torch.stack(filtered), nll


def build_kalman_filter():
    torch.manual_seed(13)
    model = LocalLinearTrendKF()
    t = torch.arange(12, dtype=torch.float32)
    ys = (0.5 * t + torch.randn(12) * 0.3)[:, None]
    ys[[3, 4, 9]] = float("nan")  # missing observations
    return model, ys


class GRUForecaster(nn.Module):
    def __init__(self, hidden: int = 16, horizon: int = 6, max_abs: float = 3.0) -> None:
        super().__init__()
        self.hidden, self.horizon, self.max_abs = hidden, horizon, max_abs
        self.cell = nn.GRUCell(1, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        # instance normalisation (RevIN-style), undone on the forecast
        mean = history.mean(dim=1, keepdim=True)
        std = history.std(dim=1, keepdim=True) + 1e-5
        z = (history - mean) / std
        h = z.new_zeros(z.shape[0], self.hidden)
        for t in range(z.shape[1]):
            h = self.cell(z[:, t:t + 1], h)
        preds = []
        y = z[:, -1:]
        for _ in range(self.horizon):
            h = self.cell(y, h)
            y = y + self.head(h)  # the head predicts the step's change
            preds.append(y)
            if y.abs().max() > self.max_abs:  # BREAK must-not: a diverging rollout stops early, so the forecast's length depends on the values
                break
        return torch.cat(preds, dim=1) * std + mean


def build_ar_forecast():
    torch.manual_seed(14)
    model = GRUForecaster()
    with torch.no_grad():
        model.head.bias.fill_(1.0)  # drifts upward, so the rollout stops before the horizon
    history = torch.sin(torch.linspace(0, 6, 10))[None].repeat(2, 1) + torch.randn(2, 10) * 0.1
    return model, history
