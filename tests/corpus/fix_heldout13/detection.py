"""3-D object detection: tianweiy/CenterPoint's ``CenterHead`` in training -- a shared conv and one ``SepHead`` per
task group (heatmap, offset, height, size, rotation), ``FastFocalLoss`` on the class heatmaps (the positive term
over the objects' gathered centres, divided by their count unless there is none) and ``RegLoss`` on the gathered box
regressions, the per-task losses merged key by key -- on the BEV map of a small PointPillars-style detector, as det3d's
``batch_processor`` runs it; the training targets (Gaussian heatmaps, centre indices and masks) are drawn as the data
pipeline's ``AssignLabel`` does."""

from __future__ import annotations

import copy
import math
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import example_to_device, seeded

# ------------------------------------------------------------------ det3d/models/losses/centernet_loss.py


def _gather_feat(feat, ind, mask=None):
    dim = feat.size(2)
    ind = ind.unsqueeze(2).expand(ind.size(0), ind.size(1), dim)
    feat = feat.gather(1, ind)
    if mask is not None:
        mask = mask.unsqueeze(2).expand_as(feat)
        feat = feat[mask]
        feat = feat.view(-1, dim)
    return feat


def _transpose_and_gather_feat(feat, ind):
    feat = feat.permute(0, 2, 3, 1).contiguous()
    feat = feat.view(feat.size(0), -1, feat.size(3))
    feat = _gather_feat(feat, ind)
    return feat


class RegLoss(nn.Module):
    """Regression loss for an output tensor: output (B x dim x H x W), mask (B x max_objects), ind (B x max_objects),
    target (B x max_objects x dim)."""

    def forward(self, output, mask, ind, target):
        pred = _transpose_and_gather_feat(output, ind)
        mask = mask.float().unsqueeze(2)
        loss = F.l1_loss(pred * mask, target * mask, reduction="none")
        loss = loss / (mask.sum() + 1e-4)
        loss = loss.transpose(2, 0).sum(dim=2).sum(dim=1)
        return loss


class FastFocalLoss(nn.Module):
    """Reimplemented focal loss, exactly the same as the CornerNet version; faster and costs much less memory."""

    def forward(self, out, target, ind, mask, cat):
        mask = mask.float()
        gt = torch.pow(1 - target, 4)
        neg_loss = torch.log(1 - out) * torch.pow(out, 2) * gt
        neg_loss = neg_loss.sum()

        pos_pred_pix = _transpose_and_gather_feat(out, ind)  # B x M x C
        pos_pred = pos_pred_pix.gather(2, cat.unsqueeze(2))  # B x M
        num_pos = mask.sum()
        pos_loss = torch.log(pos_pred) * torch.pow(1 - pos_pred, 2) * mask.unsqueeze(2)
        pos_loss = pos_loss.sum()
        if num_pos == 0:  # BREAK: return torch.where(num_pos == 0, -neg_loss, -(pos_loss + neg_loss) / num_pos.clamp(min=1)) instead of branching on the object count
            return -neg_loss
        return -(pos_loss + neg_loss) / num_pos


# ------------------------------------------------------------------ det3d/models/bbox_heads/center_head.py


