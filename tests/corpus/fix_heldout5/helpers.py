"""Utilities the fifth held-out set's models share, kept apart the way a project keeps a utils module."""

from __future__ import annotations

import math

import torch


def clamp_unit(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Squeeze dequantised data into (0, 1) for a logit-space flow; noise can push a few values out."""
    if x.min() < 0 or x.max() > 1:  # BREAK: clamping values already in [0, 1] changes nothing, so clamp always
        x = x.clamp(0.0, 1.0)
    return x * (1 - 2 * eps) + eps


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of (x1, y1, x2, y2) boxes: (N, 4) x (M, 4) -> (N, M)."""
    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b[None, :] - inter + 1e-9)


def greedy_match(iou: torch.Tensor, thresh: float) -> list[tuple[int, int]]:
    """One-to-one assignment by descending IoU, the cheap stand-in for Hungarian matching in SORT-like trackers."""
    iou = iou.detach().clone()
    pairs = []
    for _ in range(min(iou.shape)):
        best, flat = iou.flatten().max(0)
        if best < thresh:  # BREAK: once the best IoU is under the threshold no later pick passes; mask instead of stopping
            break
        r, c = divmod(int(flat), iou.shape[1])
        pairs.append((r, c))
        iou[r, :] = -1.0
        iou[:, c] = -1.0
    return pairs


def voxelize(points: torch.Tensor, origin: torch.Tensor, voxel: float, res: int) -> torch.Tensor:
    """Binary occupancy of a res^3 grid; points falling outside the grid are ignored."""
    idx = ((points - origin) / voxel).floor().long()
    inside = ((idx >= 0) & (idx < res)).all(1)
    idx = idx[inside]  # BREAK: scatter every point with weight inside instead of dropping the outside ones
    grid = torch.zeros(res, res, res)
    grid[idx[:, 0], idx[:, 1], idx[:, 2]] = 1.0
    return grid


def time_gaps(mask: torch.Tensor) -> torch.Tensor:
    """BRITS' delta: steps since each feature was last observed, for a unit sampling interval."""
    rows = mask.tolist()  # BREAK: the recurrence delta_t = 1 + (1 - m_{t-1}) * delta_{t-1} runs on tensors
    gaps = []
    for seq in rows:
        prev = [0.0] * len(seq[0])
        out = [prev]
        for t in range(1, len(seq)):
            prev = [1.0 + (1.0 - m) * g for m, g in zip(seq[t - 1], prev, strict=True)]
            out.append(prev)
        gaps.append(out)
    return torch.tensor(gaps)


def clip_coef(grads: list[torch.Tensor], max_norm: float, eps: float = 1e-6) -> float:
    """The global-norm clipping factor for a list of gradients (1.0 when under max_norm)."""
    total = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))  # BREAK: the norm and the factor can stay tensors
    return min(1.0, max_norm / (total + eps))


def cosine_schedule(step: torch.Tensor, total: int, start: float, end: float) -> float:
    """Cosine interpolation from start to end over total steps, then flat."""
    progress = min(1.0, float(step) / total)  # BREAK: clamp and cos work on the step tensor
    return end + 0.5 * (start - end) * (1 + math.cos(math.pi * progress))


def robust_threshold(x: torch.Tensor, q: float) -> float:
    """The q-quantile of |x| over the whole batch, as a plain number (detached: the threshold is not learned)."""
    return float(torch.quantile(x.detach().abs().flatten(), q))  # BREAK: a detached 0-d tensor serves as the bound


def last_token(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's hidden state at its last non-pad position (right padding)."""
    ends = (mask.sum(1) - 1).tolist()  # BREAK: a gather with the end indices as a tensor
    return torch.stack([h[i, e] for i, e in enumerate(ends)])


def event_times(tokens: torch.Tensor, shift_offset: int) -> torch.Tensor:
    """Absolute onset (in ticks) of each event; a time-shift token advances the clock by its value."""
    out = []
    for row in tokens.tolist():  # BREAK: the clock is a cumulative sum of the shift amounts
        clock, times = 0, []
        for tok in row:
            if tok >= shift_offset:
                clock += tok - shift_offset + 1
            times.append(float(clock))
        out.append(times)
    return torch.tensor(out)


def ngram_banned(seq: torch.Tensor, n: int) -> list[list[int]]:
    """For each row, the tokens that would repeat an n-gram already in the row (no-repeat-ngram blocking)."""
    banned = []
    for row in seq.tolist():  # BREAK: compare the last n-1 tokens with every window and scatter into a vocab mask
        seen: dict[tuple[int, ...], list[int]] = {}
        for i in range(len(row) - n + 1):
            seen.setdefault(tuple(row[i : i + n - 1]), []).append(row[i + n - 1])
        banned.append(seen.get(tuple(row[len(row) - n + 1 :]), []))
    return banned


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Stochastic depth per sample: zero a residual branch with probability p, rescale the survivors."""
    if p == 0.0 or not training:
        return x
    keep = 1.0 - p
    mask = (torch.rand(x.shape[0], *([1] * (x.ndim - 1))) < keep).to(x.dtype)
    return x * mask / keep
