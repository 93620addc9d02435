"""Detection post-processing and losses: dbolya/yolact's ``Detect`` (per-image confidence filter, ``cc_fast_nms``)
and ``output_utils.postprocess`` (lincomb masks cropped to their boxes, ``sanitize_coordinates``),
biubug6/Pytorch_Retinaface's ``detect.py`` (``PriorBox``, ``decode`` / ``decode_landm``, the numpy threshold, top-k and
``py_cpu_nms``), WangYueFt/detr3d's ``NMSFreeCoder.decode_single`` (top-k over classes and queries,
``denormalize_bbox``, the post-centre range and the score threshold lowered until something passes, as PETR's copy of
it does), lyuwenyu/RT-DETR's ``RTDETRPostProcessor`` with the COCO category remap under ``det_engine.evaluate``, and
lufficc/SSD's ``MultiBoxLoss`` (``hard_negative_mining``, the mined and the positive priors selected by boolean masks,
``num_pos`` from the selection's length) on targets matched by amdegroot/ssd.pytorch's ``match``."""

from __future__ import annotations

import math
from itertools import product
from math import ceil

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import decode, jaccard, point_form, seeded

# ------------------------------------------------------------------ YOLACT


class Detect:
    """At test time, Detect is the final layer of SSD (YOLACT's fork): decode, threshold, fast NMS."""

    def __init__(self, num_classes, bkg_label, top_k, conf_thresh, nms_thresh):
        self.num_classes = num_classes
        self.background_label = bkg_label
        self.top_k = top_k
        # Parameters used in nms.
        self.nms_thresh = nms_thresh
        if nms_thresh <= 0:
            raise ValueError("nms_threshold must be non negative.")
        self.conf_thresh = conf_thresh
        self.use_cross_class_nms = True
        self.use_fast_nms = True

    def __call__(self, predictions):
        loc_data = predictions["loc"]
        conf_data = predictions["conf"]
        mask_data = predictions["mask"]
        prior_data = predictions["priors"]
        proto_data = predictions["proto"] if "proto" in predictions else None

        out = []
        batch_size = loc_data.size(0)
        num_priors = prior_data.size(0)
        conf_preds = conf_data.view(batch_size, num_priors, self.num_classes).transpose(2, 1).contiguous()
        for batch_idx in range(batch_size):
            decoded_boxes = decode(loc_data[batch_idx], prior_data, [0.1, 0.2])
            result = self.detect(batch_idx, conf_preds, decoded_boxes, mask_data)
            if result is not None and proto_data is not None:
                result["proto"] = proto_data[batch_idx]
            out.append({"detection": result})
        return out

    def detect(self, batch_idx, conf_preds, decoded_boxes, mask_data):
        """Perform nms for only the max scoring class that isn't background (class 0)"""
        cur_scores = conf_preds[batch_idx, 1:, :]
        conf_scores, _ = torch.max(cur_scores, dim=0)

        keep = conf_scores > self.conf_thresh
        scores = cur_scores[:, keep]  # BREAK: keep every prior and push the filtered ones to the bottom of the NMS order instead of selecting the kept ones
        boxes = decoded_boxes[keep, :]  # BREAK: the same filter for the boxes
        masks = mask_data[batch_idx, keep, :]  # BREAK: the same filter for the mask coefficients

        if scores.size(1) == 0:
            return None

        boxes, masks, classes, scores = self.cc_fast_nms(boxes, masks, scores, self.nms_thresh, self.top_k)
        return {"box": boxes, "mask": masks, "class": classes, "score": scores}

    def cc_fast_nms(self, boxes, masks, scores, iou_threshold: float = 0.5, top_k: int = 200):
        # Collapse all the classes into 1
        scores, classes = scores.max(dim=0)

        _, idx = scores.sort(0, descending=True)
        idx = idx[:top_k]

        boxes_idx = boxes[idx]

        # Compute the pairwise IoU between the boxes
        iou = jaccard(boxes_idx, boxes_idx)

        # Zero out the lower triangle of the cosine similarity matrix and diagonal
        iou.triu_(diagonal=1)

        # Now that everything in the diagonal and below is zeroed out, if we take the max
        # of the IoU matrix along the columns, each column will represent the maximum IoU
        # between this element and every element with a higher score than this element.
        iou_max, _ = torch.max(iou, dim=0)

        # Now just filter out the ones greater than the threshold, i.e., only keep boxes that
        # don't have a higher scoring box that would supress it in normal NMS.
        idx_out = idx[iou_max <= iou_threshold]  # BREAK must-not: the detections that survive are as many as the data says: the output's length is data-dependent

        return boxes[idx_out], masks[idx_out], classes[idx_out], scores[idx_out]


