"""Detection training targets: open-mmlab/mmdetection's ``ATSSAssigner.assign`` (2.x: per-level top-k candidates by
center distance, the mean + std IoU threshold, the center-inside test, the highest-IoU gt per anchor written through
the flattened candidate indices, the labels through ``torch.nonzero``) and facebookresearch/detectron2's two-stage
training targets (the RPN's ``Matcher`` with ``set_low_quality_matches_``, ``subsample_labels`` for the anchors and
for the ROI heads' proposals, ``add_ground_truth_to_proposals``, ``FastRCNNOutputLayers.losses`` with the
class-specific ``box_reg_loss`` over the ``nonzero`` foreground indices)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ mmdet core/bbox/iou_calculators, assigners


def bbox_overlaps(bboxes1, bboxes2, mode="iou", is_aligned=False, eps=1e-6):
    """Calculate overlap between two set of bboxes (the non-aligned case of mmdet's ``bbox_overlaps``)."""
    assert mode in ["iou", "iof", "giou"], f"Unsupported mode {mode}"
    assert bboxes1.size(-1) == 4 or bboxes1.size(0) == 0
    assert bboxes2.size(-1) == 4 or bboxes2.size(0) == 0
    area1 = (bboxes1[..., 2] - bboxes1[..., 0]) * (bboxes1[..., 3] - bboxes1[..., 1])
    area2 = (bboxes2[..., 2] - bboxes2[..., 0]) * (bboxes2[..., 3] - bboxes2[..., 1])

    lt = torch.max(bboxes1[..., :, None, :2], bboxes2[..., None, :, :2])  # [B, rows, cols, 2]
    rb = torch.min(bboxes1[..., :, None, 2:], bboxes2[..., None, :, 2:])  # [B, rows, cols, 2]

    wh = (rb - lt).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]

    if mode in ["iou", "giou"]:
        union = area1[..., None] + area2[..., None, :] - overlap
    else:
        union = area1[..., None]
    eps = union.new_tensor([eps])
    union = torch.max(union, eps)
    ious = overlap / union
    return ious


class BboxOverlaps2D:
    """2D Overlaps (e.g. IoUs, GIoUs) Calculator."""

    def __call__(self, bboxes1, bboxes2, mode="iou", is_aligned=False):
        assert bboxes1.size(-1) in [0, 4, 5]
        assert bboxes2.size(-1) in [0, 4, 5]
        if bboxes2.size(-1) == 5:
            bboxes2 = bboxes2[..., :4]
        if bboxes1.size(-1) == 5:
            bboxes1 = bboxes1[..., :4]
        return bbox_overlaps(bboxes1, bboxes2, mode, is_aligned)


class AssignResult:
    """Stores assignments between predicted and truth boxes."""

    def __init__(self, num_gts, gt_inds, max_overlaps, labels=None):
        self.num_gts = num_gts
        self.gt_inds = gt_inds
        self.max_overlaps = max_overlaps
        self.labels = labels
        # Interface for possible user-defined properties
        self._extra_properties = {}

    @property
    def num_preds(self):
        """int: the number of predictions in this assignment"""
        return len(self.gt_inds)


