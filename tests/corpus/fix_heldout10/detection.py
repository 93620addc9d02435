"""Detection, tracking and 3-D perception: ultralytics' YOLOv8 task-aligned assigner and its box / DFL
losses, Mask2Former's point-sampled mask losses (uncertainty-based importance sampling), ByteTrack's
two-stage association of high- and low-score detections, and MMDetection3D's dynamic PointPillars
(points voxelised without a voxel cap, pillar features scattered to the BEV canvas)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .helpers import bbox_iou, box_iou, seeded

# --------------------------------------------------------------------------- YOLOv8: task-aligned assigner


def make_anchors(feats, strides, grid_cell_offset=0.5):
    """Generate anchors from features."""
    anchor_points, stride_tensor = [], []
    dtype, device = feats[0].dtype, feats[0].device
    for i, stride in enumerate(strides):
        _, _, h, w = feats[i].shape
        sx = torch.arange(end=w, device=device, dtype=dtype) + grid_cell_offset  # shift x
        sy = torch.arange(end=h, device=device, dtype=dtype) + grid_cell_offset  # shift y
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype, device=device))
    return torch.cat(anchor_points), torch.cat(stride_tensor)


def dist2bbox(distance, anchor_points, xywh=False, dim=-1):
    """Transform distance(ltrb) to box(xywh or xyxy)."""
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    return torch.cat((x1y1, x2y2), dim)


def bbox2dist(anchor_points, bbox, reg_max):
    """Transform bbox(xyxy) to dist(ltrb)."""
    x1y1, x2y2 = bbox.chunk(2, -1)
    return torch.cat((anchor_points - x1y1, x2y2 - anchor_points), -1).clamp_(0, reg_max - 0.01)


class TaskAlignedAssigner(nn.Module):
    """A task-aligned assigner for object detection: gt-objects to anchors from classification and IoU."""

    def __init__(self, topk=13, num_classes=80, alpha=1.0, beta=6.0, eps=1e-9):
        super().__init__()
        self.topk = topk
        self.num_classes = num_classes
        self.bg_idx = num_classes
        self.alpha = alpha
        self.beta = beta
        self.eps = eps

    @torch.no_grad()
    def forward(self, pd_scores, pd_bboxes, anc_points, gt_labels, gt_bboxes, mask_gt):
        self.bs = pd_scores.shape[0]
        self.n_max_boxes = gt_bboxes.shape[1]

        mask_pos, align_metric, overlaps = self.get_pos_mask(pd_scores, pd_bboxes, gt_labels, gt_bboxes, anc_points, mask_gt)
        target_gt_idx, fg_mask, mask_pos = self.select_highest_overlaps(mask_pos, overlaps, self.n_max_boxes)
        # Assigned target
        target_labels, target_bboxes, target_scores = self.get_targets(gt_labels, gt_bboxes, target_gt_idx, fg_mask)

        # Normalize
        align_metric *= mask_pos
        pos_align_metrics = align_metric.amax(dim=-1, keepdim=True)  # b, max_num_obj
        pos_overlaps = (overlaps * mask_pos).amax(dim=-1, keepdim=True)  # b, max_num_obj
        norm_align_metric = (align_metric * pos_overlaps / (pos_align_metrics + self.eps)).amax(-2).unsqueeze(-1)
        target_scores = target_scores * norm_align_metric
        return target_labels, target_bboxes, target_scores, fg_mask.bool(), target_gt_idx

    def get_pos_mask(self, pd_scores, pd_bboxes, gt_labels, gt_bboxes, anc_points, mask_gt):
        mask_in_gts = self.select_candidates_in_gts(anc_points, gt_bboxes)
        # Get anchor_align metric, (b, max_num_obj, h*w)
        align_metric, overlaps = self.get_box_metrics(pd_scores, pd_bboxes, gt_labels, gt_bboxes, mask_in_gts * mask_gt)
        # Get topk_metric mask, (b, max_num_obj, h*w)
        mask_topk = self.select_topk_candidates(align_metric, topk_mask=mask_gt.expand(-1, -1, self.topk).bool())
        # Merge all mask to a final mask, (b, max_num_obj, h*w)
        mask_pos = mask_topk * mask_in_gts * mask_gt
        return mask_pos, align_metric, overlaps

    def get_box_metrics(self, pd_scores, pd_bboxes, gt_labels, gt_bboxes, mask_gt):
        """Compute alignment metric given predicted and ground truth bounding boxes."""
        na = pd_bboxes.shape[-2]
        mask_gt = mask_gt.bool()  # b, max_num_obj, h*w
        overlaps = torch.zeros([self.bs, self.n_max_boxes, na], dtype=pd_bboxes.dtype, device=pd_bboxes.device)
        bbox_scores = torch.zeros([self.bs, self.n_max_boxes, na], dtype=pd_scores.dtype, device=pd_scores.device)

        ind = torch.zeros([2, self.bs, self.n_max_boxes], dtype=torch.long)  # 2, b, max_num_obj
        ind[0] = torch.arange(end=self.bs).view(-1, 1).expand(-1, self.n_max_boxes)  # b, max_num_obj
        ind[1] = gt_labels.squeeze(-1)  # b, max_num_obj
        # Get the scores of each grid for each gt cls
        bbox_scores[mask_gt] = pd_scores[ind[0], :, ind[1]][mask_gt]  # BREAK: torch.where(mask_gt, scores, 0)

        # (b, max_num_obj, 1, 4), (b, 1, h*w, 4)
        pd_boxes = pd_bboxes.unsqueeze(1).expand(-1, self.n_max_boxes, -1, -1)[mask_gt]  # BREAK: IoU over every (gt, anchor) pair, masked after
        gt_boxes = gt_bboxes.unsqueeze(2).expand(-1, -1, na, -1)[mask_gt]  # BREAK: IoU over every (gt, anchor) pair, masked after
        overlaps[mask_gt] = self.iou_calculation(gt_boxes, pd_boxes)

        align_metric = bbox_scores.pow(self.alpha) * overlaps.pow(self.beta)
        return align_metric, overlaps

    def iou_calculation(self, gt_bboxes, pd_bboxes):
        """IoU calculation for horizontal bounding boxes."""
        return bbox_iou(gt_bboxes, pd_bboxes, CIoU=True).squeeze(-1).clamp_(0)

    def select_topk_candidates(self, metrics, largest=True, topk_mask=None):
        # (b, max_num_obj, topk)
        topk_metrics, topk_idxs = torch.topk(metrics, self.topk, dim=-1, largest=largest)
        if topk_mask is None:
            topk_mask = (topk_metrics.max(-1, keepdim=True)[0] > self.eps).expand_as(topk_idxs)
        # (b, max_num_obj, topk)
        topk_idxs.masked_fill_(~topk_mask, 0)

        # (b, max_num_obj, topk, h*w) -> (b, max_num_obj, h*w)
        count_tensor = torch.zeros(metrics.shape, dtype=torch.int8, device=topk_idxs.device)
        ones = torch.ones_like(topk_idxs[:, :, :1], dtype=torch.int8, device=topk_idxs.device)
        for k in range(self.topk):
            # Expand topk_idxs for each value of k and add 1 at the specified positions
            count_tensor.scatter_add_(-1, topk_idxs[:, :, k : k + 1], ones)
        # Filter invalid bboxes
        count_tensor.masked_fill_(count_tensor > 1, 0)
        return count_tensor.to(metrics.dtype)

    def get_targets(self, gt_labels, gt_bboxes, target_gt_idx, fg_mask):
        # Assigned target labels, (b, 1)
        batch_ind = torch.arange(end=self.bs, dtype=torch.int64, device=gt_labels.device)[..., None]
        target_gt_idx = target_gt_idx + batch_ind * self.n_max_boxes  # (b, h*w)
        target_labels = gt_labels.long().flatten()[target_gt_idx]  # (b, h*w)
        # Assigned target boxes, (b, max_num_obj, 4) -> (b, h*w, 4)
        target_bboxes = gt_bboxes.view(-1, gt_bboxes.shape[-1])[target_gt_idx]
        # Assigned target scores
        target_labels.clamp_(0)
        target_scores = torch.zeros(
            (target_labels.shape[0], target_labels.shape[1], self.num_classes), dtype=torch.int64, device=target_labels.device
        )  # (b, h*w, 80)
        target_scores.scatter_(2, target_labels.unsqueeze(-1), 1)
        fg_scores_mask = fg_mask[:, :, None].repeat(1, 1, self.num_classes)  # (b, h*w, 80)
        target_scores = torch.where(fg_scores_mask > 0, target_scores, 0)
        return target_labels, target_bboxes, target_scores

    @staticmethod
    def select_candidates_in_gts(xy_centers, gt_bboxes, eps=1e-9):
        n_anchors = xy_centers.shape[0]
        bs, n_boxes, _ = gt_bboxes.shape
        lt, rb = gt_bboxes.view(-1, 1, 4).chunk(2, 2)  # left-top, right-bottom
        bbox_deltas = torch.cat((xy_centers[None] - lt, rb - xy_centers[None]), dim=2).view(bs, n_boxes, n_anchors, -1)
        return bbox_deltas.amin(3).gt_(eps)

    @staticmethod
    def select_highest_overlaps(mask_pos, overlaps, n_max_boxes):
        # (b, n_max_boxes, h*w) -> (b, h*w)
        fg_mask = mask_pos.sum(-2)
        if fg_mask.max() > 1:  # BREAK: always resolve, torch.where keeps the anchors with one gt
            mask_multi_gts = (fg_mask.unsqueeze(1) > 1).expand(-1, n_max_boxes, -1)  # (b, n_max_boxes, h*w)
            max_overlaps_idx = overlaps.argmax(1)  # (b, h*w)
            is_max_overlaps = torch.zeros(mask_pos.shape, dtype=mask_pos.dtype, device=mask_pos.device)
            is_max_overlaps.scatter_(1, max_overlaps_idx.unsqueeze(1), 1)
            mask_pos = torch.where(mask_multi_gts, is_max_overlaps, mask_pos).float()  # (b, n_max_boxes, h*w)
            fg_mask = mask_pos.sum(-2)
        # Find each grid serve which gt(index)
        target_gt_idx = mask_pos.argmax(-2)  # (b, h*w)
        return target_gt_idx, fg_mask, mask_pos


class DetectHead(nn.Module):
    """A YOLOv8 Detect head on two feature levels: box distributions (reg_max bins per side) and class logits."""

    def __init__(self, nc=4, ch=(8, 8), reg_max=8, strides=(8.0, 16.0)):
        super().__init__()
        self.nc = nc
        self.reg_max = reg_max
        self.no = nc + reg_max * 4
        self.stride = strides
        self.cv2 = nn.ModuleList(nn.Sequential(nn.Conv2d(x, 16, 3, padding=1), nn.SiLU(), nn.Conv2d(16, 4 * reg_max, 1)) for x in ch)
        self.cv3 = nn.ModuleList(nn.Sequential(nn.Conv2d(x, 16, 3, padding=1), nn.SiLU(), nn.Conv2d(16, nc, 1)) for x in ch)
        self.register_buffer("proj", torch.arange(reg_max, dtype=torch.float))

    def forward(self, feats):
        return [torch.cat((self.cv2[i](x), self.cv3[i](x)), 1) for i, x in enumerate(feats)]

    def decode(self, feats):
        preds = self(feats)
        pred_distri, pred_scores = torch.cat([xi.view(feats[0].shape[0], self.no, -1) for xi in preds], 2).split(
            (self.reg_max * 4, self.nc), 1
        )
        pred_scores = pred_scores.permute(0, 2, 1).contiguous()
        pred_distri = pred_distri.permute(0, 2, 1).contiguous()
        anchor_points, stride_tensor = make_anchors(preds, self.stride, 0.5)
        b, a, c = pred_distri.shape
        pred_bboxes = dist2bbox(pred_distri.view(b, a, 4, c // 4).softmax(3).matmul(self.proj), anchor_points)
        return pred_distri, pred_scores, pred_bboxes, anchor_points, stride_tensor


class YOLOv8Assign(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = DetectHead()
        self.assigner = TaskAlignedAssigner(topk=5, num_classes=self.head.nc, alpha=0.5, beta=6.0)

    def forward(self, feats, gt_labels, gt_bboxes):
        mask_gt = gt_bboxes.sum(2, keepdim=True).gt_(0.0)
        pred_distri, pred_scores, pred_bboxes, anchor_points, stride_tensor = self.head.decode(feats)
        _, target_bboxes, target_scores, fg_mask, target_gt_idx = self.assigner(
            pred_scores.detach().sigmoid(),
            (pred_bboxes.detach() * stride_tensor).type(gt_bboxes.dtype),
            anchor_points * stride_tensor,
            gt_labels,
            gt_bboxes,
            mask_gt,
        )
        return pred_scores, target_bboxes, target_scores, fg_mask, target_gt_idx


def yolo_batch(seed):
    g = seeded(seed)
    feats = [torch.randn(2, 8, 8, 8, generator=g), torch.randn(2, 8, 4, 4, generator=g)]
    # image 64x64; padded to 3 gts per image
    gt_bboxes = torch.tensor(
        [
            [[4.0, 6.0, 30.0, 34.0], [20.0, 18.0, 52.0, 44.0], [0.0, 0.0, 0.0, 0.0]],
            [[10.0, 12.0, 60.0, 58.0], [12.0, 14.0, 40.0, 40.0], [33.0, 2.0, 47.0, 22.0]],
        ]
    )
    gt_labels = torch.tensor([[[1], [3], [0]], [[0], [2], [1]]])
    return feats, gt_labels, gt_bboxes


def build_yolov8_assigner():
    torch.manual_seed(1201)
    feats, gt_labels, gt_bboxes = yolo_batch(1202)
    return YOLOv8Assign(), (feats, gt_labels, gt_bboxes)


# --------------------------------------------------------------------------- YOLOv8: box and DFL losses


class DFLoss(nn.Module):
    """Criterion class for computing Distribution Focal Loss (DFL)."""

    def __init__(self, reg_max=16) -> None:
        super().__init__()
        self.reg_max = reg_max

    def __call__(self, pred_dist, target):
        target = target.clamp_(0, self.reg_max - 1 - 0.01)
        tl = target.long()  # target left
        tr = tl + 1  # target right
        wl = tr - target  # weight left
        wr = 1 - wl  # weight right
        return (
            F.cross_entropy(pred_dist, tl.view(-1), reduction="none").view(tl.shape) * wl
            + F.cross_entropy(pred_dist, tr.view(-1), reduction="none").view(tl.shape) * wr
        ).mean(-1, keepdim=True)


class BboxLoss(nn.Module):
    """Criterion class for computing training losses during training."""

    def __init__(self, reg_max=16):
        super().__init__()
        self.dfl_loss = DFLoss(reg_max) if reg_max > 1 else None

    def forward(self, pred_dist, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask):
        """IoU loss."""
        weight = target_scores.sum(-1)[fg_mask].unsqueeze(-1)  # BREAK: weight every anchor by fg_mask instead of selecting
        iou = bbox_iou(pred_bboxes[fg_mask], target_bboxes[fg_mask], CIoU=True)  # BREAK: IoU on every anchor, weighted by fg_mask
        loss_iou = ((1.0 - iou) * weight).sum() / target_scores_sum

        # DFL loss
        if self.dfl_loss:
            target_ltrb = bbox2dist(anchor_points, target_bboxes, self.dfl_loss.reg_max - 1)
            loss_dfl = self.dfl_loss(pred_dist[fg_mask].view(-1, self.dfl_loss.reg_max), target_ltrb[fg_mask]) * weight  # BREAK: DFL on every anchor, weighted by fg_mask
            loss_dfl = loss_dfl.sum() / target_scores_sum
        else:
            loss_dfl = torch.tensor(0.0).to(pred_dist.device)
        return loss_iou, loss_dfl


class v8DetectionLoss(nn.Module):
    """The YOLOv8 detection loss given the assigner's targets (computed in the data pipeline's collate here)."""

    def __init__(self, head: DetectHead, box=7.5, cls=0.5, dfl=1.5):
        super().__init__()
        self.head = head
        self.bce = nn.BCEWithLogitsLoss(reduction="none")
        self.bbox_loss = BboxLoss(head.reg_max)
        self.hyp = {"box": box, "cls": cls, "dfl": dfl}

    def forward(self, feats, target_bboxes, target_scores, fg_mask):
        loss = torch.zeros(3, device=feats[0].device)  # box, cls, dfl
        pred_distri, pred_scores, pred_bboxes, anchor_points, stride_tensor = self.head.decode(feats)
        batch_size = pred_scores.shape[0]
        target_scores_sum = max(target_scores.sum(), 1)

        # Cls loss
        loss[1] = self.bce(pred_scores, target_scores.to(pred_scores.dtype)).sum() / target_scores_sum  # BCE

        # Bbox loss
        if fg_mask.sum():  # BREAK: always compute; the fg-masked terms are zero without foreground
            target_bboxes /= stride_tensor
            loss[0], loss[2] = self.bbox_loss(
                pred_distri, pred_bboxes, anchor_points, target_bboxes, target_scores, target_scores_sum, fg_mask
            )

        loss[0] *= self.hyp["box"]  # box gain
        loss[1] *= self.hyp["cls"]  # cls gain
        loss[2] *= self.hyp["dfl"]  # dfl gain
        return loss.sum() * batch_size, loss.detach()


def build_yolov8_loss():
    torch.manual_seed(1211)
    model = YOLOv8Assign()
    feats, gt_labels, gt_bboxes = yolo_batch(1212)
    with torch.no_grad():
        _, target_bboxes, target_scores, fg_mask, _ = model(feats, gt_labels, gt_bboxes)
    return v8DetectionLoss(model.head), (feats, target_bboxes.clone(), target_scores.float(), fg_mask)


# --------------------------------------------------------------------------- Mask2Former: point-sampled mask loss


def dice_loss(inputs, targets, num_masks):
    inputs = inputs.sigmoid()
    inputs = inputs.flatten(1)
    numerator = 2 * (inputs * targets).sum(-1)
    denominator = inputs.sum(-1) + targets.sum(-1)
    loss = 1 - (numerator + 1) / (denominator + 1)
    return loss.sum() / num_masks


def sigmoid_ce_loss(inputs, targets, num_masks):
    loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    return loss.mean(1).sum() / num_masks


def calculate_uncertainty(logits):
    """Uncertainty as the L1 distance between 0.0 and the logit prediction in 'logits' for the foreground class."""
    assert logits.shape[1] == 1
    gt_class_logits = logits.clone()
    return -(torch.abs(gt_class_logits))


def point_sample(input, point_coords, **kwargs):
    """A wrapper around :function:`torch.nn.functional.grid_sample` to support 3D point_coords tensors."""
    add_dim = False
    if point_coords.dim() == 3:
        add_dim = True
        point_coords = point_coords.unsqueeze(2)
    output = F.grid_sample(input, 2.0 * point_coords - 1.0, **kwargs)
    if add_dim:
        output = output.squeeze(3)
    return output


def get_uncertain_point_coords_with_randomness(coarse_logits, uncertainty_func, num_points, oversample_ratio,
                                               importance_sample_ratio):
    assert oversample_ratio >= 1
    assert importance_sample_ratio <= 1 and importance_sample_ratio >= 0
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
        point_coords = torch.cat(
            [point_coords, torch.rand(num_boxes, num_random_points, 2, device=coarse_logits.device)], dim=1
        )
    return point_coords


def get_world_size() -> int:
    if not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size()


class GreedyMatcher(nn.Module):
    """Bipartite matching on the class + mask-dice cost, greedily by lowest cost (scipy's Hungarian elsewhere)."""

    @torch.no_grad()
    def forward(self, outputs, targets):
        indices = []
        for b, tgt in enumerate(targets):
            prob = outputs["pred_logits"][b].softmax(-1)
            cost_class = -prob[:, tgt["labels"]]
            out_mask = outputs["pred_masks"][b].flatten(1).sigmoid()
            tgt_mask = F.interpolate(tgt["masks"][:, None], size=outputs["pred_masks"].shape[-2:], mode="nearest").flatten(1)
            numerator = 2 * out_mask @ tgt_mask.t()
            denominator = out_mask.sum(-1)[:, None] + tgt_mask.sum(-1)[None, :]
            cost = cost_class + (1 - (numerator + 1) / (denominator + 1))
            rows, cols = [], []
            for _ in range(cost.shape[1]):
                flat = cost.argmin()
                r, c = flat // cost.shape[1], flat % cost.shape[1]
                rows.append(r)
                cols.append(c)
                cost = cost.index_fill(0, r.view(1), float("inf")).index_fill(1, c.view(1), float("inf"))
            indices.append((torch.stack(rows), torch.stack(cols)))
        return indices


class SetCriterion(nn.Module):
    def __init__(self, num_classes=5, eos_coef=0.1, num_points=24, oversample_ratio=3.0, importance_sample_ratio=0.75):
        super().__init__()
        self.num_classes = num_classes
        self.matcher = GreedyMatcher()
        empty_weight = torch.ones(self.num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight)
        self.num_points = num_points
        self.oversample_ratio = oversample_ratio
        self.importance_sample_ratio = importance_sample_ratio

    def loss_labels(self, outputs, targets, indices, num_masks):
        src_logits = outputs["pred_logits"].float()
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices, strict=True)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64, device=src_logits.device)
        target_classes[idx] = target_classes_o
        loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
        return {"loss_ce": loss_ce}

    def loss_masks(self, outputs, targets, indices, num_masks):
        src_idx = self._get_src_permutation_idx(indices)
        src_masks = outputs["pred_masks"]
        src_masks = src_masks[src_idx]
        target_masks = torch.cat([t["masks"][J] for t, (_, J) in zip(targets, indices, strict=True)]).to(src_masks)
        # No need to upsample predictions as we are using normalized coordinates :)
        src_masks = src_masks[:, None]
        target_masks = target_masks[:, None]
        with torch.no_grad():
            # sample point_coords
            point_coords = get_uncertain_point_coords_with_randomness(
                src_masks, lambda logits: calculate_uncertainty(logits), self.num_points, self.oversample_ratio,
                self.importance_sample_ratio,
            )
            # get gt labels
            point_labels = point_sample(target_masks, point_coords, align_corners=False).squeeze(1)
        point_logits = point_sample(src_masks, point_coords, align_corners=False).squeeze(1)
        return {"loss_mask": sigmoid_ce_loss(point_logits, point_labels, num_masks),
                "loss_dice": dice_loss(point_logits, point_labels, num_masks)}

    def _get_src_permutation_idx(self, indices):
        # permute predictions following indices
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for (src, _) in indices])
        return batch_idx, src_idx

    def forward(self, outputs, targets):
        indices = self.matcher(outputs, targets)
        # Compute the average number of target masks accross all nodes, for normalization purposes
        num_masks = sum(len(t["labels"]) for t in targets)
        num_masks = torch.as_tensor([num_masks], dtype=torch.float, device=next(iter(outputs.values())).device)
        num_masks = torch.clamp(num_masks / get_world_size(), min=1).item()  # BREAK: keep num_masks a tensor
        losses = {}
        losses.update(self.loss_labels(outputs, targets, indices, num_masks))
        losses.update(self.loss_masks(outputs, targets, indices, num_masks))
        return losses