def sanitize_coordinates(_x1, _x2, img_size: int, padding: int = 0, cast: bool = True):
    _x1 = _x1 * img_size
    _x2 = _x2 * img_size
    if cast:
        _x1 = _x1.long()
        _x2 = _x2.long()
    x1 = torch.min(_x1, _x2)
    x2 = torch.max(_x1, _x2)
    x1 = torch.clamp(x1 - padding, min=0)
    x2 = torch.clamp(x2 + padding, max=img_size)
    return x1, x2


def crop(masks, boxes, padding: int = 1):
    h, w, n = masks.size()
    x1, x2 = sanitize_coordinates(boxes[:, 0], boxes[:, 2], w, padding, cast=False)
    y1, y2 = sanitize_coordinates(boxes[:, 1], boxes[:, 3], h, padding, cast=False)

    rows = torch.arange(w, device=masks.device, dtype=x1.dtype).view(1, -1, 1).expand(h, w, n)
    cols = torch.arange(h, device=masks.device, dtype=x1.dtype).view(-1, 1, 1).expand(h, w, n)

    masks_left = rows >= x1.view(1, 1, -1)
    masks_right = rows < x2.view(1, 1, -1)
    masks_up = cols >= y1.view(1, 1, -1)
    masks_down = cols < y2.view(1, 1, -1)

    crop_mask = masks_left * masks_right * masks_up * masks_down
    return masks * crop_mask.float()


def postprocess(det_output, w, h, batch_idx=0, interpolation_mode="bilinear", crop_masks=True, score_threshold=0):
    dets = det_output[batch_idx]
    dets = dets["detection"]

    if dets is None:
        return [torch.Tensor()] * 4  # Warning, this is 4 copies of the same thing

    if score_threshold > 0:
        keep = dets["score"] > score_threshold
        for k in dets:
            if k != "proto":
                dets[k] = dets[k][keep]
        if dets["score"].size(0) == 0:
            return [torch.Tensor()] * 4

    classes = dets["class"]
    boxes = dets["box"]
    scores = dets["score"]
    masks = dets["mask"]

    # At this points masks is only the coefficients
    proto_data = dets["proto"]
    masks = proto_data @ masks.t()
    masks = torch.sigmoid(masks)
    if crop_masks:
        masks = crop(masks, boxes)
    masks = masks.permute(2, 0, 1).contiguous()
    masks = F.interpolate(masks.unsqueeze(0), (h, w), mode=interpolation_mode, align_corners=False).squeeze(0)
    masks.gt_(0.5)

    boxes[:, 0], boxes[:, 2] = sanitize_coordinates(boxes[:, 0], boxes[:, 2], w, cast=False)
    boxes[:, 1], boxes[:, 3] = sanitize_coordinates(boxes[:, 1], boxes[:, 3], h, cast=False)
    boxes = boxes.long()
    return classes, scores, boxes, masks


class YolactEval(nn.Module):
    """``eval.py``'s ``prep_display`` path on a batch of head outputs: the detect layer, then ``postprocess`` per image."""

    def __init__(self, num_classes=5):
        super().__init__()
        self.num_classes = num_classes
        self.detect = Detect(num_classes, bkg_label=0, top_k=20, conf_thresh=0.3, nms_thresh=0.5)

    def forward(self, preds, w, h):
        dets_out = self.detect(preds)
        return [postprocess(dets_out, w, h, batch_idx=i) for i in range(len(dets_out))]