class ATSSAssigner:
    """Assign a corresponding gt bbox or background to each bbox (Adaptive Training Sample Selection)."""

    def __init__(self, topk, ignore_iof_thr=-1):
        self.topk = topk
        self.iou_calculator = BboxOverlaps2D()
        self.ignore_iof_thr = ignore_iof_thr

    def assign(self, bboxes, num_level_bboxes, gt_bboxes, gt_bboxes_ignore=None, gt_labels=None):
        """Assign gt to bboxes.

        1. compute iou between all bbox (bbox of all pyramid levels) and gt
        2. compute center distance between all bbox and gt
        3. on each pyramid level, for each gt, select k bbox whose center are closest to the gt center, so we
           total select k*l bbox as candidates for each gt
        4. get corresponding iou for the these candidates, and compute the mean and std, set mean + std as the
           iou threshold
        5. select these candidates whose iou are greater than or equal to the threshold as positive
        6. limit the positive sample's center in gt
        """
        INF = 100000000
        bboxes = bboxes[:, :4]
        num_gt, num_bboxes = gt_bboxes.size(0), bboxes.size(0)

        # compute iou between all bbox and gt
        overlaps = self.iou_calculator(bboxes, gt_bboxes)

        # assign 0 by default
        assigned_gt_inds = overlaps.new_full((num_bboxes,), 0, dtype=torch.long)

        if num_gt == 0 or num_bboxes == 0:
            # No ground truth or boxes, return empty assignment
            max_overlaps = overlaps.new_zeros((num_bboxes,))
            if num_gt == 0:
                # No truth, assign everything to background
                assigned_gt_inds[:] = 0
            if gt_labels is None:
                assigned_labels = None
            else:
                assigned_labels = overlaps.new_full((num_bboxes,), -1, dtype=torch.long)
            return AssignResult(num_gt, assigned_gt_inds, max_overlaps, labels=assigned_labels)

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
        for level, bboxes_per_level in enumerate(num_level_bboxes):  # noqa: B007 (mmdet's loop)
            # on each pyramid level, for each gt,
            # select k bbox whose center are closest to the gt center
            end_idx = start_idx + bboxes_per_level
            distances_per_level = distances[start_idx:end_idx, :]
            selectable_k = min(self.topk, bboxes_per_level)
            _, topk_idxs_per_level = distances_per_level.topk(selectable_k, dim=0, largest=False)
            candidate_idxs.append(topk_idxs_per_level + start_idx)
            start_idx = end_idx
        candidate_idxs = torch.cat(candidate_idxs, dim=0)

        # get corresponding iou for the these candidates, and compute the
        # mean and std, set mean + std as the iou threshold
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

        # calculate the left, top, right, bottom distance between positive
        # bbox center and gt side
        l_ = ep_bboxes_cx[candidate_idxs].view(-1, num_gt) - gt_bboxes[:, 0]
        t_ = ep_bboxes_cy[candidate_idxs].view(-1, num_gt) - gt_bboxes[:, 1]
        r_ = gt_bboxes[:, 2] - ep_bboxes_cx[candidate_idxs].view(-1, num_gt)
        b_ = gt_bboxes[:, 3] - ep_bboxes_cy[candidate_idxs].view(-1, num_gt)
        is_in_gts = torch.stack([l_, t_, r_, b_], dim=1).min(dim=1)[0] > 0.01
        is_pos = is_pos & is_in_gts

        # if an anchor box is assigned to multiple gts,
        # the one with the highest IoU will be selected.
        overlaps_inf = torch.full_like(overlaps, -INF).t().contiguous().view(-1)
        index = candidate_idxs.view(-1)[is_pos.view(-1)]  # BREAK: the candidates are distinct flat positions: scatter is_pos onto a flat mask and torch.where it over the transposed overlaps
        overlaps_inf[index] = overlaps.t().contiguous().view(-1)[index]
        overlaps_inf = overlaps_inf.view(num_gt, -1).t()

        max_overlaps, argmax_overlaps = overlaps_inf.max(dim=1)
        assigned_gt_inds[max_overlaps != -INF] = argmax_overlaps[max_overlaps != -INF] + 1  # BREAK: torch.where(max_overlaps != -INF, argmax_overlaps + 1, assigned_gt_inds)

        if gt_labels is not None:
            assigned_labels = assigned_gt_inds.new_full((num_bboxes,), -1)
            pos_inds = torch.nonzero(assigned_gt_inds > 0, as_tuple=False).squeeze()  # BREAK: the labels by torch.where(assigned_gt_inds > 0, gt_labels[(assigned_gt_inds - 1).clamp(min=0)], -1)
            if pos_inds.numel() > 0:
                assigned_labels[pos_inds] = gt_labels[assigned_gt_inds[pos_inds] - 1]
        else:
            assigned_labels = None

        return AssignResult(num_gt, assigned_gt_inds, max_overlaps, labels=assigned_labels)


def grid_anchors(featmap_sizes, strides, octave_base_scale=8):
    """``AnchorGenerator.grid_priors`` with one square anchor per location (ATSS: ratio 1, one octave scale)."""
    anchors = []
    for (h, w), stride in zip(featmap_sizes, strides, strict=True):
        size = octave_base_scale * stride
        base = torch.tensor([-size / 2, -size / 2, size / 2, size / 2])
        ys, xs = torch.meshgrid(torch.arange(h) * stride, torch.arange(w) * stride, indexing="ij")
        shifts = torch.stack([xs, ys, xs, ys], dim=-1).reshape(-1, 4).float()
        anchors.append(shifts + base)
    return torch.cat(anchors), [h * w for h, w in featmap_sizes]


