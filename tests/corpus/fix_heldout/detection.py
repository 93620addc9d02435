"""Detection heads' post-processing: RetinaNet-style, CenterNet-style, per-class NMS."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from . import helpers

logger = logging.getLogger(__name__)


def make_anchors(feat_h: int, feat_w: int, stride: int, size: float) -> torch.Tensor:
    shifts_x = (torch.arange(feat_w, dtype=torch.float32) + 0.5) * stride
    shifts_y = (torch.arange(feat_h, dtype=torch.float32) + 0.5) * stride
    cy, cx = torch.meshgrid(shifts_y, shifts_x, indexing="ij")
    cx, cy = cx.reshape(-1), cy.reshape(-1)
    half = size / 2
    return torch.stack((cx - half, cy - half, cx + half, cy + half), dim=1)


class RetinaNetPostProcess(nn.Module):
    def __init__(self, in_channels: int = 8, num_classes: int = 3, score_thresh: float = 0.3,
                 topk_candidates: int = 20, stride: int = 8):
        super().__init__()
        self.cls_logits = nn.Conv2d(in_channels, num_classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.num_classes = num_classes
        self.score_thresh = score_thresh
        self.topk_candidates = topk_candidates
        self.stride = stride

    def forward(self, features, image_size):
        _, _, h, w = features.shape
        cls = self.cls_logits(features)[0].permute(1, 2, 0).reshape(-1, self.num_classes)
        reg = self.bbox_reg(features)[0].permute(1, 2, 0).reshape(-1, 4)
        anchors = make_anchors(h, w, self.stride, size=4.0 * self.stride)

        scores_per_level = torch.sigmoid(cls).flatten()
        keep_idxs = scores_per_level > self.score_thresh
        scores_per_level = scores_per_level[keep_idxs]  # BREAK must-not: the number of boxes over the threshold is the returned size
        topk_idxs = torch.where(keep_idxs)[0]  # BREAK must-not: the indices over the threshold, as many as the returned boxes
        num_topk = min(self.topk_candidates, topk_idxs.size(0))
        scores_per_level, idxs = scores_per_level.topk(num_topk)
        topk_idxs = topk_idxs[idxs]
        anchor_idxs = torch.div(topk_idxs, self.num_classes, rounding_mode="floor")
        labels = topk_idxs % self.num_classes
        boxes = helpers.decode_boxes(reg[anchor_idxs], anchors[anchor_idxs], image_size)
        return boxes, scores_per_level, labels


def build_retinanet_postprocess():
    torch.manual_seed(0)
    model = RetinaNetPostProcess().eval()
    g = torch.Generator().manual_seed(11)
    return model, (torch.randn(1, 8, 6, 6, generator=g), torch.tensor([48, 48]))


class CenterNetDecoder(nn.Module):
    def __init__(self, in_channels: int = 8, num_classes: int = 2, K: int = 10, vis_thresh: float = 0.3):
        super().__init__()
        self.hm = nn.Conv2d(in_channels, num_classes, 1)
        self.wh = nn.Conv2d(in_channels, 2, 1)
        self.reg = nn.Conv2d(in_channels, 2, 1)
        self.K = K
        self.vis_thresh = vis_thresh

    @staticmethod
    def _nms(heat, kernel=3):
        hmax = F.max_pool2d(heat, (kernel, kernel), stride=1, padding=(kernel - 1) // 2)
        keep = (hmax == heat).float()
        return heat * keep

    def forward(self, x):
        heat = self._nms(self.hm(x).sigmoid())
        wh, reg = self.wh(x), self.reg(x)
        batch, cat, height, width = heat.size()
        topk_scores, topk_inds = torch.topk(heat.view(batch, -1), self.K)
        topk_clses = torch.div(topk_inds, height * width, rounding_mode="floor")
        topk_inds = topk_inds % (height * width)
        ys = torch.div(topk_inds, width, rounding_mode="floor").float()
        xs = (topk_inds % width).float()
        reg = reg.view(batch, 2, -1).gather(2, topk_inds[:, None].expand(-1, 2, -1))
        wh = wh.view(batch, 2, -1).gather(2, topk_inds[:, None].expand(-1, 2, -1))
        xs, ys = xs + reg[:, 0], ys + reg[:, 1]
        bboxes = torch.stack([xs - wh[:, 0] / 2, ys - wh[:, 1] / 2, xs + wh[:, 0] / 2, ys + wh[:, 1] / 2], dim=2)
        num_visible = (topk_scores > self.vis_thresh).sum().item()  # BREAK: a count read only for the log line
        logger.info("decoded %d boxes above %.2f", num_visible, self.vis_thresh)  # BREAK: a logging call
        visible_score = topk_scores[topk_scores > self.vis_thresh].sum()  # BREAK: a masked sum (where + sum keeps it)
        dets = torch.cat([bboxes, topk_scores[..., None], topk_clses[..., None].float()], dim=2)
        return dets, visible_score


def build_centernet_decode():
    torch.manual_seed(0)
    model = CenterNetDecoder().eval()
    g = torch.Generator().manual_seed(12)
    return model, torch.randn(2, 8, 8, 8, generator=g)


class PerClassNMS(nn.Module):
    """batched_nms done class by class, as older mmdet/yolo forks have it."""

    def __init__(self, iou_threshold: float = 0.5, max_det: int = 10):
        super().__init__()
        self.iou_threshold = iou_threshold
        self.max_det = max_det

    def forward(self, boxes, scores, labels):
        keep_all = []
        for c in torch.unique(labels).tolist():  # BREAK must-not: the classes present decide the loop and the kept count
            idx = (labels == c).nonzero().squeeze(1)  # BREAK must-not: the members of a class, a data-dependent count that is returned
            keep = helpers.nms(boxes[idx], scores[idx], self.iou_threshold)
            keep_all.append(idx[keep])
        keep = torch.cat(keep_all)
        keep = keep[scores[keep].argsort(descending=True)]
        return keep[: self.max_det]


def build_per_class_nms():
    g = torch.Generator().manual_seed(13)
    xy = torch.rand(24, 2, generator=g) * 40
    wh = torch.rand(24, 2, generator=g) * 20 + 5
    boxes = torch.cat([xy, xy + wh], dim=1)
    scores = torch.rand(24, generator=g)
    labels = torch.randint(0, 3, (24,), generator=g)
    return PerClassNMS(), (boxes, scores, labels)
