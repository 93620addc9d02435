"""Helpers the programs of several files share: masked pooling, a NaN guard for gridded/tabular data, a warm-up factor."""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the rows of ``values`` (dim 0) that ``mask`` keeps; zeros when it keeps none."""
    w = mask.to(values.dtype).reshape(-1, *([1] * (values.dim() - 1)))
    if mask.sum() == 0:  # BREAK: dividing by the count clamped to 1 gives the same zeros when nothing is kept
        return values.sum(0) * 0.0
    return (values * w).sum(0) / mask.sum()


def nan_guard(x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Missing values (NaN over land, empty cells of a table) replaced by ``fill``, only when there are any."""
    if torch.isnan(x).any():  # BREAK: a torch.where on the any() flag picks the same tensor without a host read
        x = torch.nan_to_num(x, nan=fill)
    return x


def warmup_factor(step: torch.Tensor, warmup: int) -> float:
    """Linear warm-up factor for a step counter kept as a buffer."""
    s = int(step)  # BREAK: the factor can stay a tensor, clamped at 1
    return min(1.0, (s + 1) / warmup)