def build_yolact_detect():
    seeded(1601)
    batch, num_priors, num_classes, k, ph = 2, 48, 5, 8, 12
    cxcy = torch.rand(num_priors, 2)
    wh = torch.rand(num_priors, 2) * 0.3 + 0.05
    preds = {
        "loc": torch.randn(batch, num_priors, 4) * 0.5,
        "conf": torch.softmax(torch.randn(batch, num_priors, num_classes) * 2.0, -1),
        "mask": torch.tanh(torch.randn(batch, num_priors, k)),
        "priors": torch.cat([cxcy, wh], 1),
        "proto": torch.relu(torch.randn(batch, ph, ph, k)),
    }
    return YolactEval(num_classes).eval(), (preds, 24, 24)


# ------------------------------------------------------------------ Pytorch_Retinaface


cfg_mnet = {"min_sizes": [[4, 8], [16, 32]], "steps": [8, 16], "variance": [0.1, 0.2], "clip": False}


class PriorBox:
    def __init__(self, cfg, image_size=None, phase="train"):
        self.min_sizes = cfg["min_sizes"]
        self.steps = cfg["steps"]
        self.clip = cfg["clip"]
        self.image_size = image_size
        self.feature_maps = [[ceil(self.image_size[0] / step), ceil(self.image_size[1] / step)] for step in self.steps]
        self.name = "s"

    def forward(self):
        anchors = []
        for k, f in enumerate(self.feature_maps):
            min_sizes = self.min_sizes[k]
            for i, j in product(range(f[0]), range(f[1])):
                for min_size in min_sizes:
                    s_kx = min_size / self.image_size[1]
                    s_ky = min_size / self.image_size[0]
                    dense_cx = [x * self.steps[k] / self.image_size[1] for x in [j + 0.5]]
                    dense_cy = [y * self.steps[k] / self.image_size[0] for y in [i + 0.5]]
                    for cy, cx in product(dense_cy, dense_cx):
                        anchors += [cx, cy, s_kx, s_ky]

        # back to torch land
        output = torch.Tensor(anchors).view(-1, 4)
        if self.clip:
            output.clamp_(max=1, min=0)
        return output


def decode_landm(pre, priors, variances):
    landms = torch.cat((priors[:, :2] + pre[:, :2] * variances[0] * priors[:, 2:],
                        priors[:, :2] + pre[:, 2:4] * variances[0] * priors[:, 2:],
                        priors[:, :2] + pre[:, 4:6] * variances[0] * priors[:, 2:],
                        priors[:, :2] + pre[:, 6:8] * variances[0] * priors[:, 2:],
                        priors[:, :2] + pre[:, 8:10] * variances[0] * priors[:, 2:],
                        ), dim=1)
    return landms


def py_cpu_nms(dets, thresh):
    """Pure Python NMS baseline."""
    x1 = dets[:, 0]
    y1 = dets[:, 1]
    x2 = dets[:, 2]
    y2 = dets[:, 3]
    scores = dets[:, 4]

    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]

    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        xx1 = np.maximum(x1[i], x1[order[1:]])  # BREAK must-not: greedy NMS runs as many rounds as the overlaps leave boxes, each at a box chosen by the data
        yy1 = np.maximum(y1[i], y1[order[1:]])
        xx2 = np.minimum(x2[i], x2[order[1:]])
        yy2 = np.minimum(y2[i], y2[order[1:]])

        w = np.maximum(0.0, xx2 - xx1 + 1)
        h = np.maximum(0.0, yy2 - yy1 + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)

        inds = np.where(ovr <= thresh)[0]
        order = order[inds + 1]

    return keep