def build_atss_assign():
    seeded(1503)
    anchors, num_level_anchors = grid_anchors([(8, 8), (4, 4)], [8, 16], octave_base_scale=4)
    gt_bboxes = torch.tensor([[4.0, 6.0, 30.0, 40.0], [20.0, 8.0, 60.0, 30.0], [34.0, 36.0, 62.0, 62.0]])
    gt_labels = torch.tensor([2, 0, 1])
    assigner = ATSSAssigner(topk=5)

    def assign(anchors, gt_bboxes, gt_labels):
        result = assigner.assign(anchors, num_level_anchors, gt_bboxes, None, gt_labels)
        return result.num_gts, result.gt_inds, result.max_overlaps, result.labels

    return assign, (anchors, gt_bboxes, gt_labels)


# ------------------------------------------------------------------ detectron2 modeling/matcher.py, sampling.py, ...


def pairwise_iou(boxes1, boxes2):
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    width_height = torch.min(boxes1[:, None, 2:], boxes2[:, 2:]) - torch.max(boxes1[:, None, :2], boxes2[:, :2])
    width_height.clamp_(min=0)  # [N,M,2]
    inter = width_height.prod(dim=2)  # [N,M]
    # handle empty boxes
    iou = torch.where(inter > 0, inter / (area1[:, None] + area2 - inter), torch.zeros(1, dtype=inter.dtype, device=inter.device))
    return iou


class Matcher:
    """Assigns to each predicted "element" (e.g., a box) a ground-truth element, with a label in ``labels``."""

    def __init__(self, thresholds, labels, allow_low_quality_matches=False):
        thresholds = thresholds[:]
        assert thresholds[0] > 0
        thresholds.insert(0, -float("inf"))
        thresholds.append(float("inf"))
        assert all(low <= high for (low, high) in zip(thresholds[:-1], thresholds[1:], strict=True))
        assert all(label in [-1, 0, 1] for label in labels)
        assert len(labels) == len(thresholds) - 1
        self.thresholds = thresholds
        self.labels = labels
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, match_quality_matrix):
        assert match_quality_matrix.dim() == 2
        if match_quality_matrix.numel() == 0:
            default_matches = match_quality_matrix.new_full((match_quality_matrix.size(1),), 0, dtype=torch.int64)
            default_match_labels = match_quality_matrix.new_full((match_quality_matrix.size(1),), self.labels[0], dtype=torch.int8)
            return default_matches, default_match_labels

        assert torch.all(match_quality_matrix >= 0)

        # match_quality_matrix is M (gt) x N (predicted)
        # Max over gt elements (dim 0) to find best gt candidate for each prediction
        matched_vals, matches = match_quality_matrix.max(dim=0)

        match_labels = matches.new_full(matches.size(), 1, dtype=torch.int8)

        for label, low, high in zip(self.labels, self.thresholds[:-1], self.thresholds[1:], strict=True):
            low_high = (matched_vals >= low) & (matched_vals < high)
            match_labels[low_high] = label

        if self.allow_low_quality_matches:
            self.set_low_quality_matches_(match_labels, match_quality_matrix)

        return matches, match_labels

    def set_low_quality_matches_(self, match_labels, match_quality_matrix):
        """Produce additional matches for predictions that have only low-quality matches."""
        # For each gt, find the prediction with which it has highest quality
        highest_quality_foreach_gt, _ = match_quality_matrix.max(dim=1)
        # Find the highest quality match available, even if it is low, including ties.
        # Note that the matches qualities must be positive due to the use of
        # `torch.nonzero`.
        gt_pred_pairs_of_highest_quality = torch.nonzero(match_quality_matrix == highest_quality_foreach_gt[:, None])  # BREAK: mark the predictions holding some gt's highest quality with .any(dim=0) and write 1 under that boolean mask
        # If an anchor was labeled positive only due to a low-quality match
        # with gt_A, but it has larger overlap with gt_B, it's matched index will still be gt_B.
        # This follows the implementation in Detectron, and is found to have no significant impact.
        pred_inds_to_update = gt_pred_pairs_of_highest_quality[:, 1]
        match_labels[pred_inds_to_update] = 1


