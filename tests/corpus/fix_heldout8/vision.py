"""Detection and segmentation: mmdet's ATSS assigner, YOLOX's SimOTA dynamic-k matching, MaskFormer's
panoptic merge of mask-classification outputs, and a keypoint head trained on COCO's object keypoint
similarity (``COCOeval.computeOks`` ported to torch)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

INF = 100000000

# --------------------------------------------------------------------------- ATSS


def bbox_overlaps(bboxes1: torch.Tensor, bboxes2: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """IoU between every box of bboxes1 (N, 4) and bboxes2 (M, 4), xyxy."""
    area1 = (bboxes1[:, 2] - bboxes1[:, 0]) * (bboxes1[:, 3] - bboxes1[:, 1])
    area2 = (bboxes2[:, 2] - bboxes2[:, 0]) * (bboxes2[:, 3] - bboxes2[:, 1])
    lt = torch.max(bboxes1[:, None, :2], bboxes2[None, :, :2])
    rb = torch.min(bboxes1[:, None, 2:], bboxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]
    union = area1[:, None] + area2[None, :] - overlap
    return overlap / torch.max(union, union.new_tensor([eps]))


class ATSSAssigner:
    """Assign a corresponding gt bbox or background to each bbox (Adaptive Training Sample Selection)."""

    def __init__(self, topk: int) -> None:
        self.topk = topk

    def assign(self, bboxes, num_level_bboxes, gt_bboxes, gt_labels=None):
        bboxes = bboxes[:, :4]
        num_gt, num_bboxes = gt_bboxes.size(0), bboxes.size(0)

        # compute iou between all bbox and gt
        overlaps = bbox_overlaps(bboxes, gt_bboxes)

        # assign 0 by default
        assigned_gt_inds = overlaps.new_full((num_bboxes,), 0, dtype=torch.long)

        # compute center distance between all bbox and gt
        gt_cx = (gt_bboxes[:, 0] + gt_bboxes[:, 2]) / 2.0
        gt_cy = (gt_bboxes[:, 1] + gt_bboxes[:, 3]) / 2.0
        gt_points = torch.stack((gt_cx, gt_cy), dim=1)

        bboxes_cx = (bboxes[:, 0] + bboxes[:, 2]) / 2.0
        bboxes_cy = (bboxes[:, 1] + bboxes[:, 3]) / 2.0
        bboxes_points = torch.stack((bboxes_cx, bboxes_cy), dim=1)

        distances = (bboxes_points[:, None, :] - gt_points[None, :, :]).pow(2).sum(-1).sqrt()

        # Selecting candidates based on the center distance
        candidate_idxs = []
        start_idx = 0
        for bboxes_per_level in num_level_bboxes:
            # on each pyramid level, for each gt, select k bbox whose center are closest to the gt center
            end_idx = start_idx + bboxes_per_level
            distances_per_level = distances[start_idx:end_idx, :]
            selectable_k = min(self.topk, bboxes_per_level)
            _, topk_idxs_per_level = distances_per_level.topk(selectable_k, dim=0, largest=False)
            candidate_idxs.append(topk_idxs_per_level + start_idx)
            start_idx = end_idx
        candidate_idxs = torch.cat(candidate_idxs, dim=0)

        # get corresponding iou for the these candidates, and compute the mean and std, set mean + std as the iou threshold
        candidate_overlaps = overlaps[candidate_idxs, torch.arange(num_gt)]
        overlaps_mean_per_gt = candidate_overlaps.mean(0)
        overlaps_std_per_gt = candidate_overlaps.std(0)
        overlaps_thr_per_gt = overlaps_mean_per_gt + overlaps_std_per_gt

        is_pos = candidate_overlaps >= overlaps_thr_per_gt[None, :]

        # limit the positive sample's center in gt
        for gt_idx in range(num_gt):
            candidate_idxs[:, gt_idx] += gt_idx * num_bboxes
        ep_bboxes_cx = bboxes_cx.view(1, -1).expand(num_gt, num_bboxes).contiguous().view(-1)
        ep_bboxes_cy = bboxes_cy.view(1, -1).expand(num_gt, num_bboxes).contiguous().view(-1)
        candidate_idxs = candidate_idxs.view(-1)

        # calculate the left, top, right, bottom distance between positive bbox center and gt side
        l_ = ep_bboxes_cx[candidate_idxs].view(-1, num_gt) - gt_bboxes[:, 0]
        t_ = ep_bboxes_cy[candidate_idxs].view(-1, num_gt) - gt_bboxes[:, 1]
        r_ = gt_bboxes[:, 2] - ep_bboxes_cx[candidate_idxs].view(-1, num_gt)
        b_ = gt_bboxes[:, 3] - ep_bboxes_cy[candidate_idxs].view(-1, num_gt)
        is_in_gts = torch.stack([l_, t_, r_, b_], dim=1).min(dim=1)[0] > 0.01
        is_pos = is_pos & is_in_gts

        # if an anchor box is assigned to multiple gts, the one with the highest IoU will be selected.
        overlaps_inf = torch.full_like(overlaps, -INF).t().contiguous().view(-1)
        index = candidate_idxs.view(-1)[is_pos.view(-1)]  # BREAK: dense mask via scatter + torch.where
        overlaps_inf[index] = overlaps.t().contiguous().view(-1)[index]
        overlaps_inf = overlaps_inf.view(num_gt, -1).t()

        max_overlaps, argmax_overlaps = overlaps_inf.max(dim=1)
        assigned_gt_inds[max_overlaps != -INF] = argmax_overlaps[max_overlaps != -INF] + 1  # BREAK: where

        if gt_labels is not None:
            assigned_labels = assigned_gt_inds.new_full((num_bboxes,), -1)
            pos_inds = torch.nonzero(assigned_gt_inds > 0, as_tuple=False).squeeze()  # BREAK: torch.where
            if pos_inds.numel() > 0:
                assigned_labels[pos_inds] = gt_labels[assigned_gt_inds[pos_inds] - 1]
        else:
            assigned_labels = None
        return num_gt, assigned_gt_inds, max_overlaps, assigned_labels


def grid_anchors(featmap_size: int, stride: int, scale: float = 4.0) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(featmap_size), torch.arange(featmap_size), indexing="ij")
    cx = (xs.flatten().float() + 0.5) * stride
    cy = (ys.flatten().float() + 0.5) * stride
    half = scale * stride / 2
    return torch.stack([cx - half, cy - half, cx + half, cy + half], dim=1)


def build_atss_assign():
    assigner = ATSSAssigner(topk=9)
    anchors = torch.cat([grid_anchors(8, 8), grid_anchors(4, 16)])
    gt_bboxes = torch.tensor([[4.0, 6.0, 30.0, 28.0], [20.0, 18.0, 60.0, 62.0], [36.0, 2.0, 58.0, 22.0]])
    gt_labels = torch.tensor([2, 0, 5])
    return assigner.assign, (anchors, [64, 16], gt_bboxes, gt_labels)


# --------------------------------------------------------------------------- SimOTA


def simota_matching(cost, pair_wise_ious, gt_classes, num_gt):
    """YOLOX dynamic-k matching for one image: (num_gt, num_anchors) cost and IoU -> per-anchor targets."""
    # Dynamic K
    # ---------------------------------------------------------------
    matching_matrix = torch.zeros_like(cost, dtype=torch.uint8)

    ious_in_boxes_matrix = pair_wise_ious
    n_candidate_k = min(10, ious_in_boxes_matrix.size(1))
    topk_ious, _ = torch.topk(ious_in_boxes_matrix, n_candidate_k, dim=1)
    dynamic_ks = torch.clamp(topk_ious.sum(1).int(), min=1)
    dynamic_ks = dynamic_ks.tolist()  # BREAK: pick by rank: argsort().argsort() < dynamic_ks
    for gt_idx in range(num_gt):
        _, pos_idx = torch.topk(cost[gt_idx], k=dynamic_ks[gt_idx], largest=False)
        matching_matrix[gt_idx][pos_idx] = 1

    del topk_ious, dynamic_ks, pos_idx

    anchor_matching_gt = matching_matrix.sum(0)
    if (anchor_matching_gt > 1).sum() > 0:  # BREAK: resolve every column with torch.where
        _, cost_argmin = torch.min(cost[:, anchor_matching_gt > 1], dim=0)  # BREAK: argmin over all columns
        matching_matrix[:, anchor_matching_gt > 1] *= 0  # BREAK: same torch.where
        matching_matrix[cost_argmin, anchor_matching_gt > 1] = 1
    fg_mask_inboxes = matching_matrix.sum(0) > 0

    matched_gt_inds = matching_matrix.argmax(0)
    gt_matched_classes = torch.where(fg_mask_inboxes, gt_classes[matched_gt_inds], -1)
    pred_ious_this_matching = (matching_matrix * pair_wise_ious).sum(0)
    return matching_matrix, gt_matched_classes, pred_ious_this_matching


def build_simota_assign():
    g = seeded(880)
    num_gt, num_anchors = 4, 40
    pair_wise_ious = torch.rand(num_gt, num_anchors, generator=g) ** 3
    cls_cost = torch.rand(num_gt, num_anchors, generator=g)
    cost = cls_cost + 3.0 * -torch.log(pair_wise_ious + 1e-8)
    gt_classes = torch.tensor([3, 1, 4, 1])
    return simota_matching, (cost, pair_wise_ious, gt_classes, num_gt)


# --------------------------------------------------------------------------- MaskFormer panoptic merge


class MaskFormerPanoptic(nn.Module):
    """A pixel decoder and query head stand-in, followed by MaskFormer's ``panoptic_inference``."""

    def __init__(
        self, num_classes: int = 6, num_queries: int = 8, dim: int = 16, num_things: int = 3
    ) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.num_things = num_things
        self.pixel_decoder = nn.Conv2d(3, dim, 3, padding=1)
        self.query_embed = nn.Parameter(torch.randn(num_queries, dim))
        self.class_embed = nn.Linear(dim, num_classes + 1)
        self.mask_embed = nn.Linear(dim, dim)
        self.object_mask_threshold = 0.3
        self.overlap_threshold = 0.5

    def panoptic_inference(self, mask_cls, mask_pred):
        scores, labels = F.softmax(mask_cls, dim=-1).max(-1)
        mask_pred = mask_pred.sigmoid()

        keep = labels.ne(self.num_classes) & (scores > self.object_mask_threshold)
        cur = scores[keep], labels[keep], mask_pred[keep]  # BREAK must-not: the kept queries become segments
        cur_scores, cur_classes, cur_masks = cur

        cur_prob_masks = cur_scores.view(-1, 1, 1) * cur_masks

        h, w = cur_masks.shape[-2:]
        panoptic_seg = torch.zeros((h, w), dtype=torch.int32, device=cur_masks.device)
        segments_info = []

        current_segment_id = 0

        if cur_masks.shape[0] == 0:
            # We didn't detect any mask :(
            return panoptic_seg, segments_info
        else:
            # take argmax
            cur_mask_ids = cur_prob_masks.argmax(0)
            stuff_memory_list = {}
            for k in range(cur_classes.shape[0]):
                pred_class = cur_classes[k].item()  # BREAK must-not: host loop builds segments_info
                isthing = pred_class < self.num_things
                mask_area = (cur_mask_ids == k).sum().item()
                original_area = (cur_masks[k] >= 0.5).sum().item()
                mask = (cur_mask_ids == k) & (cur_masks[k] >= 0.5)

                if mask_area > 0 and original_area > 0 and mask.sum().item() > 0:
                    if mask_area / original_area < self.overlap_threshold:
                        continue

                    # merge stuff regions
                    if not isthing:
                        if int(pred_class) in stuff_memory_list.keys():
                            panoptic_seg[mask] = stuff_memory_list[int(pred_class)]
                            continue
                        else:
                            stuff_memory_list[int(pred_class)] = current_segment_id + 1

                    current_segment_id += 1
                    panoptic_seg[mask] = current_segment_id

                    segments_info.append(
                        {
                            "id": current_segment_id,
                            "isthing": bool(isthing),
                            "category_id": int(pred_class),
                        }
                    )

            return panoptic_seg, segments_info

    def forward(self, image: torch.Tensor):
        pixel = self.pixel_decoder(image)[0]  # (dim, H, W)
        mask_cls = self.class_embed(self.query_embed)
        mask_pred = torch.einsum("qc,chw->qhw", self.mask_embed(self.query_embed), pixel)
        return self.panoptic_inference(mask_cls, mask_pred)