class RetinaFace(nn.Module):
    """A MobileNet-0.25-sized RetinaFace: two FPN levels, SSH-less, class / box / landmark heads."""

    def __init__(self, cfg):
        super().__init__()
        self.body1 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.body2 = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU())
        na = len(cfg["min_sizes"][0])
        self.ClassHead = nn.ModuleList([nn.Conv2d(16, na * 2, 1) for _ in range(2)])
        self.BboxHead = nn.ModuleList([nn.Conv2d(16, na * 4, 1) for _ in range(2)])
        self.LandmarkHead = nn.ModuleList([nn.Conv2d(16, na * 10, 1) for _ in range(2)])

    def forward(self, inputs):
        f1 = self.body1(inputs)
        f2 = self.body2(f1)
        features = [f1, f2]
        bbox_regressions = torch.cat([self.BboxHead[i](f).permute(0, 2, 3, 1).contiguous().view(f.shape[0], -1, 4) for i, f in enumerate(features)], dim=1)
        classifications = torch.cat([self.ClassHead[i](f).permute(0, 2, 3, 1).contiguous().view(f.shape[0], -1, 2) for i, f in enumerate(features)], dim=1)
        ldm_regressions = torch.cat([self.LandmarkHead[i](f).permute(0, 2, 3, 1).contiguous().view(f.shape[0], -1, 10) for i, f in enumerate(features)], dim=1)
        return bbox_regressions, F.softmax(classifications, dim=-1), ldm_regressions


class RetinaFaceDetect(nn.Module):
    """``detect.py``'s body for one image (``resize = 1``, the default thresholds scaled to the toy net)."""

    def __init__(self):
        super().__init__()
        self.cfg = cfg_mnet
        self.net = RetinaFace(cfg=self.cfg)
        self.confidence_threshold = 0.5
        self.top_k = 30
        self.nms_threshold = 0.4
        self.keep_top_k = 10

    def forward(self, img_raw):
        cfg = self.cfg
        resize = 1
        img = np.float32(img_raw)
        im_height, im_width, _ = img.shape
        scale = torch.Tensor([img.shape[1], img.shape[0], img.shape[1], img.shape[0]])
        img -= (104, 117, 123)
        img = img.transpose(2, 0, 1)
        img = torch.from_numpy(img).unsqueeze(0)

        loc, conf, landms = self.net(img / 128.0)  # forward pass

        priorbox = PriorBox(cfg, image_size=(im_height, im_width))
        priors = priorbox.forward()
        prior_data = priors.data
        boxes = decode(loc.data.squeeze(0), prior_data, cfg["variance"])
        boxes = boxes * scale / resize
        boxes = boxes.cpu().numpy()
        scores = conf.squeeze(0).data.cpu().numpy()[:, 1]
        landms = decode_landm(landms.data.squeeze(0), prior_data, cfg["variance"])
        scale1 = torch.Tensor([img.shape[3], img.shape[2], img.shape[3], img.shape[2],
                               img.shape[3], img.shape[2], img.shape[3], img.shape[2],
                               img.shape[3], img.shape[2]])
        landms = landms * scale1 / resize
        landms = landms.cpu().numpy()

        # ignore low scores
        inds = np.where(scores > self.confidence_threshold)[0]  # BREAK must-not: the boxes over the threshold are as many as the data says, and the greedy NMS after it runs box by box on the host
        boxes = boxes[inds]
        landms = landms[inds]
        scores = scores[inds]

        # keep top-K before NMS
        order = scores.argsort()[::-1][: self.top_k]
        boxes = boxes[order]
        landms = landms[order]
        scores = scores[order]

        # do NMS
        dets = np.hstack((boxes, scores[:, np.newaxis])).astype(np.float32, copy=False)  # BREAK: the arrays are float32 already: a plain astype (or none) gives the same values
        keep = np.array(py_cpu_nms(dets, self.nms_threshold), dtype=np.int64)
        dets = dets[keep, :]
        landms = landms[keep]

        # keep top-K faster NMS
        dets = dets[: self.keep_top_k, :]
        landms = landms[: self.keep_top_k, :]

        dets = np.concatenate((dets, landms), axis=1)
        return dets


def build_retinaface_detect():
    seeded(1602)
    model = RetinaFaceDetect().eval()
    with torch.no_grad():
        model.net.ClassHead[0].bias.copy_(torch.tensor([0.0, 0.3, 0.0, 0.3]))
    img_raw = np.random.randint(0, 256, size=(32, 32, 3)).astype(np.uint8)
    return model, (img_raw,)


# ------------------------------------------------------------------ DETR3D projects/mmdet3d_plugin/core/bbox


