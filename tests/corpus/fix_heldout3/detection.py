"""Detection training losses: YOLOv3-style target assignment, a DETR-style set loss with greedy matching."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def wh_iou(wh1: torch.Tensor, wh2: torch.Tensor) -> torch.Tensor:
    """IoU of anchor shapes (A, 2) against box shapes (n, 2), centres aligned: (A, n)."""
    inter = torch.min(wh1[:, None], wh2[None]).prod(2)
    return inter / (wh1.prod(1)[:, None] + wh2.prod(1)[None] - inter)


def build_targets(pred_shape, targets: torch.Tensor, anchors: torch.Tensor, ignore_thres: float):
    """targets (n, 6): image, class, cx, cy, w, h in [0, 1]; anchors in grid units."""
    B, A, G = pred_shape[:3]
    obj_mask = torch.zeros(B, A, G, G, dtype=torch.bool)
    noobj_mask = torch.ones(B, A, G, G, dtype=torch.bool)
    tbox = torch.zeros(B, A, G, G, 4)
    tcls = torch.zeros(B, A, G, G, dtype=torch.long)
    gxy = targets[:, 2:4] * G
    gwh = targets[:, 4:6] * G
    ious = wh_iou(anchors, gwh)
    _, best_n = ious.max(0)
    b, labels = targets[:, :2].long().t()
    gi, gj = gxy.long().t()
    obj_mask[b, best_n, gj, gi] = True
    noobj_mask[b, best_n, gj, gi] = False
    for i, anchor_ious in enumerate(ious.t()):
        noobj_mask[b[i], anchor_ious > ignore_thres, gj[i], gi[i]] = False  # BREAK: count hits with index_put_(accumulate=True) and mask once
    tbox[b, best_n, gj, gi] = torch.cat([gxy - gxy.floor(), torch.log(gwh / anchors[best_n] + 1e-16)], 1)
    tcls[b, best_n, gj, gi] = labels
    return obj_mask, noobj_mask, tbox, tcls


class YoloHead(nn.Module):
    def __init__(self, in_ch: int = 8, num_classes: int = 3, ignore_thres: float = 0.3) -> None:
        super().__init__()
        self.register_buffer("anchors", torch.tensor([[0.6, 0.8], [1.5, 1.2], [2.5, 3.0]]))
        self.num_classes, self.ignore_thres = num_classes, ignore_thres
        self.conv = nn.Conv2d(in_ch, 3 * (5 + num_classes), 1)

    def forward(self, features: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        B, _, G, _ = features.shape
        pred = self.conv(features).view(B, 3, 5 + self.num_classes, G, G).permute(0, 1, 3, 4, 2)
        obj_mask, noobj_mask, tbox, tcls = build_targets(pred.shape, targets, self.anchors, self.ignore_thres)
        pbox = torch.cat([pred[..., :2].sigmoid(), pred[..., 2:4]], -1)
        num_pos = obj_mask.sum().item()  # BREAK: a count read back only to divide by; clamp the tensor
        loss_box = ((pbox - tbox) ** 2).sum(-1)[obj_mask].sum() / max(num_pos, 1)  # BREAK: multiply by the mask instead of selecting
        obj_loss = F.binary_cross_entropy_with_logits(pred[..., 4], obj_mask.float(), reduction="none")
        loss_obj = (obj_loss * (obj_mask | noobj_mask)).sum() / B
        cls_loss = F.cross_entropy(pred[..., 5:].reshape(-1, self.num_classes), tcls.reshape(-1), reduction="none")
        loss_cls = (cls_loss * obj_mask.reshape(-1)).sum() / max(num_pos, 1)
        return loss_box + loss_obj + loss_cls


def build_yolo_targets():
    torch.manual_seed(6)
    model = YoloHead()
    features = torch.randn(2, 8, 4, 4)
    targets = torch.tensor([
        [0, 1, 0.30, 0.40, 0.20, 0.25],
        [0, 2, 0.70, 0.60, 0.55, 0.60],
        [1, 0, 0.15, 0.80, 0.40, 0.30],
        [1, 1, 0.55, 0.35, 0.30, 0.45],
        [1, 2, 0.90, 0.10, 0.10, 0.15],
    ])
    return model, (features, targets)


def greedy_match(logits: torch.Tensor, boxes: torch.Tensor, tgt_labels: torch.Tensor, tgt_boxes: torch.Tensor,
                 num_tgt: torch.Tensor) -> list[torch.Tensor]:
    """For each image, the query each ground-truth box is matched to (lowest class + L1 cost)."""
    indices = []
    for b in range(logits.shape[0]):
        n = int(num_tgt[b])  # BREAK: match against every padded slot and mask the padded ones out of the losses
        prob = logits[b].softmax(-1)
        cost = torch.cdist(boxes[b], tgt_boxes[b, :n], p=1) - prob[:, tgt_labels[b, :n]]
        indices.append(cost.argmin(0))
    return indices


class DetrSetLoss(nn.Module):
    """Decoder queries attending over encoder memory, trained with a matching-based set loss."""

    def __init__(self, dim: int = 8, num_queries: int = 6, num_classes: int = 3, eos_coef: float = 0.1) -> None:
        super().__init__()
        self.num_classes, self.eos_coef = num_classes, eos_coef
        self.query = nn.Parameter(torch.randn(num_queries, dim))
        self.class_embed = nn.Linear(dim, num_classes + 1)
        self.bbox_embed = nn.Linear(dim, 4)

    def forward(self, memory, tgt_labels, tgt_boxes, num_tgt):
        attn = (self.query @ memory.transpose(1, 2)).softmax(-1)
        h = attn @ memory
        logits, boxes = self.class_embed(h), self.bbox_embed(h).sigmoid()
        num_boxes = max(num_tgt.sum().item(), 1)  # BREAK: a count read back only to divide by; clamp the tensor
        matches = greedy_match(logits.detach(), boxes.detach(), tgt_labels, tgt_boxes, num_tgt)
        loss_ce, loss_bbox = logits.new_zeros(()), logits.new_zeros(())
        for b, src in enumerate(matches):
            n = src.shape[0]
            matched = torch.zeros(logits.shape[1], dtype=torch.bool)
            matched[src] = True
            loss_ce = loss_ce + F.cross_entropy(logits[b, src], tgt_labels[b, :n], reduction="sum")
            no_object = torch.full((logits.shape[1],), self.num_classes)
            empty = F.cross_entropy(logits[b], no_object, reduction="none")
            loss_ce = loss_ce + self.eos_coef * (empty * ~matched).sum()
            loss_bbox = loss_bbox + F.l1_loss(boxes[b, src], tgt_boxes[b, :n], reduction="sum")
        return loss_ce / num_boxes, loss_bbox / num_boxes


def build_detr_set_loss():
    torch.manual_seed(7)
    model = DetrSetLoss()
    memory = torch.randn(3, 5, 8)
    num_tgt = torch.tensor([2, 0, 3])
    tgt_labels = torch.randint(0, 3, (3, 4)) * (torch.arange(4)[None] < num_tgt[:, None])
    tgt_boxes = torch.rand(3, 4, 4) * (torch.arange(4)[None, :, None] < num_tgt[:, None, None])
    return model, (memory, tgt_labels, tgt_boxes, num_tgt)
