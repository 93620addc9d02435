"""Utilities several programs of this set share, the way a project's ``utils.py`` does: a seeded-generator
factory for the builders, PyG-style ``scatter`` and global pooling, and OpenFold's ``masked_mean``."""

from __future__ import annotations

import torch


def seeded(seed: int) -> torch.Generator:
    """A CPU generator for building a program's inputs reproducibly."""
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- graph pooling (PyG style)


def scatter(
    src: torch.Tensor, index: torch.Tensor, dim: int = 0, dim_size: int | None = None, reduce: str = "sum"
) -> torch.Tensor:
    """Reduce ``src`` rows into ``dim_size`` buckets given by ``index`` ("sum", "mean" or "max")."""
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0  # BREAK: the caller passes dim_size
    size = list(src.size())
    size[dim] = dim_size
    if reduce == "max":
        expanded = index.view([-1] + [1] * (src.dim() - 1)).expand_as(src)
        return src.new_full(size, float("-inf")).scatter_reduce(dim, expanded, src, "amax", include_self=True)
    out = src.new_zeros(size).index_add_(dim, index, src)
    if reduce == "sum":
        return out
    if reduce == "mean":
        count = src.new_zeros(dim_size).index_add_(0, index, src.new_ones(index.numel()))
        count = count.clamp(min=1)
        shape = [1] * src.dim()
        shape[dim] = dim_size
        return out / count.view(shape)
    raise ValueError(f"unknown reduce {reduce!r}")


def global_add_pool(x: torch.Tensor, batch: torch.Tensor | None, size: int | None = None) -> torch.Tensor:
    """Returns batch-wise graph-level-outputs by adding node features across the node dimension."""
    dim = -1 if x.dim() == 1 else -2
    if batch is None:
        return x.sum(dim=dim, keepdim=x.dim() <= 2)
    size = int(batch.max().item() + 1) if size is None else size
    return scatter(x, batch, dim=0, dim_size=size, reduce="sum")


def global_mean_pool(x: torch.Tensor, batch: torch.Tensor | None, size: int | None = None) -> torch.Tensor:
    """Returns batch-wise graph-level-outputs by averaging node features across the node dimension."""
    dim = -1 if x.dim() == 1 else -2
    if batch is None:
        return x.mean(dim=dim, keepdim=x.dim() <= 2)
    size = int(batch.max().item() + 1) if size is None else size  # BREAK: the caller passes size=num_graphs
    return scatter(x, batch, dim=0, dim_size=size, reduce="mean")


def global_max_pool(x: torch.Tensor, batch: torch.Tensor | None, size: int | None = None) -> torch.Tensor:
    """Returns batch-wise graph-level-outputs by taking the channel-wise maximum across the node dimension."""
    dim = -1 if x.dim() == 1 else -2
    if batch is None:
        return x.max(dim=dim, keepdim=x.dim() <= 2)[0]
    size = int(batch.max().item() + 1) if size is None else size  # BREAK: the caller passes size=num_graphs
    return scatter(x, batch, dim=0, dim_size=size, reduce="max")


# --------------------------------------------------------------------------- OpenFold tensor utils


def masked_mean(mask: torch.Tensor, value: torch.Tensor, dim, eps: float = 1e-4) -> torch.Tensor:
    mask = mask.expand(*value.shape)
    return torch.sum(mask * value, dim=dim) / (eps + torch.sum(mask, dim=dim))