def build_panoptic_merge():
    torch.manual_seed(896)
    model = MaskFormerPanoptic().eval()
    with torch.no_grad():  # sharper class and mask logits, like a trained model's
        model.class_embed.weight.mul_(3.0)
        model.mask_embed.weight.mul_(3.0)
    image = torch.randn(1, 3, 12, 12, generator=seeded(891))
    return model, (image,)


# --------------------------------------------------------------------------- keypoint OKS


COCO_SIGMAS = np.array([0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79]) / 10.0


def compute_oks(
    dts: torch.Tensor, gts: torch.Tensor, gt_areas: torch.Tensor, gt_boxes: torch.Tensor, sigmas: torch.Tensor
) -> torch.Tensor:
    """COCOeval.computeOks for one image: (D, K, 2) detections vs (G, K, 3) ground truths -> (D, G)."""
    vars = (sigmas * 2) ** 2
    ious = dts.new_zeros((dts.shape[0], gts.shape[0]))
    for j, gt in enumerate(gts):
        xg, yg, vg = gt[:, 0], gt[:, 1], gt[:, 2]
        k1 = torch.count_nonzero(vg > 0)
        bb = gt_boxes[j]
        x0 = bb[0] - bb[2]
        x1 = bb[0] + bb[2] * 2
        y0 = bb[1] - bb[3]
        y1 = bb[1] + bb[3] * 2
        xd, yd = dts[:, :, 0], dts[:, :, 1]
        if k1 > 0:  # BREAK: both branches for every gt, torch.where + visibility weights
            # measure the per-keypoint distance if keypoints visible
            dx = xd - xg
            dy = yd - yg
        else:
            # measure minimum distance to keypoints in (x0,y0) & (x1,y1)
            z = torch.zeros_like(xd)
            dx = torch.maximum(z, x0 - xd) + torch.maximum(z, xd - x1)
            dy = torch.maximum(z, y0 - yd) + torch.maximum(z, yd - y1)
        e = (dx**2 + dy**2) / vars / (gt_areas[j] + np.spacing(1)) / 2
        if k1 > 0:
            e = e[:, vg > 0]
        ious[:, j] = torch.sum(torch.exp(-e), dim=1) / e.shape[1]
    return ious


