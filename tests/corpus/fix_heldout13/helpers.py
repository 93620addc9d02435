"""Shared utilities of the thirteenth held-out set: seeding, a small MLP, stable-baselines3's
``explained_variance``, det3d's ``example_to_device`` (CenterPoint's trainer), stylegan2-ada-pytorch's
``training_stats`` (``report`` and the ``Collector``) and demucs' ``augment`` modules."""

from __future__ import annotations

import random
import re

import numpy as np
import torch
from torch import nn


def seeded(seed: int) -> None:
    """Seed every RNG the programs draw from (torch, numpy, Python's random)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mlp(sizes: list[int], act: type[nn.Module] = nn.ReLU, last_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(act())
    return nn.Sequential(*layers)


# ------------------------------------------------------------------ stable-baselines3 common/utils.py


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> np.ndarray:
    """Fraction of the return's variance that the value function explains (1 - Var[y - ypred] / Var[y])."""
    assert y_true.ndim == 1 and y_pred.ndim == 1
    var_y = np.var(y_true)
    return np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y  # BREAK: choose with np.where(var_y == 0, np.nan, 1 - ...) instead of branching on the traced variance


# ------------------------------------------------------------------ det3d (CenterPoint) torchie/apis/train.py


def example_to_device(example, device=None, non_blocking=False) -> dict:
    example_torch = {}
    for k, v in example.items():
        if k in ["anchors", "anchors_mask", "reg_targets", "reg_weights", "labels", "hm", "anno_box", "ind", "mask", "cat"]:
            example_torch[k] = [res.to(device, non_blocking=non_blocking) for res in v]
        elif k in ["voxels", "bev_map", "coordinates", "num_points", "points", "num_voxels"]:
            example_torch[k] = v.to(device, non_blocking=non_blocking)
        else:
            example_torch[k] = v
    return example_torch


# ------------------------------------------------------------------ stylegan2-ada-pytorch torch_utils/training_stats.py

_num_moments = 3  # [num_scalars, sum_of_scalars, sum_of_squares]
_reduce_dtype = torch.float32  # Data type to use for initial per-tensor reduction.
_counter_dtype = torch.float64  # Data type to use for the internal counters.
_counters: dict[str, dict[torch.device, torch.Tensor]] = {}  # Running counters on each device, updated by report().
_cumulative: dict[str, torch.Tensor] = {}  # Cumulative counters on the CPU, updated by _sync().


def reset_stats() -> None:
    _counters.clear()
    _cumulative.clear()


def report(name: str, value):
    """Broadcast the given set of scalars to all interested instances of Collector."""
    if name not in _counters:
        _counters[name] = dict()
    elems = torch.as_tensor(value)
    if elems.numel() == 0:
        return value
    elems = elems.detach().flatten().to(_reduce_dtype)
    moments = torch.stack([torch.ones_like(elems).sum(), elems.sum(), elems.square().sum()])
    assert moments.ndim == 1 and moments.shape[0] == _num_moments
    moments = moments.to(_counter_dtype)
    device = moments.device
    if device not in _counters[name]:
        _counters[name][device] = torch.zeros_like(moments)
    _counters[name][device].add_(moments)
    return value


def _sync(names: list[str]) -> list[tuple[str, torch.Tensor]]:
    """Synchronize the global cumulative counters across devices and processes (one process here)."""
    if len(names) == 0:
        return []
    deltas = []
    device = torch.device("cpu")
    for name in names:
        delta = torch.zeros([_num_moments], dtype=_counter_dtype, device=device)
        for counter in _counters[name].values():
            delta.add_(counter.to(device))
            counter.copy_(torch.zeros_like(counter))
        deltas.append(delta)
    deltas = torch.stack(deltas)
    deltas = deltas.cpu()
    for idx, name in enumerate(names):
        if name not in _cumulative:
            _cumulative[name] = torch.zeros([_num_moments], dtype=_counter_dtype)
        _cumulative[name].add_(deltas[idx])
    return [(name, _cumulative[name]) for name in names]