class MaskHead(nn.Module):
    """Queries dotted with per-pixel embeddings, the way Mask2Former's predictor forms its masks."""

    def __init__(self, num_queries=6, dim=16, num_classes=5):
        super().__init__()
        self.query_embed = nn.Embedding(num_queries, dim)
        self.pixel = nn.Conv2d(3, dim, 3, padding=1)
        self.class_embed = nn.Linear(dim, num_classes + 1)
        self.mask_embed = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward(self, images):
        pixel = self.pixel(images)
        q = self.query_embed.weight.unsqueeze(0).expand(images.shape[0], -1, -1)
        q = q + pixel.mean((2, 3)).unsqueeze(1)
        return {"pred_logits": self.class_embed(q), "pred_masks": torch.einsum("bqc,bchw->bqhw", self.mask_embed(q), pixel)}


class Mask2FormerLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = MaskHead()
        self.criterion = SetCriterion()

    def forward(self, images, targets):
        outputs = self.model(images)
        losses = self.criterion(outputs, targets)
        return sum(losses.values()), losses


def build_mask2former_points():
    torch.manual_seed(1221)
    g = seeded(1222)
    images = torch.randn(2, 3, 12, 12, generator=g)
    targets = []
    for n in (2, 3):
        masks = (torch.rand(n, 12, 12, generator=g) > 0.6).float()
        targets.append({"labels": torch.randint(0, 5, (n,), generator=g), "masks": masks})
    return Mask2FormerLoss(), (images, targets)