class KeypointHead(nn.Module):
    def __init__(self, in_dim: int = 16, num_keypoints: int = 7) -> None:
        super().__init__()
        self.num_keypoints = num_keypoints
        self.mlp = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, num_keypoints * 2))
        self.register_buffer("sigmas", torch.as_tensor(COCO_SIGMAS, dtype=torch.float32))

    def forward(self, roi_feats, boxes, gt_keypoints, gt_areas):
        # keypoints relative to their box, in [0, 1], then to image coordinates
        rel = torch.sigmoid(self.mlp(roi_feats)).view(-1, self.num_keypoints, 2)
        xy = boxes[:, None, :2] + rel * boxes[:, None, 2:]
        oks = compute_oks(xy, gt_keypoints, gt_areas, boxes, self.sigmas)
        loss = (1.0 - oks.diagonal()).mean()
        return loss, oks


def build_oks_keypoints():
    torch.manual_seed(900)
    model = KeypointHead()
    g = seeded(901)
    boxes = torch.tensor([[10.0, 12.0, 30.0, 50.0], [40.0, 8.0, 24.0, 44.0], [5.0, 60.0, 36.0, 30.0]])
    rel = torch.rand(3, 7, 2, generator=g)
    vis = (torch.rand(3, 7, generator=g) > 0.3).float() * 2
    vis[2] = 0  # a crowd-ish annotation with no labelled keypoint
    gt_keypoints = torch.cat([boxes[:, None, :2] + rel * boxes[:, None, 2:], vis[..., None]], dim=-1)
    gt_areas = boxes[:, 2] * boxes[:, 3] * 0.6
    roi_feats = torch.randn(3, 16, generator=g)
    return model, (roi_feats, boxes, gt_keypoints, gt_areas)