def denormalize_bbox(normalized_bboxes, pc_range):
    # rotation
    rot_sine = normalized_bboxes[..., 6:7]
    rot_cosine = normalized_bboxes[..., 7:8]
    rot = torch.atan2(rot_sine, rot_cosine)

    # center in the bev
    cx = normalized_bboxes[..., 0:1]
    cy = normalized_bboxes[..., 1:2]
    cz = normalized_bboxes[..., 4:5]

    # size
    w = normalized_bboxes[..., 2:3]
    l = normalized_bboxes[..., 3:4]  # noqa: E741
    h = normalized_bboxes[..., 5:6]

    w = w.exp()
    l = l.exp()  # noqa: E741
    h = h.exp()
    if normalized_bboxes.size(-1) > 8:
        # velocity
        vx = normalized_bboxes[:, 8:9]
        vy = normalized_bboxes[:, 9:10]
        denormalized_bboxes = torch.cat([cx, cy, cz, w, l, h, rot, vx, vy], dim=-1)
    else:
        denormalized_bboxes = torch.cat([cx, cy, cz, w, l, h, rot], dim=-1)
    return denormalized_bboxes


class NMSFreeCoder:
    """Bbox coder for NMS-free detector."""

    def __init__(self, pc_range, voxel_size=None, post_center_range=None, max_num=100, score_threshold=None, num_classes=10):
        self.pc_range = pc_range
        self.voxel_size = voxel_size
        self.post_center_range = post_center_range
        self.max_num = max_num
        self.score_threshold = score_threshold
        self.num_classes = num_classes

    def decode_single(self, cls_scores, bbox_preds):
        max_num = self.max_num

        cls_scores = cls_scores.sigmoid()
        scores, indexs = cls_scores.view(-1).topk(max_num)
        labels = indexs % self.num_classes
        bbox_index = indexs // self.num_classes
        bbox_preds = bbox_preds[bbox_index]

        final_box_preds = denormalize_bbox(bbox_preds, self.pc_range)
        final_scores = scores
        final_preds = labels

        # use score threshold
        if self.score_threshold is not None:
            thresh_mask = final_scores > self.score_threshold
            tmp_score = self.score_threshold
            while thresh_mask.sum() == 0:  # BREAK: the lowered thresholds are a fixed sequence: pick the first that some score passes with a where over them
                tmp_score *= 0.9
                if tmp_score < 0.01:
                    thresh_mask = final_scores > -1
                    break
                thresh_mask = final_scores >= tmp_score

        if self.post_center_range is not None:
            self.post_center_range = torch.tensor(self.post_center_range, device=scores.device)
            mask = (final_box_preds[..., :3] >= self.post_center_range[:3]).all(1)
            mask &= (final_box_preds[..., :3] <= self.post_center_range[3:]).all(1)

            if self.score_threshold:
                mask &= thresh_mask

            boxes3d = final_box_preds[mask]  # BREAK must-not: the boxes inside the range and over the threshold are as many as the data says
            scores = final_scores[mask]  # BREAK: select the scores (and the labels) in the same selection as the boxes, packed as extra columns
            labels = final_preds[mask]  # BREAK: the labels in that same selection (an integer column of the packed rows)
            predictions_dict = {"bboxes": boxes3d, "scores": scores, "labels": labels}
        else:
            raise NotImplementedError("Need to reorganize output as a batch, only support post_center_range is not None for now!")
        return predictions_dict

    def decode(self, preds_dicts):
        all_cls_scores = preds_dicts["all_cls_scores"][-1]
        all_bbox_preds = preds_dicts["all_bbox_preds"][-1]

        batch_size = all_cls_scores.size()[0]
        predictions_list = []
        for i in range(batch_size):
            predictions_list.append(self.decode_single(all_cls_scores[i], all_bbox_preds[i]))
        return predictions_list


