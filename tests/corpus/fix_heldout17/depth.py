"""Self-supervised monocular depth: nianticlabs/monodepth2 (stereo training, ``--use_stereo --frame_ids 0``).

``Trainer.process_batch`` on a small encoder / ``DepthDecoder`` (sigmoid disparity at each scale), ``disp_to_depth``,
``generate_images_pred`` (``BackprojectDepth`` / ``Project3D`` with the stereo baseline ``stereo_T``,
``grid_sample``), ``compute_losses`` (``SSIM`` + L1 reprojection, identity automasking with its tiny random
tie-breaker, the edge-aware ``get_smooth_loss``), then the logging step's ``compute_depth_losses`` (the KITTI
ground-truth mask and the Garg/Eigen crop selected by boolean indexing, median scaling, ``compute_depth_errors``,
each metric stored as ``np.array``).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import seeded


def disp_to_depth(disp, min_depth, max_depth):
    """Convert network's sigmoid output into depth prediction
    The formula for this conversion is given in the 'additional considerations'
    section of the paper.
    """
    min_disp = 1 / max_depth
    max_disp = 1 / min_depth
    scaled_disp = min_disp + (max_disp - min_disp) * disp
    depth = 1 / scaled_disp
    return scaled_disp, depth


class BackprojectDepth(nn.Module):
    """Layer to transform a depth image into a point cloud"""

    def __init__(self, batch_size, height, width):
        super().__init__()

        self.batch_size = batch_size
        self.height = height
        self.width = width

        meshgrid = np.meshgrid(range(self.width), range(self.height), indexing="xy")
        self.id_coords = np.stack(meshgrid, axis=0).astype(np.float32)
        self.id_coords = nn.Parameter(torch.from_numpy(self.id_coords), requires_grad=False)

        self.ones = nn.Parameter(
            torch.ones(self.batch_size, 1, self.height * self.width), requires_grad=False
        )

        self.pix_coords = torch.unsqueeze(
            torch.stack([self.id_coords[0].view(-1), self.id_coords[1].view(-1)], 0), 0
        )
        self.pix_coords = self.pix_coords.repeat(batch_size, 1, 1)
        self.pix_coords = nn.Parameter(torch.cat([self.pix_coords, self.ones], 1), requires_grad=False)

    def forward(self, depth, inv_K):
        cam_points = torch.matmul(inv_K[:, :3, :3], self.pix_coords)
        cam_points = depth.view(self.batch_size, 1, -1) * cam_points
        cam_points = torch.cat([cam_points, self.ones], 1)

        return cam_points


class Project3D(nn.Module):
    """Layer which projects 3D points into a camera with intrinsics K and at position T"""

    def __init__(self, batch_size, height, width, eps=1e-7):
        super().__init__()

        self.batch_size = batch_size
        self.height = height
        self.width = width
        self.eps = eps

    def forward(self, points, K, T):
        P = torch.matmul(K, T)[:, :3, :]

        cam_points = torch.matmul(P, points)

        pix_coords = cam_points[:, :2, :] / (cam_points[:, 2, :].unsqueeze(1) + self.eps)
        pix_coords = pix_coords.view(self.batch_size, 2, self.height, self.width)
        pix_coords = pix_coords.permute(0, 2, 3, 1)
        pix_coords[..., 0] /= self.width - 1
        pix_coords[..., 1] /= self.height - 1
        pix_coords = (pix_coords - 0.5) * 2
        return pix_coords


def get_smooth_loss(disp, img):
    """Computes the smoothness loss for a disparity image
    The color image is used for edge-aware smoothness
    """
    grad_disp_x = torch.abs(disp[:, :, :, :-1] - disp[:, :, :, 1:])
    grad_disp_y = torch.abs(disp[:, :, :-1, :] - disp[:, :, 1:, :])

    grad_img_x = torch.mean(torch.abs(img[:, :, :, :-1] - img[:, :, :, 1:]), 1, keepdim=True)
    grad_img_y = torch.mean(torch.abs(img[:, :, :-1, :] - img[:, :, 1:, :]), 1, keepdim=True)

    grad_disp_x *= torch.exp(-grad_img_x)
    grad_disp_y *= torch.exp(-grad_img_y)

    return grad_disp_x.mean() + grad_disp_y.mean()


class SSIM(nn.Module):
    """Layer to compute the SSIM loss between a pair of images"""

    def __init__(self):
        super().__init__()
        self.mu_x_pool = nn.AvgPool2d(3, 1)
        self.mu_y_pool = nn.AvgPool2d(3, 1)
        self.sig_x_pool = nn.AvgPool2d(3, 1)
        self.sig_y_pool = nn.AvgPool2d(3, 1)
        self.sig_xy_pool = nn.AvgPool2d(3, 1)

        self.refl = nn.ReflectionPad2d(1)

        self.C1 = 0.01**2
        self.C2 = 0.03**2

    def forward(self, x, y):
        x = self.refl(x)
        y = self.refl(y)

        mu_x = self.mu_x_pool(x)
        mu_y = self.mu_y_pool(y)

        sigma_x = self.sig_x_pool(x**2) - mu_x**2
        sigma_y = self.sig_y_pool(y**2) - mu_y**2
        sigma_xy = self.sig_xy_pool(x * y) - mu_x * mu_y

        SSIM_n = (2 * mu_x * mu_y + self.C1) * (2 * sigma_xy + self.C2)
        SSIM_d = (mu_x**2 + mu_y**2 + self.C1) * (sigma_x + sigma_y + self.C2)

        return torch.clamp((1 - SSIM_n / SSIM_d) / 2, 0, 1)


def compute_depth_errors(gt, pred):
    """Computation of error metrics between predicted and ground truth depths"""
    thresh = torch.max((gt / pred), (pred / gt))
    a1 = (thresh < 1.25).float().mean()
    a2 = (thresh < 1.25**2).float().mean()
    a3 = (thresh < 1.25**3).float().mean()

    rmse = (gt - pred) ** 2
    rmse = torch.sqrt(rmse.mean())

    rmse_log = (torch.log(gt) - torch.log(pred)) ** 2
    rmse_log = torch.sqrt(rmse_log.mean())

    abs_rel = torch.mean(torch.abs(gt - pred) / gt)

    sq_rel = torch.mean((gt - pred) ** 2 / gt)

    return abs_rel, sq_rel, rmse, rmse_log, a1, a2, a3


class ResnetEncoder(nn.Module):
    """A small stand-in for the ResNet-18 encoder: features at 1/2 .. 1/8."""

    def __init__(self):
        super().__init__()
        self.num_ch_enc = np.array([8, 16, 32])
        self.layers = nn.ModuleList(
            [
                nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(inplace=True)),
                nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU(inplace=True)),
                nn.Sequential(nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(inplace=True)),
            ]
        )

    def forward(self, input_image):
        self.features = []
        x = (input_image - 0.45) / 0.225
        for layer in self.layers:
            x = layer(x)
            self.features.append(x)
        return self.features


class DepthDecoder(nn.Module):
    def __init__(self, num_ch_enc, scales=range(4), num_output_channels=1, use_skips=True):
        super().__init__()

        self.num_output_channels = num_output_channels
        self.use_skips = use_skips
        self.scales = scales
        self.num_ch_enc = num_ch_enc
        self.num_ch_dec = np.array([8, 8, 16])

        self.convs = nn.ModuleDict()
        for i in range(2, -1, -1):
            num_ch_in = self.num_ch_enc[-1] if i == 2 else self.num_ch_dec[i + 1]
            self.convs[f"upconv_{i}_0"] = nn.Sequential(
                nn.ReflectionPad2d(1),
                nn.Conv2d(int(num_ch_in), int(self.num_ch_dec[i]), 3),
                nn.ELU(inplace=True),
            )
            num_ch_in = self.num_ch_dec[i]
            if self.use_skips and i > 0:
                num_ch_in += self.num_ch_enc[i - 1]
            self.convs[f"upconv_{i}_1"] = nn.Sequential(
                nn.ReflectionPad2d(1),
                nn.Conv2d(int(num_ch_in), int(self.num_ch_dec[i]), 3),
                nn.ELU(inplace=True),
            )
        for s in self.scales:
            self.convs[f"dispconv_{s}"] = nn.Sequential(
                nn.ReflectionPad2d(1), nn.Conv2d(int(self.num_ch_dec[s]), self.num_output_channels, 3)
            )
        self.sigmoid = nn.Sigmoid()

    def forward(self, input_features):
        self.outputs = {}

        # decoder
        x = input_features[-1]
        for i in range(2, -1, -1):
            x = self.convs[f"upconv_{i}_0"](x)
            x = [F.interpolate(x, scale_factor=2, mode="nearest")]
            if self.use_skips and i > 0:
                x += [input_features[i - 1]]
            x = torch.cat(x, 1)
            x = self.convs[f"upconv_{i}_1"](x)
            if i in self.scales:
                self.outputs[("disp", i)] = self.sigmoid(self.convs[f"dispconv_{i}"](x))

        return self.outputs


class Trainer(nn.Module):
    def __init__(self, options):
        super().__init__()
        self.opt = options
        self.num_scales = len(self.opt.scales)
        self.models = nn.ModuleDict()
        self.models["encoder"] = ResnetEncoder()
        self.models["depth"] = DepthDecoder(self.models["encoder"].num_ch_enc, self.opt.scales)
        self.ssim = SSIM()
        self.backproject_depth = {}
        self.project_3d = {}
        for scale in self.opt.scales:
            h = self.opt.height // (2**scale)
            w = self.opt.width // (2**scale)
            self.backproject_depth[scale] = BackprojectDepth(self.opt.batch_size, h, w)
            self.project_3d[scale] = Project3D(self.opt.batch_size, h, w)
        self.depth_metric_names = [
            "de/abs_rel",
            "de/sq_rel",
            "de/rms",
            "de/log_rms",
            "da/a1",
            "da/a2",
            "da/a3",
        ]
        self.device = torch.device("cpu")

    def forward(self, inputs):
        """``run_epoch``'s logging step: ``process_batch``, then ``compute_depth_losses`` into the losses."""
        self.models["encoder"].train()
        self.models["depth"].train()
        outputs, losses = self.process_batch(inputs)
        if "depth_gt" in inputs:
            self.compute_depth_losses(inputs, outputs, losses)
        return losses

    def process_batch(self, inputs):
        for key, ipt in inputs.items():
            inputs[key] = ipt.to(self.device)
        features = self.models["encoder"](inputs["color_aug", 0, 0])
        outputs = self.models["depth"](features)
        self.generate_images_pred(inputs, outputs)
        losses = self.compute_losses(inputs, outputs)
        return outputs, losses

    def generate_images_pred(self, inputs, outputs):
        for scale in self.opt.scales:
            disp = outputs[("disp", scale)]
            disp = F.interpolate(
                disp, [self.opt.height, self.opt.width], mode="bilinear", align_corners=False
            )
            source_scale = 0
            _, depth = disp_to_depth(disp, self.opt.min_depth, self.opt.max_depth)
            outputs[("depth", 0, scale)] = depth
            for i, frame_id in enumerate(self.opt.frame_ids[1:]):  # noqa: B007
                T = inputs["stereo_T"]
                cam_points = self.backproject_depth[source_scale](depth, inputs[("inv_K", source_scale)])
                pix_coords = self.project_3d[source_scale](cam_points, inputs[("K", source_scale)], T)
                outputs[("sample", frame_id, scale)] = pix_coords
                outputs[("color", frame_id, scale)] = F.grid_sample(
                    inputs[("color", frame_id, source_scale)],
                    outputs[("sample", frame_id, scale)],
                    padding_mode="border",
                    align_corners=True,
                )

    def compute_reprojection_loss(self, pred, target):
        abs_diff = torch.abs(target - pred)
        l1_loss = abs_diff.mean(1, True)
        ssim_loss = self.ssim(pred, target).mean(1, True)
        reprojection_loss = 0.85 * ssim_loss + 0.15 * l1_loss
        return reprojection_loss

    def compute_losses(self, inputs, outputs):
        losses = {}
        total_loss = 0
        for scale in self.opt.scales:
            loss = 0
            reprojection_losses = []
            source_scale = 0
            disp = outputs[("disp", scale)]
            color = inputs[("color", 0, scale)]
            target = inputs[("color", 0, source_scale)]
            for frame_id in self.opt.frame_ids[1:]:
                pred = outputs[("color", frame_id, scale)]
                reprojection_losses.append(self.compute_reprojection_loss(pred, target))
            reprojection_losses = torch.cat(reprojection_losses, 1)

            identity_reprojection_losses = []
            for frame_id in self.opt.frame_ids[1:]:
                pred = inputs[("color", frame_id, source_scale)]
                identity_reprojection_losses.append(self.compute_reprojection_loss(pred, target))
            identity_reprojection_losses = torch.cat(identity_reprojection_losses, 1)
            identity_reprojection_loss = identity_reprojection_losses

            reprojection_loss = reprojection_losses

            # add random numbers to break ties
            identity_reprojection_loss += (
                torch.randn(identity_reprojection_loss.shape, device=self.device) * 0.00001
            )
            combined = torch.cat((identity_reprojection_loss, reprojection_loss), dim=1)

            if combined.shape[1] == 1:
                to_optimise = combined
            else:
                to_optimise, idxs = torch.min(combined, dim=1)
            outputs[f"identity_selection/{scale}"] = (idxs > identity_reprojection_loss.shape[1] - 1).float()

            loss += to_optimise.mean()

            mean_disp = disp.mean(2, True).mean(3, True)
            norm_disp = disp / (mean_disp + 1e-7)
            smooth_loss = get_smooth_loss(norm_disp, color)

            loss += self.opt.disparity_smoothness * smooth_loss / (2**scale)
            total_loss += loss
            losses[f"loss/{scale}"] = loss

        total_loss /= self.num_scales
        losses["loss"] = total_loss
        return losses

    def compute_depth_losses(self, inputs, outputs, losses):
        """Compute depth metrics, to allow monitoring during training

        This isn't particularly accurate as it averages over the entire batch,
        so is only used to give an indication of validation performance
        """
        depth_pred = outputs[("depth", 0, 0)]
        depth_pred = torch.clamp(
            F.interpolate(depth_pred, [75, 248], mode="bilinear", align_corners=False), 1e-3, 80
        )
        depth_pred = depth_pred.detach()

        depth_gt = inputs["depth_gt"]
        mask = depth_gt > 0

        # garg/eigen crop (KITTI's 375 x 1242 crop, at a fifth of the resolution)
        crop_mask = torch.zeros_like(mask)
        crop_mask[:, :, 30:74, 9:239] = 1
        mask = mask * crop_mask

        depth_gt = depth_gt[mask]  # BREAK: masked means and medians instead of selecting
        depth_pred = depth_pred[mask]  # BREAK: the same mask
        depth_pred *= torch.median(depth_gt) / torch.median(depth_pred)

        depth_pred = torch.clamp(depth_pred, min=1e-3, max=80)

        depth_errors = compute_depth_errors(depth_gt, depth_pred)

        for i, metric in enumerate(self.depth_metric_names):
            losses[metric] = np.array(depth_errors[i].cpu())


