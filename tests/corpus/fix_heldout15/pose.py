"""Human pose: leoxiaobin/deep-high-resolution-net.pytorch's training step (a SimpleBaseline ``PoseResNet``:
a strided backbone and deconvolution head, ``JointsMSELoss`` with target weights, and the PCK ``accuracy`` of
``lib/core/evaluate.py`` on the numpy heatmaps: ``calc_dists`` and ``dist_acc`` looping over joints on the host) and open-mmlab/mmpose's
``TopDown.forward_test`` (0.x: ``TopdownHeatmapSimpleHead.inference_model`` with ``flip_back`` on the numpy
heatmaps, ``decode`` through ``keypoints_from_heatmaps``' default +/-0.25 shift and ``transform_preds``)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .helpers import accuracy, get_max_preds, seeded

# ------------------------------------------------------------------ HRNet lib/models/pose_resnet.py, lib/core/loss.py


class PoseResNet(nn.Module):
    """SimpleBaseline: a small strided backbone, the deconvolution head and the final 1x1 layer."""

    def __init__(self, num_joints=5, widths=(8, 16, 16), deconv_filters=16):
        super().__init__()
        layers, c = [], 3
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            c = w
        self.backbone = nn.Sequential(*layers)
        self.inplanes = c
        self.deconv_layers = self._make_deconv_layer(1, [deconv_filters], [4])
        self.final_layer = nn.Conv2d(deconv_filters, num_joints, kernel_size=1, stride=1, padding=0)

    def _make_deconv_layer(self, num_layers, num_filters, num_kernels):
        assert num_layers == len(num_filters), "ERROR: num_deconv_layers is different len(num_deconv_filters)"
        layers = []
        for i in range(num_layers):
            kernel, padding, output_padding = num_kernels[i], 1, 0
            planes = num_filters[i]
            layers.append(nn.ConvTranspose2d(self.inplanes, planes, kernel, stride=2, padding=padding,
                                             output_padding=output_padding, bias=False))
            layers.append(nn.BatchNorm2d(planes, momentum=0.1))
            layers.append(nn.ReLU(inplace=True))
            self.inplanes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.backbone(x)
        x = self.deconv_layers(x)
        x = self.final_layer(x)
        return x


class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight):
        super().__init__()
        self.criterion = nn.MSELoss(reduction="mean")
        self.use_target_weight = use_target_weight

    def forward(self, output, target, target_weight):
        batch_size = output.size(0)
        num_joints = output.size(1)
        heatmaps_pred = output.reshape((batch_size, num_joints, -1)).split(1, 1)
        heatmaps_gt = target.reshape((batch_size, num_joints, -1)).split(1, 1)
        loss = 0

        for idx in range(num_joints):
            heatmap_pred = heatmaps_pred[idx].squeeze()
            heatmap_gt = heatmaps_gt[idx].squeeze()
            if self.use_target_weight:
                loss += 0.5 * self.criterion(heatmap_pred.mul(target_weight[:, idx]), heatmap_gt.mul(target_weight[:, idx]))
            else:
                loss += 0.5 * self.criterion(heatmap_pred, heatmap_gt)

        return loss / num_joints


class PoseTrainStep(nn.Module):
    """One iteration of ``lib/core/function.py``'s ``train`` (the optimizer step is the caller's)."""

    def __init__(self):
        super().__init__()
        self.model = PoseResNet()
        self.criterion = JointsMSELoss(use_target_weight=True)

    def forward(self, input, target, target_weight):
        outputs = self.model(input)
        if isinstance(outputs, list):
            loss = self.criterion(outputs[0], target, target_weight)
            for output in outputs[1:]:
                loss += self.criterion(output, target, target_weight)
        else:
            output = outputs
            loss = self.criterion(output, target, target_weight)

        # measure accuracy
        _, avg_acc, cnt, pred = accuracy(output.detach().cpu().numpy(), target.detach().cpu().numpy())
        return loss, avg_acc, cnt, pred


def gaussian_targets(joints, visible, heatmap_size=(12, 16), sigma=1.5):
    """``JointsDataset.generate_target``: one Gaussian per visible joint on the heatmap grid (numpy, host side)."""
    w, h = heatmap_size
    xs = np.arange(w, dtype=np.float32)[None, :]
    ys = np.arange(h, dtype=np.float32)[:, None]
    target = np.zeros((joints.shape[0], joints.shape[1], h, w), dtype=np.float32)
    for n in range(joints.shape[0]):
        for j in range(joints.shape[1]):
            if visible[n, j]:
                mu_x, mu_y = joints[n, j]
                target[n, j] = np.exp(-((xs - mu_x) ** 2 + (ys - mu_y) ** 2) / (2 * sigma**2))
    return torch.from_numpy(target), torch.from_numpy(visible.astype(np.float32))[:, :, None]


def build_hrnet_pose_train():
    seeded(1501)
    joints = np.array([[[3, 4], [7, 9], [9, 2], [0, 15], [5, 12]],
                       [[2, 2], [10, 13], [6, 6], [4, 11], [8, 3]]], dtype=np.float32)
    visible = np.array([[1, 1, 1, 0, 1], [1, 0, 1, 1, 1]], dtype=bool)
    target, target_weight = gaussian_targets(joints, visible)
    return PoseTrainStep().train(), (torch.randn(2, 3, 64, 48), target, target_weight)


# ------------------------------------------------------------------ mmpose 0.x models/detectors/top_down.py, heads, core


def flip_back(output_flipped, flip_pairs, target_type="GaussianHeatmap"):
    """Flip the flipped heatmaps back to the original form."""
    assert output_flipped.ndim == 4, "output_flipped should be [batch_size, num_keypoints, height, width]"
    shape_ori = output_flipped.shape
    channels = 1
    if target_type.lower() == "CombinedTarget".lower():
        channels = 3
        output_flipped[:, 1::3, ...] = -output_flipped[:, 1::3, ...]
    output_flipped = output_flipped.reshape(shape_ori[0], -1, channels, shape_ori[2], shape_ori[3])
    output_flipped_back = output_flipped.copy()

    # Swap left-right parts
    for left, right in flip_pairs:
        output_flipped_back[:, left, ...] = output_flipped[:, right, ...]
        output_flipped_back[:, right, ...] = output_flipped[:, left, ...]
    output_flipped_back = output_flipped_back.reshape(shape_ori)
    # Flip horizontally
    output_flipped_back = output_flipped_back[:, :, :, ::-1]
    return output_flipped_back


def transform_preds(coords, center, scale, output_size, use_udp=False):
    """Get final keypoint predictions from heatmaps and apply scaling and translation to map them back to the image."""
    assert coords.shape[1] in (2, 4, 5)
    assert len(center) == 2
    assert len(scale) == 2
    assert len(output_size) == 2

    # Recover the scale which is normalized by a factor of 200.
    scale = scale * 200.0

    if use_udp:
        scale_x = scale[0] / (output_size[0] - 1.0)
        scale_y = scale[1] / (output_size[1] - 1.0)
    else:
        scale_x = scale[0] / output_size[0]
        scale_y = scale[1] / output_size[1]

    target_coords = np.ones_like(coords)
    target_coords[:, 0] = coords[:, 0] * scale_x + center[0] - scale[0] * 0.5
    target_coords[:, 1] = coords[:, 1] * scale_y + center[1] - scale[1] * 0.5

    return target_coords


def keypoints_from_heatmaps(heatmaps, center, scale, unbiased=False, post_process="default", kernel=11,
                            valid_radius_factor=0.0546875, use_udp=False, target_type="GaussianHeatmap"):
    """Get final keypoint predictions from heatmaps and transform them back to the image."""
    # Avoid being affected
    heatmaps = heatmaps.copy()

    # detect conflicts
    if unbiased:
        assert post_process not in [False, None, "megvii"]
    if post_process in ["megvii", "unbiased"]:
        assert kernel > 0
    if use_udp:
        assert not post_process == "megvii"

    # normalize configs
    if post_process is False:
        post_process = None
    elif post_process is True:
        post_process = "unbiased" if unbiased else "default"
    elif post_process == "default":
        if unbiased:
            post_process = "unbiased"

    N, K, H, W = heatmaps.shape
    preds, maxvals = get_max_preds(heatmaps)
    if post_process is not None and post_process != "unbiased":
        # add +/-0.25 shift to the predicted locations for higher acc.
        for n in range(N):
            for k in range(K):
                heatmap = heatmaps[n][k]
                px = int(preds[n][k][0])  # BREAK: the shift for all (n, k) at once: integer px/py arrays, the interior test as a mask, the neighbours gathered by take_along_axis at clipped indices
                py = int(preds[n][k][1])
                if 1 < px < W - 1 and 1 < py < H - 1:
                    diff = np.array([heatmap[py][px + 1] - heatmap[py][px - 1], heatmap[py + 1][px] - heatmap[py - 1][px]])
                    preds[n][k] += np.sign(diff) * 0.25
                    if post_process == "megvii":
                        preds[n][k] += 0.5

    # Transform back to the image
    for i in range(N):
        preds[i] = transform_preds(preds[i], center[i], scale[i], [W, H], use_udp=use_udp)

    if post_process == "megvii":
        maxvals = maxvals / 255.0 + 0.5

    return preds, maxvals


class TopdownHeatmapSimpleHead(nn.Module):
    def __init__(self, in_channels=16, out_channels=5, num_deconv_filters=16, test_cfg=None):
        super().__init__()
        self.test_cfg = {} if test_cfg is None else test_cfg
        self.target_type = self.test_cfg.get("target_type", "GaussianHeatmap")
        self.deconv_layers = nn.Sequential(
            nn.ConvTranspose2d(in_channels, num_deconv_filters, 4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(num_deconv_filters),
            nn.ReLU(inplace=True),
        )
        self.final_layer = nn.Conv2d(num_deconv_filters, out_channels, kernel_size=1)

    def forward(self, x):
        if isinstance(x, list):
            x = x[0]
        x = self.deconv_layers(x)
        x = self.final_layer(x)
        return x

    def inference_model(self, x, flip_pairs=None):
        output = self.forward(x)
        if flip_pairs is not None:
            output_heatmap = flip_back(output.detach().cpu().numpy(), flip_pairs, target_type=self.target_type)
            # feature is not aligned, shift flipped heatmap for higher accuracy
            if self.test_cfg.get("shift_heatmap", False):
                output_heatmap[:, :, :, 1:] = output_heatmap[:, :, :, :-1]
        else:
            output_heatmap = output.detach().cpu().numpy()
        return output_heatmap

    def decode(self, img_metas, output, **kwargs):
        batch_size = len(img_metas)
        if "bbox_id" in img_metas[0]:
            bbox_ids = []
        else:
            bbox_ids = None

        c = np.zeros((batch_size, 2), dtype=np.float32)
        s = np.zeros((batch_size, 2), dtype=np.float32)
        image_paths = []
        score = np.ones(batch_size)
        for i in range(batch_size):
            c[i, :] = img_metas[i]["center"]
            s[i, :] = img_metas[i]["scale"]
            image_paths.append(img_metas[i]["image_file"])
            if "bbox_score" in img_metas[i]:
                score[i] = np.array(img_metas[i]["bbox_score"]).reshape(-1)[0]
            if bbox_ids is not None:
                bbox_ids.append(img_metas[i]["bbox_id"])

        preds, maxvals = keypoints_from_heatmaps(output, c, s, unbiased=self.test_cfg.get("unbiased_decoding", False),
                                                 post_process=self.test_cfg.get("post_process", "default"),
                                                 use_udp=self.test_cfg.get("use_udp", False), target_type=self.target_type)

        all_preds = np.zeros((batch_size, preds.shape[1], 3), dtype=np.float32)
        all_boxes = np.zeros((batch_size, 6), dtype=np.float32)
        all_preds[:, :, 0:2] = preds[:, :, 0:2]
        all_preds[:, :, 2:3] = maxvals
        all_boxes[:, 0:2] = c[:, 0:2]
        all_boxes[:, 2:4] = s[:, 0:2]
        all_boxes[:, 4] = np.prod(s * 200.0, axis=1)
        all_boxes[:, 5] = score

        result = {}
        result["preds"] = all_preds
        result["boxes"] = all_boxes
        result["image_paths"] = image_paths
        result["bbox_ids"] = bbox_ids
        return result


class TopDown(nn.Module):
    def __init__(self, test_cfg=None):
        super().__init__()
        self.test_cfg = {"flip_test": True, "post_process": "default", "shift_heatmap": False} if test_cfg is None else test_cfg
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
        )
        self.keypoint_head = TopdownHeatmapSimpleHead(test_cfg=self.test_cfg)

    @property
    def with_keypoint(self):
        return hasattr(self, "keypoint_head")

    def forward(self, img, img_metas, return_heatmap=False):
        """``forward_test``: the heatmaps of the image and its flip, averaged, decoded on the host."""
        assert img.size(0) == len(img_metas)
        batch_size, _, img_height, img_width = img.shape
        if batch_size > 1:
            assert "bbox_id" in img_metas[0]

        result = {}

        features = self.backbone(img)
        if self.with_keypoint:
            output_heatmap = self.keypoint_head.inference_model(features, flip_pairs=None)

        if self.test_cfg.get("flip_test", True):
            img_flipped = img.flip(3)
            features_flipped = self.backbone(img_flipped)
            if self.with_keypoint:
                output_flipped_heatmap = self.keypoint_head.inference_model(features_flipped, img_metas[0]["flip_pairs"])
                output_heatmap = (output_heatmap + output_flipped_heatmap) * 0.5

        if self.with_keypoint:
            keypoint_result = self.keypoint_head.decode(img_metas, output_heatmap, img_size=[img_width, img_height])
            result.update(keypoint_result)

            if not return_heatmap:
                output_heatmap = None

            result["output_heatmap"] = output_heatmap

        return result


def build_mmpose_topdown_test():
    seeded(1502)
    metas = [
        {"center": np.array([48.0, 64.0], dtype=np.float32), "scale": np.array([0.48, 0.64], dtype=np.float32),
         "image_file": f"data/coco/val2017/{i:012d}.jpg", "bbox_score": 0.9 - 0.1 * i, "bbox_id": i,
         "flip_pairs": [[1, 2], [3, 4]]}
        for i in range(2)
    ]
    return TopDown().eval(), (torch.randn(2, 3, 64, 48), metas)
