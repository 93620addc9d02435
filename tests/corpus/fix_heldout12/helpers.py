"""Shared utilities of the twelfth held-out set: seeding, a small MLP and attention block, Hugging Face's
numpy span masking (``_compute_mask_indices``), torchvision's focal and generalized-IoU losses, detectron2's
point sampling, TRL's ``flush_left`` and benchmarking-gnns' class-balanced cross-entropy weights."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
import torch.nn.functional as F
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


class SelfAttention(nn.Module):
    """Multi-head attention with an optional key-padding mask (1 = keep) and a causal flag."""

    def __init__(self, dim: int, heads: int, causal: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        if self.causal:
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~causal, float("-inf"))
        if key_mask is not None:
            att = att.masked_fill(key_mask[:, None, None, :] == 0, torch.finfo(att.dtype).min)
        att = self.drop(att.softmax(-1))
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """A pre-norm transformer block (GPT-2 / ViT layout)."""

    def __init__(self, dim: int, heads: int, causal: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, causal, dropout)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), key_mask)
        return x + self.mlp(self.ln2(x))


# ------------------------------------------------------------------ span masking (transformers' wav2vec2 / HuBERT)


def compute_mask_indices(shape: tuple[int, int], mask_prob: float, mask_length: int,
                         attention_mask: torch.Tensor | None = None, min_masks: int = 0) -> np.ndarray:
    """Random spans of ``mask_length`` frames covering about ``mask_prob`` of each sequence (SpecAugment)."""
    batch_size, sequence_length = shape
    if mask_length < 1:
        raise ValueError("`mask_length` has to be bigger than 0.")
    if mask_length > sequence_length:
        raise ValueError(f"`mask_length` has to be smaller than `sequence_length`, got {mask_length} and {sequence_length}")

    epsilon = np.random.rand()  # BREAK must-not: numpy's draw for the probabilistic rounding of the span count

    def compute_num_masked_span(input_length: int) -> int:
        num_masked_span = int(mask_prob * input_length / mask_length + epsilon)
        num_masked_span = max(num_masked_span, min_masks)
        if num_masked_span * mask_length > sequence_length:
            num_masked_span = sequence_length // mask_length
        if input_length - (mask_length - 1) < num_masked_span:
            num_masked_span = max(input_length - (mask_length - 1), 0)
        return num_masked_span

    input_lengths = (
        attention_mask.detach().sum(-1).tolist()  # BREAK must-not: the lengths bound numpy's draws of span starts below
        if attention_mask is not None
        else [sequence_length for _ in range(batch_size)]
    )
    spec_aug_mask = np.zeros((batch_size, sequence_length), dtype=bool)
    spec_aug_mask_idxs = []
    max_num_masked_span = compute_num_masked_span(sequence_length)
    if max_num_masked_span == 0:
        return spec_aug_mask

    for input_length in input_lengths:
        num_masked_span = compute_num_masked_span(input_length)
        spec_aug_mask_idx = np.random.choice(np.arange(input_length - (mask_length - 1)), num_masked_span, replace=False)  # BREAK must-not: the span starts are numpy's draw
        # pad with the first start so every row has max_num_masked_span starts
        dummy_mask_idx = spec_aug_mask_idx[0] if len(spec_aug_mask_idx) > 0 else sequence_length - 1
        spec_aug_mask_idx = np.concatenate(
            [spec_aug_mask_idx, np.ones(max_num_masked_span - num_masked_span, dtype=np.int32) * dummy_mask_idx])
        spec_aug_mask_idxs.append(spec_aug_mask_idx)

    spec_aug_mask_idxs = np.array(spec_aug_mask_idxs)
    spec_aug_mask_idxs = np.broadcast_to(spec_aug_mask_idxs[:, :, None], (batch_size, max_num_masked_span, mask_length))
    spec_aug_mask_idxs = spec_aug_mask_idxs.reshape(batch_size, max_num_masked_span * mask_length)
    offsets = np.arange(mask_length)[None, None, :]
    offsets = np.broadcast_to(offsets, (batch_size, max_num_masked_span, mask_length)).reshape(
        batch_size, max_num_masked_span * mask_length)
    spec_aug_mask_idxs = spec_aug_mask_idxs + offsets
    if spec_aug_mask_idxs.max() > sequence_length - 1:
        spec_aug_mask_idxs[spec_aug_mask_idxs > sequence_length - 1] = sequence_length - 1
    np.put_along_axis(spec_aug_mask, spec_aug_mask_idxs, 1, -1)
    return spec_aug_mask


# ------------------------------------------------------------------ torchvision.ops losses


def sigmoid_focal_loss(inputs: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25, gamma: float = 2.0,
                       reduction: str = "none") -> torch.Tensor:
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


def generalized_box_iou_loss(boxes1: torch.Tensor, boxes2: torch.Tensor, reduction: str = "none",
                             eps: float = 1e-7) -> torch.Tensor:
    x1, y1, x2, y2 = boxes1.unbind(dim=-1)
    x1g, y1g, x2g, y2g = boxes2.unbind(dim=-1)
    xkis1, ykis1 = torch.max(x1, x1g), torch.max(y1, y1g)
    xkis2, ykis2 = torch.min(x2, x2g), torch.min(y2, y2g)
    intsctk = torch.zeros_like(x1)
    mask = (ykis2 > ykis1) & (xkis2 > xkis1)
    intsctk = torch.where(mask, (xkis2 - xkis1) * (ykis2 - ykis1), intsctk)
    unionk = (x2 - x1) * (y2 - y1) + (x2g - x1g) * (y2g - y1g) - intsctk
    iouk = intsctk / (unionk + eps)
    xc1, yc1 = torch.min(x1, x1g), torch.min(y1, y1g)
    xc2, yc2 = torch.max(x2, x2g), torch.max(y2, y2g)
    area_c = (xc2 - xc1) * (yc2 - yc1)
    miouk = iouk - ((area_c - unionk) / (area_c + eps))
    loss = 1 - miouk
    if reduction == "mean":
        loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


# ------------------------------------------------------------------ detectron2's point sampling (PointRend, Mask2Former)


def point_sample(input: torch.Tensor, point_coords: torch.Tensor, **kwargs) -> torch.Tensor:
    add_dim = False
    if point_coords.dim() == 3:
        add_dim = True
        point_coords = point_coords.unsqueeze(2)
    output = F.grid_sample(input, 2.0 * point_coords - 1.0, **kwargs)
    if add_dim:
        output = output.squeeze(3)
    return output


def get_uncertain_point_coords_with_randomness(coarse_logits: torch.Tensor, uncertainty_func, num_points: int,
                                               oversample_ratio: float, importance_sample_ratio: float) -> torch.Tensor:
    num_boxes = coarse_logits.shape[0]
    num_sampled = int(num_points * oversample_ratio)
    point_coords = torch.rand(num_boxes, num_sampled, 2, device=coarse_logits.device)
    point_logits = point_sample(coarse_logits, point_coords, align_corners=False)
    point_uncertainties = uncertainty_func(point_logits)
    num_uncertain_points = int(importance_sample_ratio * num_points)
    num_random_points = num_points - num_uncertain_points
    idx = torch.topk(point_uncertainties[:, 0, :], k=num_uncertain_points, dim=1)[1]
    shift = num_sampled * torch.arange(num_boxes, dtype=torch.long, device=coarse_logits.device)
    idx += shift[:, None]
    point_coords = point_coords.view(-1, 2)[idx.view(-1), :].view(num_boxes, num_uncertain_points, 2)
    if num_random_points > 0:
        point_coords = torch.cat([point_coords, torch.rand(num_boxes, num_random_points, 2, device=coarse_logits.device)], dim=1)
    return point_coords


# ------------------------------------------------------------------ TRL's flush_left


def flush_left(mask: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Shift every row left so it starts at its first 1 in ``mask``; drop the columns left all zero."""
    mask = mask.clone()
    tensors = tuple(t.clone() for t in tensors)
    for i in range(mask.size(0)):
        first_one_idx = torch.nonzero(mask[i])[0].item()  # BREAK: roll by a gathered index (the first 1 is the argmax)
        mask[i] = torch.roll(mask[i], shifts=-first_one_idx)
        for tensor in tensors:
            tensor[i] = torch.roll(tensor[i], shifts=-first_one_idx)
    empty_cols = torch.sum(mask, dim=0) == 0
    first_empty_col = torch.nonzero(empty_cols)[0].item() if empty_cols.any() else mask.size(1)
    mask = mask[:, :first_empty_col]
    tensors = tuple(t[:, :first_empty_col] for t in tensors)
    return (mask, *tensors)


# ------------------------------------------------------------------ benchmarking-gnns' SBM loss weights


def class_balanced_weight(label: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Weight each class by the share of nodes outside it (benchmarking-gnns' node-classification loss)."""
    V = label.size(0)
    label_count = torch.bincount(label)  # BREAK: count with a scatter-add into n_classes slots
    label_count = label_count[label_count.nonzero()].squeeze()  # BREAK: the scatter-add already leaves absent classes at 0
    cluster_sizes = torch.zeros(n_classes, dtype=torch.long, device=label.device)
    cluster_sizes[torch.unique(label)] = label_count  # BREAK: cluster_sizes is the scatter-add's count
    weight = (V - cluster_sizes).float() / V
    weight *= (cluster_sizes > 0).float()
    return weight