class Detr3DHeadGetBboxes(nn.Module):
    """``Detr3DHead.get_bboxes``: decode every sample, move the box centre to the bottom face."""

    def __init__(self):
        super().__init__()
        pc_range = [-51.2, -51.2, -5.0, 51.2, 51.2, 3.0]
        self.bbox_coder = NMSFreeCoder(pc_range=pc_range, post_center_range=[-61.2, -61.2, -10.0, 61.2, 61.2, 10.0],
                                       max_num=30, score_threshold=0.6, num_classes=10)

    def forward(self, preds_dicts):
        preds_dicts = self.bbox_coder.decode(preds_dicts)
        num_samples = len(preds_dicts)
        ret_list = []
        for i in range(num_samples):
            preds = preds_dicts[i]
            bboxes = preds["bboxes"]
            bboxes[:, 2] = bboxes[:, 2] - bboxes[:, 5] * 0.5
            scores = preds["scores"]
            labels = preds["labels"]
            ret_list.append([bboxes, scores, labels])
        return ret_list


def build_detr3d_decode():
    seeded(1603)
    num_layers, batch, num_query, num_classes = 2, 2, 40, 10
    cls = torch.randn(num_layers, batch, num_query, num_classes) - 1.0
    cls[-1, 0, :3, 2] = 2.0  # the first sample has confident queries, the second must lower its threshold
    cls[-1, 1] -= 1.5
    reg = torch.randn(num_layers, batch, num_query, 10)
    reg[..., :2] *= 40.0
    reg[..., 2:4] *= 0.3
    reg[..., 5] *= 0.3
    return Detr3DHeadGetBboxes().eval(), ({"all_cls_scores": cls, "all_bbox_preds": reg},)


# ------------------------------------------------------------------ RT-DETR rtdetr_pytorch/src/zoo/rtdetr/rtdetr_postprocessor.py

mscoco_category_ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34, 35,
                       36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65,
                       67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]
mscoco_label2category = {k: v for k, v in enumerate(mscoco_category_ids)}


def box_convert_cxcywh_to_xyxy(boxes):
    """torchvision.ops.box_convert(boxes, in_fmt='cxcywh', out_fmt='xyxy')"""
    cx, cy, w, h = boxes.unbind(-1)
    x1 = cx - 0.5 * w
    y1 = cy - 0.5 * h
    x2 = cx + 0.5 * w
    y2 = cy + 0.5 * h
    return torch.stack((x1, y1, x2, y2), dim=-1)


class RTDETRPostProcessor(nn.Module):
    __share__ = ["num_classes", "use_focal_loss", "num_top_queries", "remap_mscoco_category"]

    def __init__(self, num_classes=80, use_focal_loss=True, num_top_queries=300, remap_mscoco_category=False) -> None:
        super().__init__()
        self.use_focal_loss = use_focal_loss
        self.num_top_queries = num_top_queries
        self.num_classes = num_classes
        self.remap_mscoco_category = remap_mscoco_category
        self.deploy_mode = False

    def forward(self, outputs, orig_target_sizes):
        logits, boxes = outputs["pred_logits"], outputs["pred_boxes"]
        # orig_target_sizes = torch.stack([t["orig_size"] for t in targets], dim=0)

        bbox_pred = box_convert_cxcywh_to_xyxy(boxes)
        bbox_pred *= orig_target_sizes.repeat(1, 2).unsqueeze(1)

        if self.use_focal_loss:
            scores = F.sigmoid(logits)
            scores, index = torch.topk(scores.flatten(1), self.num_top_queries, axis=-1)
            labels = index % self.num_classes
            index = index // self.num_classes
            boxes = bbox_pred.gather(dim=1, index=index.unsqueeze(-1).repeat(1, 1, bbox_pred.shape[-1]))
        else:
            scores = F.softmax(logits)[:, :, :-1]
            scores, labels = scores.max(dim=-1)
            boxes = bbox_pred
            if scores.shape[1] > self.num_top_queries:
                scores, index = torch.topk(scores, self.num_top_queries, dim=-1)
                labels = torch.gather(labels, dim=1, index=index)
                boxes = torch.gather(boxes, dim=1, index=index.unsqueeze(-1).tile(1, 1, boxes.shape[-1]))

        # TODO for onnx export
        if self.deploy_mode:
            return labels, boxes, scores

        # TODO
        if self.remap_mscoco_category:
            labels = torch.tensor([mscoco_label2category[int(x.item())] for x in labels.flatten()]).to(boxes.device).reshape(labels.shape)  # BREAK: map the labels through a lookup tensor of the category ids (indexed by the labels) instead of a dict per element

        results = []
        for lab, box, sco in zip(labels, boxes, scores):  # noqa: B905
            result = dict(labels=lab, boxes=box, scores=sco)
            results.append(result)

        return results