# --------------------------------------------------------------------------- ByteTrack association


def linear_assignment(cost_matrix, thresh):
    """Greedy assignment by lowest cost (lap.lapjv in the original): matched (track, detection) pairs."""
    cost = cost_matrix.tolist()  # BREAK: greedy matching with argmin over the masked cost tensor
    pairs = sorted((c, i, j) for i, row in enumerate(cost) for j, c in enumerate(row) if c <= thresh)
    used_rows, used_cols, matches = set(), set(), []
    for _, i, j in pairs:
        if i in used_rows or j in used_cols:
            continue
        used_rows.add(i)
        used_cols.add(j)
        matches.append((i, j))
    return matches


class BYTETracker(nn.Module):
    def __init__(self, track_boxes, track_velocity, track_thresh=0.5, match_thresh=0.8, second_match_thresh=0.5,
                 new_track_thresh=0.6):
        super().__init__()
        self.register_buffer("track_boxes", track_boxes.clone())
        self.register_buffer("track_velocity", track_velocity.clone())
        self.register_buffer("time_since_update", torch.zeros(len(track_boxes), dtype=torch.long))
        self.track_thresh = track_thresh
        self.match_thresh = match_thresh
        self.second_match_thresh = second_match_thresh
        self.new_track_thresh = new_track_thresh

    @torch.no_grad()
    def forward(self, output_results):
        scores = output_results[:, 4]
        remain_inds = scores > self.track_thresh
        inds_second = (scores > 0.1) & (scores < self.track_thresh)
        dets = output_results[remain_inds]  # BREAK: keep every detection, mask the cost matrix by score
        dets_second = output_results[inds_second]  # BREAK: keep every detection, mask the cost matrix by score

        # Kalman-style constant-velocity prediction of the tracked boxes
        predicted = self.track_boxes + self.track_velocity
        num_tracks = predicted.shape[0]

        # first association, with high score detection boxes
        dists = 1 - box_iou(predicted, dets[:, :4]) * dets[None, :, 4]  # fuse_score
        matches = linear_assignment(dists, thresh=self.match_thresh)
        track_matched = torch.zeros(num_tracks, dtype=torch.bool)
        det_matched = torch.zeros(len(dets), dtype=torch.bool)
        new_boxes = predicted.clone()
        for itracked, idet in matches:
            new_boxes[itracked] = dets[idet, :4]
            track_matched[itracked] = True
            det_matched[idet] = True

        # second association, with low score detection boxes and the tracks left over
        dists = 1 - box_iou(predicted, dets_second[:, :4])
        dists[track_matched] = 2.0
        matches_second = linear_assignment(dists, thresh=self.second_match_thresh)
        for itracked, idet in matches_second:
            new_boxes[itracked] = dets_second[idet, :4]
            track_matched[itracked] = True

        self.track_velocity.copy_(torch.where(track_matched[:, None], new_boxes - self.track_boxes, self.track_velocity))
        self.track_boxes.copy_(new_boxes)
        self.time_since_update.copy_(torch.where(track_matched, 0, self.time_since_update + 1))
        # init new stracks from the unmatched high-score detections
        new_tracks = dets[~det_matched & (dets[:, 4] > self.new_track_thresh)]  # BREAK must-not: the new tracks' count depends on which detections went unmatched
        return self.track_boxes.clone(), self.time_since_update.clone(), new_tracks


