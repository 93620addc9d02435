"""Utilities several programs of this set share, the way a project's ``utils.py`` / ``nets_utils.py`` does:
espnet's ``make_pad_mask``, PyG-style ``maybe_num_nodes`` and ``scatter``, TRL's masked whitening, and a
seeded-generator factory for the builders."""

from __future__ import annotations

import torch


def seeded(seed: int) -> torch.Generator:
    """A CPU generator for building a program's inputs reproducibly."""
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- padding masks (espnet nets_utils)


def make_pad_mask(lengths, xs: torch.Tensor | None = None, length_dim: int = -1, maxlen: int | None = None):
    """Make a mask tensor containing indices of the padded part (True on padding).

    >>> make_pad_mask([5, 3, 2])
    tensor([[False, False, False, False, False],
            [False, False, False,  True,  True],
            [False, False,  True,  True,  True]])
    """
    if length_dim == 0:
        raise ValueError(f"length_dim cannot be 0: {length_dim}")

    if not isinstance(lengths, list):
        lengths = lengths.long().tolist()  # BREAK: tensor compare; maxlen from the caller or xs
    bs = int(len(lengths))
    if maxlen is None:
        if xs is None:
            maxlen = int(max(lengths))
        else:
            maxlen = xs.size(length_dim)
    else:
        assert xs is None
        assert maxlen >= int(max(lengths))

    seq_range = torch.arange(0, maxlen, dtype=torch.int64)
    seq_range_expand = seq_range.unsqueeze(0).expand(bs, maxlen)
    seq_length_expand = seq_range_expand.new(lengths).unsqueeze(-1)
    mask = seq_range_expand >= seq_length_expand

    if xs is not None:
        assert xs.size(0) == bs, (xs.size(0), bs)
        if length_dim < 0:
            length_dim = xs.dim() + length_dim
        ind = tuple(slice(None) if i in (0, length_dim) else None for i in range(xs.dim()))
        mask = mask[ind].expand_as(xs).to(xs.device)
    return mask


def make_non_pad_mask(
    lengths, xs: torch.Tensor | None = None, length_dim: int = -1, maxlen: int | None = None
):
    """The complement of ``make_pad_mask``: True on real positions."""
    return ~make_pad_mask(lengths, xs, length_dim, maxlen)


# --------------------------------------------------------------------------- graph utils (PyG style)


def maybe_num_nodes(edge_index: torch.Tensor, num_nodes: int | None = None) -> int:
    if num_nodes is not None:
        return num_nodes
    return int(edge_index.max()) + 1 if edge_index.numel() > 0 else 0  # BREAK: caller passes x.size(0)


def scatter(
    src: torch.Tensor, index: torch.Tensor, dim: int = 0, dim_size: int | None = None, reduce: str = "sum"
) -> torch.Tensor:
    """Reduce ``src`` rows into ``dim_size`` buckets given by ``index`` ("sum" or "mean")."""
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0  # BREAK: caller passes dim_size
    size = list(src.size())
    size[dim] = dim_size
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


# --------------------------------------------------------------------------- masked statistics (TRL core)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Compute mean of tensor with a masked values."""
    if axis is not None:
        return (values * mask).sum(axis=axis) / mask.sum(axis=axis)
    return (values * mask).sum() / mask.sum()


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Compute variance of tensor with masked values."""
    mean = masked_mean(values, mask)
    centered_values = values - mean
    variance = masked_mean(centered_values**2, mask)
    if unbiased:
        mask_sum = mask.sum()
        if mask_sum == 0:  # BREAK: torch._assert_async(mask_sum != 0, ...) instead of the if
            raise ValueError(
                "The sum of the mask is zero, which can happen when `mini_batch_size=1`;"
                "try increase the `mini_batch_size` or `gradient_accumulation_steps`"
            )
        # note that if mask_sum == 1, then there is a division by zero issue
        # to avoid it you just need to use a larger minibatch_size
        bessel_correction = mask_sum / (mask_sum - 1)
        variance = variance * bessel_correction
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Whiten values with masked values."""
    mean, var = masked_mean(values, mask), masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened += mean
    return whitened