class RTDETREvaluate(nn.Module):
    """``det_engine.evaluate``'s body for one batch of decoder outputs: post-process, key the results by image id."""

    def __init__(self):
        super().__init__()
        self.postprocessor = RTDETRPostProcessor(num_classes=80, use_focal_loss=True, num_top_queries=12, remap_mscoco_category=True)

    def forward(self, outputs, targets):
        orig_target_sizes = torch.stack([t["orig_size"] for t in targets], dim=0)
        results = self.postprocessor(outputs, orig_target_sizes)
        res = {target["image_id"].item(): output for target, output in zip(targets, results)}  # BREAK must-not: the results are keyed by each image's id: a dict key needs the value on the host  # noqa: B905
        return res


def build_rtdetr_evaluate():
    seeded(1614)
    outputs = {"pred_logits": torch.randn(2, 20, 80), "pred_boxes": torch.rand(2, 20, 4) * 0.5 + 0.25}
    targets = [{"image_id": torch.tensor([139]), "orig_size": torch.tensor([64, 48])}, {"image_id": torch.tensor([285]), "orig_size": torch.tensor([40, 56])}]
    return RTDETREvaluate().eval(), (outputs, targets)


# ------------------------------------------------------------------ lufficc/SSD ssd/modeling/box_head/loss.py, ssd/utils/box_utils.py
# (the targets matched by amdegroot/ssd.pytorch's ``match`` in the data pipeline)


def encode(matched, priors, variances):
    # dist b/t match center and prior's center
    g_cxcy = (matched[:, :2] + matched[:, 2:]) / 2 - priors[:, :2]
    # encode variance
    g_cxcy /= variances[0] * priors[:, 2:]
    # match wh / prior wh
    g_wh = (matched[:, 2:] - matched[:, :2]) / priors[:, 2:]
    g_wh = torch.log(g_wh) / variances[1]
    # return target for smooth_l1_loss
    return torch.cat([g_cxcy, g_wh], 1)  # [num_priors,4]


def match(threshold, truths, priors, variances, labels, loc_t, conf_t, idx):
    """Match each prior box with the ground truth box of the highest jaccard overlap, encode the bounding boxes."""
    # jaccard index
    overlaps = jaccard(truths, point_form(priors))
    # (Bipartite Matching)
    # [1,num_objects] best prior for each ground truth
    best_prior_overlap, best_prior_idx = overlaps.max(1, keepdim=True)
    # [1,num_priors] best ground truth for each prior
    best_truth_overlap, best_truth_idx = overlaps.max(0, keepdim=True)
    best_truth_idx.squeeze_(0)
    best_truth_overlap.squeeze_(0)
    best_prior_idx.squeeze_(1)
    best_prior_overlap.squeeze_(1)
    best_truth_overlap.index_fill_(0, best_prior_idx, 2)  # ensure best prior
    # TODO refactor: index  best_prior_idx with long tensor
    # ensure every gt matches with its prior of max overlap
    for j in range(best_prior_idx.size(0)):
        best_truth_idx[best_prior_idx[j]] = j
    matches = truths[best_truth_idx]  # Shape: [num_priors,4]
    conf = labels[best_truth_idx] + 1  # Shape: [num_priors]
    conf[best_truth_overlap < threshold] = 0  # label as background
    loc = encode(matches, priors, variances)
    loc_t[idx] = loc  # [num_priors,4] encoded offsets to learn
    conf_t[idx] = conf  # [num_priors] top class label for each prior


def hard_negative_mining(loss, labels, neg_pos_ratio):
    """It used to suppress the presence of a large number of negative prediction: keep the negatives with the
    largest losses, ``neg_pos_ratio`` of them per positive."""
    pos_mask = labels > 0
    num_pos = pos_mask.long().sum(dim=1, keepdim=True)
    num_neg = num_pos * neg_pos_ratio

    loss[pos_mask] = -math.inf
    _, indexes = loss.sort(dim=1, descending=True)
    _, orders = indexes.sort(dim=1)
    neg_mask = orders < num_neg
    return pos_mask | neg_mask