def build_bytetrack_assoc():
    tracks = torch.tensor([[10.0, 10.0, 30.0, 40.0], [50.0, 20.0, 70.0, 60.0], [80.0, 80.0, 95.0, 99.0], [5.0, 60.0, 25.0, 90.0]])
    velocity = torch.tensor([[1.0, 0.5, 1.0, 0.5], [-1.0, 0.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, -1.0, 0.5, -1.0]])
    g = seeded(1232)
    jitter = torch.randn(4, 4, generator=g)
    dets = torch.cat(
        [
            torch.cat([tracks[0] + velocity[0] + jitter[0], torch.tensor([0.9])]),
            torch.cat([tracks[1] + velocity[1] + jitter[1], torch.tensor([0.3])]),  # occluded: low score
            torch.cat([tracks[3] + velocity[3] + jitter[3], torch.tensor([0.75])]),
            torch.tensor([60.0, 70.0, 75.0, 95.0, 0.85]),  # a new object
            torch.tensor([0.0, 0.0, 8.0, 8.0, 0.05]),  # noise
            torch.tensor([40.0, 0.0, 52.0, 10.0, 0.55]),  # high but below the new-track threshold
        ]
    ).view(-1, 5)
    return BYTETracker(tracks, velocity), (dets,)


# --------------------------------------------------------------------------- MMDet3D dynamic PointPillars


