"""Optical flow: ClementPinard/FlowNetPytorch.

``models/FlowNetS.py`` (the strided encoder, ``deconv`` / ``predict_flow`` / ``crop_like`` refinement, the multi-scale
flows in training mode), ``multiscaleloss.py`` (``EPE`` with the sparse KITTI ground truth's invalid pixels -- both
components exactly 0 -- dropped by boolean indexing, ``sparse_max_pool``, ``multiscaleEPE``, ``realEPE``), and the
loss half of ``main.py``'s ``train`` iteration (the highest-resolution flow upsampled for sparse targets, the
``AverageMeter``s and the tensorboard writer fed with ``.item()``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.init import constant_, kaiming_normal_

from .helpers import ScalarWriter, seeded

device = torch.device("cpu")


def conv(batchNorm, in_planes, out_planes, kernel_size=3, stride=1):
    if batchNorm:
        return nn.Sequential(
            nn.Conv2d(
                in_planes,
                out_planes,
                kernel_size=kernel_size,
                stride=stride,
                padding=(kernel_size - 1) // 2,
                bias=False,
            ),
            nn.BatchNorm2d(out_planes),
            nn.LeakyReLU(0.1, inplace=True),
        )
    else:
        return nn.Sequential(
            nn.Conv2d(
                in_planes,
                out_planes,
                kernel_size=kernel_size,
                stride=stride,
                padding=(kernel_size - 1) // 2,
                bias=True,
            ),
            nn.LeakyReLU(0.1, inplace=True),
        )


def predict_flow(in_planes):
    return nn.Conv2d(in_planes, 2, kernel_size=3, stride=1, padding=1, bias=False)


def deconv(in_planes, out_planes):
    return nn.Sequential(
        nn.ConvTranspose2d(in_planes, out_planes, kernel_size=4, stride=2, padding=1, bias=False),
        nn.LeakyReLU(0.1, inplace=True),
    )


def crop_like(input, target):
    if input.size()[2:] == target.size()[2:]:
        return input
    else:
        return input[:, :, : target.size(2), : target.size(3)]


class FlowNetS(nn.Module):
    expansion = 1

    def __init__(self, batchNorm=True):
        super().__init__()

        self.batchNorm = batchNorm
        self.conv1 = conv(self.batchNorm, 6, 16, kernel_size=7, stride=2)
        self.conv2 = conv(self.batchNorm, 16, 32, kernel_size=5, stride=2)
        self.conv3 = conv(self.batchNorm, 32, 32, kernel_size=5, stride=2)
        self.conv4 = conv(self.batchNorm, 32, 64, stride=2)

        self.deconv3 = deconv(64, 32)
        self.deconv2 = deconv(32 + 32 + 2, 16)

        self.predict_flow4 = predict_flow(64)
        self.predict_flow3 = predict_flow(32 + 32 + 2)
        self.predict_flow2 = predict_flow(16 + 32 + 2)

        self.upsampled_flow4_to_3 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)
        self.upsampled_flow3_to_2 = nn.ConvTranspose2d(2, 2, 4, 2, 1, bias=False)

        for m in self.modules():
            if isinstance(m, nn.Conv2d) or isinstance(m, nn.ConvTranspose2d):
                kaiming_normal_(m.weight, 0.1)
                if m.bias is not None:
                    constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                constant_(m.weight, 1)
                constant_(m.bias, 0)

    def forward(self, x):
        out_conv2 = self.conv2(self.conv1(x))
        out_conv3 = self.conv3(out_conv2)
        out_conv4 = self.conv4(out_conv3)

        flow4 = self.predict_flow4(out_conv4)
        flow4_up = crop_like(self.upsampled_flow4_to_3(flow4), out_conv3)
        out_deconv3 = crop_like(self.deconv3(out_conv4), out_conv3)

        concat3 = torch.cat((out_conv3, out_deconv3, flow4_up), 1)
        flow3 = self.predict_flow3(concat3)
        flow3_up = crop_like(self.upsampled_flow3_to_2(flow3), out_conv2)
        out_deconv2 = crop_like(self.deconv2(concat3), out_conv2)

        concat2 = torch.cat((out_conv2, out_deconv2, flow3_up), 1)
        flow2 = self.predict_flow2(concat2)

        if self.training:
            return flow2, flow3, flow4
        else:
            return flow2


# ------------------------------------------------------------------ multiscaleloss.py


def EPE(input_flow, target_flow, sparse=False, mean=True):
    EPE_map = torch.norm(target_flow - input_flow, 2, 1)
    batch_size = EPE_map.size(0)
    if sparse:
        # invalid flow is defined with both flow coordinates to be exactly 0
        mask = (target_flow[:, 0] == 0) & (target_flow[:, 1] == 0)

        EPE_map = EPE_map[~mask]  # BREAK: masked mean / sum instead of selecting
    if mean:
        return EPE_map.mean()
    else:
        return EPE_map.sum() / batch_size


def sparse_max_pool(input, size):
    """Downsample the input by considering 0 values as invalid.

    Unfortunately, no generic interpolation mode can resize a sparse map correctly,
    the strategy here is to use max pooling for positive values and "min pooling"
    for negative values, the two results are then summed.
    This technique allows sparsity to be minized, contrary to nearest interpolation,
    which could potentially lose information for isolated data points."""

    positive = (input > 0).float()
    negative = (input < 0).float()
    output = F.adaptive_max_pool2d(input * positive, size) - F.adaptive_max_pool2d(-input * negative, size)
    return output


def multiscaleEPE(network_output, target_flow, weights=None, sparse=False):
    def one_scale(output, target, sparse):
        b, _, h, w = output.size()

        if sparse:
            target_scaled = sparse_max_pool(target, (h, w))
        else:
            target_scaled = F.interpolate(target, (h, w), mode="area")
        return EPE(output, target_scaled, sparse, mean=False)

    if type(network_output) not in [tuple, list]:
        network_output = [network_output]
    if weights is None:
        weights = [0.005, 0.01, 0.02, 0.08, 0.32]  # as in original article
    assert len(weights) == len(network_output)

    loss = 0
    for output, weight in zip(network_output, weights):  # noqa: B905
        loss += weight * one_scale(output, target_flow, sparse)
    return loss


def realEPE(output, target, sparse=False):
    b, _, h, w = target.size()
    upsampled_output = F.interpolate(output, (h, w), mode="bilinear", align_corners=False)
    return EPE(upsampled_output, target, sparse, mean=True)


# ------------------------------------------------------------------ util.py, main.py


class AverageMeter:
    """Computes and stores the average and current value"""

    def __init__(self, i=1, precision=3):
        self.meters = i
        self.precision = precision
        self.reset(self.meters)

    def reset(self, i):
        self.val = [0] * i
        self.avg = [0] * i
        self.sum = [0] * i
        self.count = 0

    def update(self, val, n=1):
        if not isinstance(val, list):
            val = [val]
        assert len(val) == self.meters
        self.count += n
        for i, v in enumerate(val):
            self.val[i] = v
            self.sum[i] += v * n
        self.avg = [l / self.count for l in self.sum]  # noqa: E741

    def __repr__(self):
        val = " ".join([f"{v:.{self.precision}f}" for v in self.val])
        avg = " ".join([f"{a:.{self.precision}f}" for a in self.avg])
        return f"{val} ({avg})"


class TrainIteration(nn.Module):
    """``train(train_loader, model, optimizer, epoch, train_writer)`` for one batch, up to the meters."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.model = FlowNetS(batchNorm=True)
        self.losses = AverageMeter()
        self.flow2_EPEs = AverageMeter()
        self.train_writer = ScalarWriter()
        self.n_iter = 0

    def forward(self, input, target):
        args, model = self.args, self.model
        model.train()

        target = target.to(device)
        input = torch.cat(input, 1).to(device)

        # compute output
        output = model(input)
        if args.sparse:
            # Since Target pooling is not very precise when sparse,
            # take the highest resolution prediction and upsample it instead of downsampling target
            h, w = target.size()[-2:]
            output = [F.interpolate(output[0], (h, w)), *output[1:]]

        loss = multiscaleEPE(output, target, weights=args.multiscale_weights, sparse=args.sparse)
        flow2_EPE = args.div_flow * realEPE(output[0], target, sparse=args.sparse)
        # record loss and EPE
        self.losses.update(loss.item(), target.size(0))  # BREAK: the meter sums tensors
        self.train_writer.add_scalar("train_loss", loss.item(), self.n_iter)  # BREAK: log the tensor
        self.flow2_EPEs.update(flow2_EPE.item(), target.size(0))  # BREAK: the meter sums tensors
        self.n_iter += 1
        return loss, flow2_EPE


def build_flownet_train_iteration():
    seeded(1717)
    args = argparse.Namespace(
        sparse=True, div_flow=20, multiscale_weights=[0.005, 0.01, 0.02], milestones=[100, 150, 200]
    )
    m = TrainIteration(args)
    img1 = torch.rand(2, 3, 32, 48)
    img2 = torch.roll(img1, shifts=(1, 2), dims=(2, 3))
    # KITTI-like sparse ground truth: flow on a subset of the pixels, exactly 0 elsewhere
    target = torch.stack([torch.full((2, 32, 48), 2.0), torch.full((2, 32, 48), 1.0)], 1) / args.div_flow
    target = target + 0.01 * torch.randn(2, 2, 32, 48)
    target = target * (torch.rand(2, 1, 32, 48) > 0.6)
    return m, ([img1, img2], target)