class MultiBoxLoss(nn.Module):
    def __init__(self, neg_pos_ratio):
        """Implement SSD MultiBox Loss: classification loss with hard negative mining, smooth L1 regression."""
        super().__init__()
        self.neg_pos_ratio = neg_pos_ratio

    def forward(self, confidence, predicted_locations, labels, gt_locations):
        num_classes = confidence.size(2)
        with torch.no_grad():
            # derived from cross_entropy=sum(log(p))
            loss = -F.log_softmax(confidence, dim=2)[:, :, 0]
            mask = hard_negative_mining(loss, labels, self.neg_pos_ratio)

        confidence = confidence[mask, :]  # BREAK: the cross entropy of every prior weighted by the mask sums the same (no selection)
        classification_loss = F.cross_entropy(confidence.view(-1, num_classes), labels[mask], reduction="sum")  # BREAK: the labels kept whole for that weighted sum

        pos_mask = labels > 0
        predicted_locations = predicted_locations[pos_mask, :].view(-1, 4)  # BREAK: a smooth L1 over every prior with the negatives zeroed by pos_mask
        gt_locations = gt_locations[pos_mask, :].view(-1, 4)  # BREAK: the targets masked the same way; num_pos becomes pos_mask.sum()
        smooth_l1_loss = F.smooth_l1_loss(predicted_locations, gt_locations, reduction="sum")
        num_pos = gt_locations.size(0)
        return smooth_l1_loss / num_pos, classification_loss / num_pos


class SSDHeadLoss(nn.Module):
    """``do_train``'s forward: an SSD box head on a feature map (``SSDBoxHead`` predictor), then ``MultiBoxLoss``
    on the targets that ``SSDTargetTransform`` matched in the data pipeline."""

    def __init__(self, num_classes=4, num_anchors=2):
        super().__init__()
        self.num_classes = num_classes
        self.reg_header = nn.Conv2d(8, num_anchors * 4, 3, padding=1)
        self.cls_header = nn.Conv2d(8, num_anchors * num_classes, 3, padding=1)
        self.loss_evaluator = MultiBoxLoss(neg_pos_ratio=3)

    def forward(self, feats, labels, gt_boxes):
        bbox_pred = self.reg_header(feats).permute(0, 2, 3, 1).contiguous().view(feats.size(0), -1, 4)
        cls_logits = self.cls_header(feats).permute(0, 2, 3, 1).contiguous().view(feats.size(0), -1, self.num_classes)
        reg_loss, cls_loss = self.loss_evaluator(cls_logits, bbox_pred, labels, gt_boxes)
        return dict(reg_loss=reg_loss, cls_loss=cls_loss)


def build_ssd_multibox_loss():
    seeded(1616)
    h = w = 4
    cy, cx = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")
    centers = torch.stack([cx, cy], -1).view(-1, 1, 2).expand(-1, 2, 2).reshape(-1, 2)
    sizes = torch.tensor([[0.2, 0.2], [0.35, 0.25]]).repeat(h * w, 1)
    priors = torch.cat([centers, sizes], 1)
    targets = [torch.tensor([[0.1, 0.1, 0.4, 0.35, 0.0], [0.5, 0.55, 0.9, 0.85, 2.0]]), torch.tensor([[0.3, 0.2, 0.7, 0.6, 1.0]])]
    # the target transform of the data pipeline (matching as ssd.pytorch's ``match``), run per image before batching
    loc_t = torch.zeros(2, priors.size(0), 4)
    conf_t = torch.zeros(2, priors.size(0), dtype=torch.long)
    for idx, t in enumerate(targets):
        match(0.5, t[:, :-1], priors, [0.1, 0.2], t[:, -1].long(), loc_t, conf_t, idx)
    return SSDHeadLoss(), (torch.randn(2, 8, h, w), conf_t, loc_t)
