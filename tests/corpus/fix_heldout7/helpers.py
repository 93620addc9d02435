"""Utilities several programs of this set share, the way a project's ``utils.py`` does:
a lengths-to-mask helper, a NaN guard for sensor/decoder data, a seeded-input factory."""

from __future__ import annotations

import torch


def seeded(seed: int) -> torch.Generator:
    """A CPU generator for building a program's inputs and weights reproducibly."""
    return torch.Generator().manual_seed(seed)


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool mask, True on real positions (fairseq/espnet style)."""
    if max_len is None:
        max_len = int(lengths.max())  # BREAK: callers whose batch is padded to its longest item pass max_len=x.shape[1]
    pos = torch.arange(max_len, device=lengths.device)
    return pos[None, :] < lengths[:, None]


def nan_guard(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Replace NaNs (dropped sensor samples, failed decodes) by ``fill``; only touch x when it has any."""
    if torch.isnan(x).any():  # BREAK: torch.where(torch.isnan(x), fill, x) is the same tensor either way, no branch
        x = torch.where(torch.isnan(x), torch.full_like(x, fill), x)
    return x