class DynamicPillarFeatureNet(nn.Module):
    """Pillar feature net for dynamic voxelisation: per-point features with the offset from the pillar's
    point mean and from the pillar centre, a PFN layer, then a max over each pillar's points."""

    def __init__(self, in_channels=4, feat_channels=16, voxel_size=(0.5, 0.5, 4.0), point_cloud_range=(0, -4, -2, 8, 4, 2)):
        super().__init__()
        self.vx, self.vy, self.vz = voxel_size
        self.x_offset = self.vx / 2 + point_cloud_range[0]
        self.y_offset = self.vy / 2 + point_cloud_range[1]
        self.point_cloud_range = point_cloud_range
        self.linear = nn.Linear(in_channels + 5, feat_channels, bias=False)
        self.norm = nn.BatchNorm1d(feat_channels, eps=1e-3, momentum=0.01)

    def forward(self, features, coors):
        """features: [N, 4] points; coors: [N, 4] (batch, z, y, x) pillar coordinates of each point."""
        voxel_coors, inverse = torch.unique(coors, dim=0, return_inverse=True)  # BREAK: reduce over the dense (batch, y, x) canvas index instead
        num_voxels = voxel_coors.shape[0]
        # Find distance of x, y, and z from pillar center
        counts = features.new_zeros(num_voxels).index_add_(0, inverse, features.new_ones(len(features)))
        voxel_mean = features.new_zeros(num_voxels, 3).index_add_(0, inverse, features[:, :3]) / counts[:, None]
        f_cluster = features[:, :3] - voxel_mean[inverse]
        f_center = features.new_zeros(size=(features.size(0), 2))
        f_center[:, 0] = features[:, 0] - (coors[:, 3].type_as(features) * self.vx + self.x_offset)
        f_center[:, 1] = features[:, 1] - (coors[:, 2].type_as(features) * self.vy + self.y_offset)
        point_feats = F.relu(self.norm(self.linear(torch.cat([features, f_cluster, f_center], dim=-1))))
        voxel_feats = point_feats.new_zeros(num_voxels, point_feats.size(1)).scatter_reduce(
            0, inverse[:, None].expand_as(point_feats), point_feats, "amax", include_self=False
        )
        return voxel_feats, voxel_coors