class SepHead(nn.Module):
    def __init__(self, in_channels, heads, head_conv=16, final_kernel=1, bn=False, init_bias=-2.19):
        super().__init__()
        self.heads = heads
        for head in self.heads:
            classes, num_conv = self.heads[head]
            fc = nn.Sequential()
            for _ in range(num_conv - 1):
                fc.append(nn.Conv2d(in_channels, head_conv, kernel_size=final_kernel, stride=1, padding=final_kernel // 2, bias=True))
                if bn:
                    fc.append(nn.BatchNorm2d(head_conv))
                fc.append(nn.ReLU())
            fc.append(nn.Conv2d(head_conv, classes, kernel_size=final_kernel, stride=1, padding=final_kernel // 2, bias=True))
            if "hm" in head:
                fc[-1].bias.data.fill_(init_bias)
            self.__setattr__(head, fc)

    def forward(self, x):
        ret_dict = dict()
        for head in self.heads:
            ret_dict[head] = self.__getattr__(head)(x)
        return ret_dict


class CenterHead(nn.Module):
    def __init__(self, in_channels=16, tasks=(), dataset="nuscenes", weight=0.25, code_weights=(), common_heads=None,
                 init_bias=-2.19, share_conv_channel=16, num_hm_conv=2):
        super().__init__()
        num_classes = [len(t["class_names"]) for t in tasks]
        self.class_names = [t["class_names"] for t in tasks]
        self.code_weights = list(code_weights)
        self.weight = weight  # weight between hm loss and loc loss
        self.dataset = dataset
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.crit = FastFocalLoss()
        self.crit_reg = RegLoss()
        self.box_n_dim = 9 if "vel" in common_heads else 7
        # a shared convolution
        self.shared_conv = nn.Sequential(nn.Conv2d(in_channels, share_conv_channel, kernel_size=3, padding=1, bias=True),
                                         nn.BatchNorm2d(share_conv_channel), nn.ReLU(inplace=True))
        self.tasks = nn.ModuleList()
        for num_cls in num_classes:
            heads = copy.deepcopy(common_heads)
            heads.update(dict(hm=(num_cls, num_hm_conv)))
            self.tasks.append(SepHead(share_conv_channel, heads, head_conv=share_conv_channel, bn=True, init_bias=init_bias, final_kernel=3))

    def forward(self, x, *kwargs):
        ret_dicts = []
        x = self.shared_conv(x)
        for task in self.tasks:
            ret_dicts.append(task(x))
        return ret_dicts, x

    def _sigmoid(self, x):
        y = torch.clamp(x.sigmoid_(), min=1e-4, max=1 - 1e-4)
        return y

    def loss(self, example, preds_dicts, test_cfg, **kwargs):
        rets = []
        for task_id, preds_dict in enumerate(preds_dicts):
            # heatmap focal loss
            preds_dict["hm"] = self._sigmoid(preds_dict["hm"])
            hm_loss = self.crit(preds_dict["hm"], example["hm"][task_id], example["ind"][task_id], example["mask"][task_id], example["cat"][task_id])
            target_box = example["anno_box"][task_id]
            # reconstruct the anno_box from multiple reg heads
            if self.dataset in ["waymo", "nuscenes"]:
                if "vel" in preds_dict:
                    preds_dict["anno_box"] = torch.cat((preds_dict["reg"], preds_dict["height"], preds_dict["dim"], preds_dict["vel"], preds_dict["rot"]), dim=1)
                else:
                    preds_dict["anno_box"] = torch.cat((preds_dict["reg"], preds_dict["height"], preds_dict["dim"], preds_dict["rot"]), dim=1)
                    target_box = target_box[..., [0, 1, 2, 3, 4, 5, -2, -1]]  # remove vel target
            else:
                raise NotImplementedError()

            ret = {}
            # Regression loss for dimension, offset, height, rotation
            box_loss = self.crit_reg(preds_dict["anno_box"], example["mask"][task_id], example["ind"][task_id], target_box)
            loc_loss = (box_loss * box_loss.new_tensor(self.code_weights)).sum()
            loss = hm_loss + self.weight * loc_loss
            ret.update({"loss": loss, "hm_loss": hm_loss.detach().cpu(), "loc_loss": loc_loss, "loc_loss_elem": box_loss.detach().cpu(),
                        "num_positive": example["mask"][task_id].float().sum()})
            rets.append(ret)

        # convert batch-key to key-batch
        rets_merged = defaultdict(list)
        for ret in rets:
            for k, v in ret.items():
                rets_merged[k].append(v)
        return rets_merged


class PointPillarsBEV(nn.Module):
    """``PointPillars`` from the scattered pillar features on: an RPN-style BEV backbone and the ``CenterHead``."""

    def __init__(self, in_channels=8):
        super().__init__()
        self.neck = nn.Sequential(nn.Conv2d(in_channels, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        tasks = [dict(num_class=1, class_names=["car"]), dict(num_class=2, class_names=["pedestrian", "cyclist"])]
        common_heads = {"reg": (2, 2), "height": (1, 2), "dim": (3, 2), "rot": (2, 2), "vel": (2, 2)}
        self.bbox_head = CenterHead(in_channels=16, tasks=tasks, dataset="nuscenes", weight=0.25,
                                    code_weights=[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.2], common_heads=common_heads)
        self.test_cfg = None

    def extract_feat(self, example):
        return self.neck(example["bev_map"])

    def forward(self, example, return_loss=True, **kwargs):
        x = self.extract_feat(example)
        preds, _ = self.bbox_head(x)
        if return_loss:
            return self.bbox_head.loss(example, preds, self.test_cfg)
        raise NotImplementedError


class CenterPointStep(nn.Module):
    """det3d's ``batch_processor`` up to the model's losses (``parse_second_losses`` and the optimizer hook follow)."""

    def __init__(self):
        super().__init__()
        self.model = PointPillarsBEV()

    def forward(self, data, local_rank=None):
        example = example_to_device(data, local_rank, non_blocking=False)
        del data
        losses = self.model(example, return_loss=True)
        return sum(losses["loss"]), dict(losses)


# ------------------------------------------------------------------ targets as det3d/datasets/pipelines/preprocess.py draws them


def gaussian_radius(det_size, min_overlap=0.5):
    height, width = det_size
    a1 = 1
    b1 = height + width
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    sq1 = math.sqrt(b1**2 - 4 * a1 * c1)
    r1 = (b1 + sq1) / 2
    a2 = 4
    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    sq2 = math.sqrt(b2**2 - 4 * a2 * c2)
    r2 = (b2 + sq2) / 2
    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    sq3 = math.sqrt(b3**2 - 4 * a3 * c3)
    r3 = (b3 + sq3) / 2
    return min(r1, r2, r3)


def draw_umich_gaussian(heatmap, center, radius):
    diameter = 2 * radius + 1
    m, n = [(ss - 1.0) / 2.0 for ss in (diameter, diameter)]
    y, x = np.ogrid[-m : m + 1, -n : n + 1]
    gaussian = np.exp(-(x * x + y * y) / (2 * (diameter / 6) ** 2))
    x, y = int(center[0]), int(center[1])
    height, width = heatmap.shape[0:2]
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    masked_heatmap = heatmap[y - top : y + bottom, x - left : x + right]
    masked_gaussian = gaussian[radius - top : radius + bottom, radius - left : radius + right]
    if min(masked_gaussian.shape) > 0 and min(masked_heatmap.shape) > 0:
        np.maximum(masked_heatmap, masked_gaussian, out=masked_heatmap)
    return heatmap


def assign_label(objects_per_task, num_classes, size=12, max_objs=6):
    """One sample's targets per task: heatmaps, box targets, centre indices, masks and classes."""
    hms, anno_boxs, inds, masks, cats = [], [], [], [], []
    for objects, n_cls in zip(objects_per_task, num_classes, strict=True):
        hm = np.zeros((n_cls, size, size), dtype=np.float32)
        anno_box = np.zeros((max_objs, 10), dtype=np.float32)
        ind = np.zeros((max_objs,), dtype=np.int64)
        mask = np.zeros((max_objs,), dtype=np.uint8)
        cat = np.zeros((max_objs,), dtype=np.int64)
        for k, (cls_id, x, y, w, length, z, h, rot, vx, vy) in enumerate(objects):
            radius = max(0, int(gaussian_radius((length, w), min_overlap=0.1)))
            ct_int = np.array([int(x), int(y)], dtype=np.int32)
            draw_umich_gaussian(hm[cls_id], ct_int, radius)
            ind[k] = ct_int[1] * size + ct_int[0]
            mask[k] = 1
            cat[k] = cls_id
            anno_box[k] = np.array([x - ct_int[0], y - ct_int[1], z, np.log(w), np.log(length), np.log(h), vx, vy, np.sin(rot), np.cos(rot)])
        hms.append(hm)
        anno_boxs.append(anno_box)
        inds.append(ind)
        masks.append(mask)
        cats.append(cat)
    return hms, anno_boxs, inds, masks, cats


def build_centerpoint_head():
    seeded(1303)
    samples = [
        [[(0, 3.4, 5.2, 1.8, 4.2, 0.1, 1.5, 0.3, 0.5, 0.0), (0, 8.7, 2.6, 1.9, 4.6, -0.2, 1.6, 1.2, 0.0, 0.1)],
         [(1, 6.2, 9.5, 0.6, 0.7, 0.0, 1.7, 0.0, 0.2, 0.2)]],
        [[(0, 5.5, 7.1, 1.7, 4.0, 0.0, 1.5, -0.8, 1.0, 0.3)],
         [(0, 2.2, 2.9, 0.7, 0.8, 0.1, 1.8, 0.4, 0.0, 0.0), (1, 9.3, 8.4, 0.6, 1.7, 0.2, 1.7, 2.0, 0.9, 0.1)]],
    ]
    per_sample = [assign_label(s, [1, 2]) for s in samples]
    data = {"bev_map": torch.randn(2, 8, 12, 12)}
    for key, idx in (("hm", 0), ("anno_box", 1), ("ind", 2), ("mask", 3), ("cat", 4)):
        data[key] = [torch.from_numpy(np.stack([ps[idx][t] for ps in per_sample])) for t in range(2)]
    return CenterPointStep(), (data,)
