"""Shared utilities (the repo's ``utils.py``): box ops, returns, pooling, logging helpers."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


def log_tensor_stats(name: str, t: torch.Tensor) -> None:
    """Debug print used all over the training scripts."""
    print(f"[stats] {name}: shape={tuple(t.shape)} mean={t.mean().item():.4f}")  # BREAK: a debug print of a tensor statistic


def clip_boxes_to_image(boxes: torch.Tensor, image_size: torch.Tensor) -> torch.Tensor:
    """Clip (x1, y1, x2, y2) boxes to an image given as a (h, w) tensor."""
    height, width = image_size.tolist()  # BREAK: image size read back as Python numbers only to clamp
    x1, y1, x2, y2 = boxes.unbind(-1)
    x1 = x1.clamp(min=0, max=width)
    y1 = y1.clamp(min=0, max=height)
    x2 = x2.clamp(min=0, max=width)
    y2 = y2.clamp(min=0, max=height)
    return torch.stack((x1, y1, x2, y2), dim=-1)


def decode_boxes(deltas: torch.Tensor, anchors: torch.Tensor, image_size: torch.Tensor,
                 weights: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0),
                 bbox_xform_clip: float = 4.135) -> torch.Tensor:
    """torchvision's BoxCoder.decode_single, then clipped to the image."""
    wx, wy, ww, wh = weights
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    ctr_x = anchors[:, 0] + 0.5 * widths
    ctr_y = anchors[:, 1] + 0.5 * heights
    dx, dy = deltas[:, 0] / wx, deltas[:, 1] / wy
    dw = (deltas[:, 2] / ww).clamp(max=bbox_xform_clip)
    dh = (deltas[:, 3] / wh).clamp(max=bbox_xform_clip)
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    pred_w = torch.exp(dw) * widths
    pred_h = torch.exp(dh) * heights
    boxes = torch.stack((pred_ctr_x - 0.5 * pred_w, pred_ctr_y - 0.5 * pred_h,
                         pred_ctr_x + 0.5 * pred_w, pred_ctr_y + 0.5 * pred_h), dim=1)
    return clip_boxes_to_image(boxes, image_size)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area_a[:, None] + area_b - inter)


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Plain greedy NMS (no torchvision on the cluster image)."""
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        ious = box_iou(boxes[order[:1]], boxes[order[1:]])[0]
        order = order[1:][ious <= iou_threshold]  # BREAK must-not: survivors of the IoU test set how many boxes are kept (returned)
    return torch.stack(keep)


def discount_cumsum(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted returns, computed the way the first version of the repo did it."""
    returns = []
    running = 0.0
    for r in reversed(rewards.tolist()):  # BREAK: rewards taken to Python floats for the return recursion
        running = r + gamma * running
        returns.append(running)
    returns.reverse()
    return torch.tensor(returns, dtype=rewards.dtype)


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(hidden.dtype)
    return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1.0)


def warn_if_padded_right(attention_mask: torch.Tensor) -> None:
    if (attention_mask[:, -1] == 0).any():  # BREAK: data-dependent check whose body only logs
        logger.warning("right padding detected: generation results may be off; use padding_side='left'")