class PointPillarsScatter(nn.Module):
    def __init__(self, in_channels, output_shape):
        super().__init__()
        self.output_shape = output_shape
        self.ny = output_shape[0]
        self.nx = output_shape[1]
        self.in_channels = in_channels

    def forward(self, voxel_features, coors, batch_size):
        # batch_canvas will be the final output.
        batch_canvas = []
        for batch_itt in range(batch_size):
            # Create the canvas for this sample
            canvas = torch.zeros(self.in_channels, self.nx * self.ny, dtype=voxel_features.dtype, device=voxel_features.device)
            # Only include non-empty pillars
            batch_mask = coors[:, 0] == batch_itt
            this_coors = coors[batch_mask, :]  # BREAK: one index_put over the whole batch's canvas
            indices = this_coors[:, 2] * self.nx + this_coors[:, 3]
            indices = indices.type(torch.long)
            voxels = voxel_features[batch_mask, :]
            voxels = voxels.t()
            # Now scatter the blob back to the canvas.
            canvas[:, indices] = voxels
            # Append to a list for later stacking.
            batch_canvas.append(canvas)
        # Stack to 3-dim tensor (batch-size, in_channels, nrows*ncols)
        batch_canvas = torch.stack(batch_canvas, 0)
        # Undo the column stacking to final 4-dim tensor
        return batch_canvas.view(batch_size, self.in_channels, self.ny, self.nx)