def subsample_labels(labels, num_samples, positive_fraction, bg_label):
    """Return `num_samples` (or fewer, if not enough found) random samples from `labels` which is a mixture of
    positives & negatives. It will try to return as many positives as possible without exceeding
    `positive_fraction * num_samples`, and then try to fill the remaining slots with negatives."""
    positive = torch.nonzero((labels != -1) & (labels != bg_label), as_tuple=True)[0]  # BREAK must-not: the sample is randperm over the positives' data-dependent count; the index sets returned have data-dependent sizes by design
    negative = torch.nonzero(labels == bg_label, as_tuple=True)[0]  # BREAK must-not: the negatives are drawn by randperm(negative.numel()): the count sizes the draw and the returned index set

    num_pos = int(num_samples * positive_fraction)
    # protect against not enough positive examples
    num_pos = min(positive.numel(), num_pos)
    num_neg = num_samples - num_pos
    # protect against not enough negative examples
    num_neg = min(negative.numel(), num_neg)

    # randomly select positive and negative examples
    perm1 = torch.randperm(positive.numel(), device=positive.device)[:num_pos]
    perm2 = torch.randperm(negative.numel(), device=negative.device)[:num_neg]

    pos_idx = positive[perm1]
    neg_idx = negative[perm2]
    return pos_idx, neg_idx


# Value for clamping large dw and dh predictions. The heuristic is that we clamp
# such that dw and dh are no larger than what would transform a 16px box into a
# 1000px box (based on a small anchor, 16px, and a typical image size, 1000px).
_DEFAULT_SCALE_CLAMP = math.log(1000.0 / 16)


class Box2BoxTransform:
    """The box-to-box transform defined in R-CNN: (dx * width, dy * height, log dw, log dh)."""

    def __init__(self, weights, scale_clamp=_DEFAULT_SCALE_CLAMP):
        self.weights = weights
        self.scale_clamp = scale_clamp

    def get_deltas(self, src_boxes, target_boxes):
        assert isinstance(src_boxes, torch.Tensor), type(src_boxes)
        assert isinstance(target_boxes, torch.Tensor), type(target_boxes)

        src_widths = src_boxes[:, 2] - src_boxes[:, 0]
        src_heights = src_boxes[:, 3] - src_boxes[:, 1]
        src_ctr_x = src_boxes[:, 0] + 0.5 * src_widths
        src_ctr_y = src_boxes[:, 1] + 0.5 * src_heights

        target_widths = target_boxes[:, 2] - target_boxes[:, 0]
        target_heights = target_boxes[:, 3] - target_boxes[:, 1]
        target_ctr_x = target_boxes[:, 0] + 0.5 * target_widths
        target_ctr_y = target_boxes[:, 1] + 0.5 * target_heights

        wx, wy, ww, wh = self.weights
        dx = wx * (target_ctr_x - src_ctr_x) / src_widths
        dy = wy * (target_ctr_y - src_ctr_y) / src_heights
        dw = ww * torch.log(target_widths / src_widths)
        dh = wh * torch.log(target_heights / src_heights)

        deltas = torch.stack((dx, dy, dw, dh), dim=1)
        assert (src_widths > 0).all().item(), "Input boxes to Box2BoxTransform are not valid!"  # BREAK: assert on the 0-d bool tensor itself, which Dynamo keeps in the graph as a runtime assertion
        return deltas


def smooth_l1_loss(input, target, beta, reduction="none"):
    """fvcore's smooth L1 loss (the L1 loss when beta is below 1e-5)."""
    if beta < 1e-5:
        loss = torch.abs(input - target)
    else:
        n = torch.abs(input - target)
        cond = n < beta
        loss = torch.where(cond, 0.5 * n**2 / beta, n - 0.5 * beta)
    if reduction == "mean":
        loss = loss.mean() if loss.numel() > 0 else 0.0 * loss.sum()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


def _dense_box_regression_loss(anchors, box2box_transform, pred_anchor_deltas, gt_boxes, fg_mask,
                               box_reg_loss_type="smooth_l1", smooth_l1_beta=0.0):
    """Compute loss for dense multi-level box regression (the smooth-L1 case)."""
    anchors = torch.cat(anchors)
    if box_reg_loss_type == "smooth_l1":
        gt_anchor_deltas = [box2box_transform.get_deltas(anchors, k) for k in gt_boxes]
        gt_anchor_deltas = torch.stack(gt_anchor_deltas)  # (N, R, 4)
        loss_box_reg = smooth_l1_loss(torch.cat(pred_anchor_deltas, dim=1)[fg_mask], gt_anchor_deltas[fg_mask],
                                      beta=smooth_l1_beta, reduction="sum")
    else:
        raise ValueError(f"Invalid dense box regression loss type '{box_reg_loss_type}'")
    return loss_box_reg