class Collector:
    """Collects the scalars broadcast by ``report()`` whose names match ``regex``, over user-defined intervals."""

    def __init__(self, regex: str = ".*", keep_previous: bool = True) -> None:
        self._regex = re.compile(regex)
        self._keep_previous = keep_previous
        self._cumulative: dict[str, torch.Tensor] = dict()
        self._moments: dict[str, torch.Tensor] = dict()
        self.update()
        self._moments.clear()

    def names(self) -> list[str]:
        return [name for name in _counters if self._regex.fullmatch(name)]

    def update(self) -> None:
        if not self._keep_previous:
            self._moments.clear()
        for name, cumulative in _sync(self.names()):
            if name not in self._cumulative:
                self._cumulative[name] = torch.zeros([_num_moments], dtype=_counter_dtype)
            delta = cumulative - self._cumulative[name]
            self._cumulative[name].copy_(cumulative)
            if float(delta[0]) != 0:  # BREAK: keep the previous moments with torch.where(delta[0] != 0, delta, previous) instead of a host-side test
                self._moments[name] = delta

    def _get_delta(self, name: str) -> torch.Tensor:
        assert self._regex.fullmatch(name)
        if name not in self._moments:
            self._moments[name] = torch.zeros([_num_moments], dtype=_counter_dtype)
        return self._moments[name]

    def num(self, name: str) -> int:
        delta = self._get_delta(name)
        return int(delta[0])

    def mean(self, name: str) -> float:
        delta = self._get_delta(name)
        if int(delta[0]) == 0:  # BREAK: ADA only needs the sign of the mean: read the moments as a tensor at the call site (nan when nothing was reported, as float('nan') gives)
            return float("nan")
        return float(delta[1] / delta[0])

    def __getitem__(self, name: str) -> float:
        return self.mean(name)


# ------------------------------------------------------------------ facebookresearch/demucs demucs/augment.py


class Shift(nn.Module):
    """Randomly shift audio in time by up to `shift` samples."""

    def __init__(self, shift=8192):
        super().__init__()
        self.shift = shift

    def forward(self, wav):
        batch, sources, channels, time = wav.size()
        length = time - self.shift
        if self.shift > 0:
            if not self.training:
                wav = wav[..., :length]
            else:
                offsets = torch.randint(self.shift, [batch, sources, 1, 1], device=wav.device)
                offsets = offsets.expand(-1, -1, channels, -1)
                indexes = torch.arange(length, device=wav.device)
                wav = wav.gather(3, indexes + offsets)
        return wav


class FlipChannels(nn.Module):
    """Flip left-right channels."""

    def forward(self, wav):
        batch, sources, channels, time = wav.size()
        if self.training and wav.size(2) == 2:
            left = torch.randint(2, (batch, sources, 1, 1), device=wav.device)
            left = left.expand(-1, -1, -1, time)
            right = 1 - left
            wav = torch.cat([wav.gather(2, left), wav.gather(2, right)], dim=2)
        return wav


class FlipSign(nn.Module):
    """Random sign flip."""

    def forward(self, wav):
        batch, sources, channels, time = wav.size()
        if self.training:
            signs = torch.randint(2, (batch, sources, 1, 1), device=wav.device, dtype=torch.float32)
            wav = wav * (2 * signs - 1)
        return wav


class Remix(nn.Module):
    """Shuffle sources to make new mixes."""

    def __init__(self, group_size=4):
        super().__init__()
        self.group_size = group_size

    def forward(self, wav):
        batch, streams, channels, time = wav.size()
        device = wav.device
        if self.training:
            group_size = self.group_size or batch
            if batch % group_size != 0:
                raise ValueError(f"Batch size {batch} must be divisible by group size {group_size}")
            groups = batch // group_size
            wav = wav.view(groups, group_size, streams, channels, time)
            permutations = torch.argsort(torch.rand(groups, group_size, streams, 1, 1, device=device), dim=1)
            wav = wav.gather(1, permutations.expand(-1, -1, -1, channels, time))
            wav = wav.view(batch, streams, channels, time)
        return wav


class Scale(nn.Module):
    def __init__(self, proba=1.0, min=0.25, max=1.25):
        super().__init__()
        self.proba = proba
        self.min = min
        self.max = max

    def forward(self, wav):
        batch, streams, channels, time = wav.size()
        device = wav.device
        if self.training and random.random() < self.proba:  # BREAK must-not: whether this batch is rescaled is Python's random draw; a torch draw would change both streams
            scales = torch.empty(batch, streams, 1, 1, device=device).uniform_(self.min, self.max)
            wav *= scales
        return wav