class DynamicPointPillars(nn.Module):
    def __init__(self, voxel_size=(0.5, 0.5, 4.0), point_cloud_range=(0.0, -4.0, -2.0, 8.0, 4.0, 2.0)):
        super().__init__()
        self.voxel_size = torch.tensor(voxel_size)
        self.pc_range = torch.tensor(point_cloud_range)
        self.grid_size = ((self.pc_range[3:] - self.pc_range[:3]) / self.voxel_size).round().long()  # x, y, z
        self.voxel_encoder = DynamicPillarFeatureNet(voxel_size=voxel_size, point_cloud_range=point_cloud_range)
        self.middle_encoder = PointPillarsScatter(16, (int(self.grid_size[1]), int(self.grid_size[0])))
        self.backbone = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
        self.cls_head = nn.Conv2d(16, 2, 1)

    @torch.no_grad()
    def voxelize(self, points, batch_idx):
        """Dynamic voxelisation: each point's (batch, z, y, x) voxel, -1 where it falls outside the range."""
        coors_xyz = torch.floor((points[:, :3] - self.pc_range[:3]) / self.voxel_size).long()
        in_range = ((coors_xyz >= 0) & (coors_xyz < self.grid_size)).all(dim=1)
        coors = torch.cat([batch_idx[:, None], coors_xyz.flip(1)], dim=1)
        return torch.where(in_range[:, None], coors, -1)

    def forward(self, points, batch_idx, batch_size: int):
        coors = self.voxelize(points, batch_idx)
        keep = (coors >= 0).all(dim=1)
        points, coors = points[keep], coors[keep]  # BREAK: carry every point, drop the out-of-range ones through the canvas index
        voxel_features, feature_coors = self.voxel_encoder(points, coors)
        x = self.middle_encoder(voxel_features, feature_coors, batch_size)
        return self.cls_head(self.backbone(x))


def build_pointpillars_dynamic():
    torch.manual_seed(1241)
    model = DynamicPointPillars().eval()
    g = seeded(1242)
    n = 120
    points = torch.cat(
        [torch.rand(n, 1, generator=g) * 9 - 0.5, torch.rand(n, 1, generator=g) * 9 - 4.5,
         torch.rand(n, 1, generator=g) * 3 - 1.5, torch.rand(n, 1, generator=g)], dim=1
    )
    batch_idx = (torch.arange(n) >= 70).long()
    return model, (points, batch_idx, 2)