class RPN(nn.Module):
    """``StandardRPNHead`` on one feature map with ``RPN.label_and_sample_anchors`` and the objectness loss."""

    def __init__(self, stride=8, anchor_size=24, batch_size_per_image=16, positive_fraction=0.5):
        super().__init__()
        self.stride = stride
        self.anchor_size = anchor_size
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(),
                                      nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
        self.conv = nn.Conv2d(16, 16, 3, 1, 1)
        self.objectness_logits = nn.Conv2d(16, 1, 1)
        self.anchor_matcher = Matcher([0.3, 0.7], [0, -1, 1], allow_low_quality_matches=True)
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction

    def anchors(self, h, w):
        ys, xs = torch.meshgrid(torch.arange(h) * self.stride + self.stride / 2,
                                torch.arange(w) * self.stride + self.stride / 2, indexing="ij")
        half = self.anchor_size / 2
        return torch.stack([xs - half, ys - half, xs + half, ys + half], dim=-1).reshape(-1, 4).float()

    def _subsample_labels(self, label):
        pos_idx, neg_idx = subsample_labels(label, self.batch_size_per_image, self.positive_fraction, 0)
        # Fill with the ignore label (-1), then set positive and negative labels
        label.fill_(-1)
        label.scatter_(0, pos_idx, 1)
        label.scatter_(0, neg_idx, 0)
        return label

    @torch.no_grad()
    def label_and_sample_anchors(self, anchors, gt_instances):
        gt_labels = []
        matched_gt_boxes = []
        for gt_boxes_i in gt_instances:
            match_quality_matrix = pairwise_iou(gt_boxes_i, anchors)
            matched_idxs, gt_labels_i = self.anchor_matcher(match_quality_matrix)
            # Matching is memory-expensive and may result in CPU tensors. But the result is small
            gt_labels_i = gt_labels_i.to(device=gt_boxes_i.device)
            # A vector of labels (-1, 0, 1) for each anchor
            gt_labels_i = self._subsample_labels(gt_labels_i)
            matched_gt_boxes_i = gt_boxes_i[matched_idxs]
            gt_labels.append(gt_labels_i)  # N,AHW
            matched_gt_boxes.append(matched_gt_boxes_i)
        return gt_labels, matched_gt_boxes

    def forward(self, images, gt_instances):
        features = self.backbone(images)
        n, _, h, w = features.shape
        anchors = self.anchors(h, w)
        t = F.relu(self.conv(features))
        pred_objectness_logits = [self.objectness_logits(t).permute(0, 2, 3, 1).flatten(1)]

        gt_labels, gt_boxes = self.label_and_sample_anchors(anchors, gt_instances)
        gt_labels = torch.stack(gt_labels)  # (N, sum(Hi*Wi*Ai))
        valid_mask = gt_labels >= 0
        objectness_loss = F.binary_cross_entropy_with_logits(torch.cat(pred_objectness_logits, dim=1)[valid_mask], gt_labels[valid_mask].to(torch.float32), reduction="sum")  # BREAK: the loss over every anchor with BCE's per-element weight valid_mask (still a sum)
        normalizer = self.batch_size_per_image * n
        return {"loss_rpn_cls": objectness_loss / normalizer}, gt_labels, torch.stack(gt_boxes)


def build_detectron2_rpn():
    seeded(1504)
    gt_instances = [torch.tensor([[6.0, 10.0, 30.0, 44.0], [36.0, 4.0, 60.0, 28.0], [28.0, 36.0, 58.0, 62.0]]),
                    torch.tensor([[2.0, 2.0, 22.0, 30.0], [30.0, 30.0, 62.0, 54.0], [40.0, 2.0, 52.0, 12.0]])]
    return RPN().train(), (torch.randn(2, 3, 64, 64), gt_instances)