def build_monodepth2_log_step():
    seeded(1718)
    opt = argparse.Namespace(
        height=32,
        width=96,
        scales=[0],
        frame_ids=[0, "s"],
        min_depth=0.1,
        max_depth=100.0,
        disparity_smoothness=1e-3,
        batch_size=2,
        use_stereo=True,
    )
    m = Trainer(opt)
    b, h, w = opt.batch_size, opt.height, opt.width
    K = torch.tensor(
        [[0.58 * w, 0, 0.5 * w, 0], [0, 1.92 * h, 0.5 * h, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    ).repeat(b, 1, 1)
    stereo_T = torch.eye(4).repeat(b, 1, 1)
    stereo_T[:, 0, 3] = -0.1  # baseline_sign * side_sign * 0.1
    left = torch.rand(b, 3, h, w)
    right = torch.roll(left, shifts=-2, dims=3)
    depth_gt = torch.rand(b, 1, 75, 248) * 60 + 5
    depth_gt = depth_gt * (torch.rand(b, 1, 75, 248) > 0.7)  # velodyne points: sparse
    inputs = {
        ("color_aug", 0, 0): left,
        ("color", 0, 0): left,
        ("color", "s", 0): right,
        ("K", 0): K,
        ("inv_K", 0): torch.linalg.inv(K),
        "stereo_T": stereo_T,
        "depth_gt": depth_gt,
    }
    return m, (inputs,)