class ROIHeads(nn.Module):
    """``StandardROIHeads`` training on one image: ``label_and_sample_proposals`` (the gt boxes appended to the
    proposals, the ``Matcher``, ``_sample_proposals``) and the box head with ``FastRCNNOutputLayers.losses``."""

    def __init__(self, num_classes=3, batch_size_per_image=16, positive_fraction=0.25):
        super().__init__()
        self.num_classes = num_classes
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.box_head = nn.Sequential(nn.Linear(16 + 4, 32), nn.ReLU())
        self.cls_score = nn.Linear(32, num_classes + 1)
        self.bbox_pred = nn.Linear(32, num_classes * 4)
        self.proposal_matcher = Matcher([0.5], [0, 1], allow_low_quality_matches=False)
        self.box2box_transform = Box2BoxTransform(weights=(10.0, 10.0, 5.0, 5.0))
        self.batch_size_per_image = batch_size_per_image
        self.positive_fraction = positive_fraction
        self.smooth_l1_beta = 0.0

    def _sample_proposals(self, matched_idxs, matched_labels, gt_classes):
        has_gt = gt_classes.numel() > 0
        # Get the corresponding GT for each proposal
        if has_gt:
            gt_classes = gt_classes[matched_idxs]
            # Label unmatched proposals (0 label from matcher) as background (label=num_classes)
            gt_classes[matched_labels == 0] = self.num_classes
            # Label ignore proposals (-1 label)
            gt_classes[matched_labels == -1] = -1
        else:
            gt_classes = torch.zeros_like(matched_idxs) + self.num_classes

        sampled_fg_idxs, sampled_bg_idxs = subsample_labels(gt_classes, self.batch_size_per_image, self.positive_fraction, self.num_classes)

        sampled_idxs = torch.cat([sampled_fg_idxs, sampled_bg_idxs], dim=0)
        return sampled_idxs, gt_classes[sampled_idxs]

    def box_reg_loss(self, proposal_boxes, gt_boxes, pred_deltas, gt_classes):
        box_dim = proposal_boxes.shape[1]  # 4 or 5
        # Regression loss is only computed for foreground proposals (those matched to a GT)
        fg_inds = torch.nonzero((gt_classes >= 0) & (gt_classes < self.num_classes), as_tuple=True)[0]  # BREAK: keep every proposal: gather each one's deltas at its class clamped into range and zero the smooth-L1 terms outside the foreground mask
        if pred_deltas.shape[1] == box_dim:  # cls-agnostic regression
            fg_pred_deltas = pred_deltas[fg_inds]
        else:
            fg_pred_deltas = pred_deltas.view(-1, self.num_classes, box_dim)[fg_inds, gt_classes[fg_inds]]

        loss_box_reg = _dense_box_regression_loss([proposal_boxes[fg_inds]], self.box2box_transform,
                                                  [fg_pred_deltas.unsqueeze(0)], [gt_boxes[fg_inds]], ...,
                                                  "smooth_l1", self.smooth_l1_beta)
        # The reg loss is normalized using the total number of regions (R), not the number
        # of foreground regions even though the box regression loss is only defined on
        # foreground regions.
        return loss_box_reg / max(gt_classes.numel(), 1.0)

    def forward(self, images, proposal_boxes, gt_boxes, gt_classes):
        features = self.backbone(images)
        # label_and_sample_proposals (add_ground_truth_to_proposals first)
        proposal_boxes = torch.cat([proposal_boxes, gt_boxes])
        match_quality_matrix = pairwise_iou(gt_boxes, proposal_boxes)
        matched_idxs, matched_labels = self.proposal_matcher(match_quality_matrix)
        sampled_idxs, sampled_classes = self._sample_proposals(matched_idxs, matched_labels, gt_classes)
        sampled_boxes = proposal_boxes[sampled_idxs]
        sampled_gt_boxes = gt_boxes[matched_idxs[sampled_idxs]]

        # box head: features at the box centres (a stand-in for ROIAlign), FastRCNNOutputLayers
        size = torch.tensor([images.shape[3], images.shape[2]], dtype=torch.float32)
        centres = ((sampled_boxes[:, :2] + sampled_boxes[:, 2:]) / 2 / size) * 2 - 1
        pooled = F.grid_sample(features, centres.view(1, 1, -1, 2), align_corners=False)[0, :, 0].t()
        box_features = self.box_head(torch.cat([pooled, sampled_boxes / size.repeat(2)], dim=1))
        scores = self.cls_score(box_features)
        proposal_deltas = self.bbox_pred(box_features)

        losses = {
            "loss_cls": F.cross_entropy(scores, sampled_classes, reduction="mean"),
            "loss_box_reg": self.box_reg_loss(sampled_boxes, sampled_gt_boxes, proposal_deltas, sampled_classes),
        }
        return losses


def build_detectron2_roi_heads():
    seeded(1505)
    gt_boxes = torch.tensor([[6.0, 10.0, 30.0, 44.0], [36.0, 4.0, 60.0, 28.0], [28.0, 36.0, 58.0, 62.0]])
    gt_classes = torch.tensor([0, 2, 1])
    xy = torch.rand(20, 2) * 44
    wh = torch.rand(20, 2) * 24 + 8
    proposals = torch.cat([xy, (xy + wh).clamp(max=64)], dim=1)
    return ROIHeads().train(), (torch.randn(1, 3, 64, 64), proposals, gt_boxes, gt_classes)
