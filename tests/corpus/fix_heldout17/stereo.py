"""Stereo matching: xy-guo/GwcNet and JiaRenChang/PSMNet.

GwcNet's ``models/gwcnet.py`` (the feature extraction, ``build_gwc_volume`` of ``groupwise_correlation`` per
disparity, the 3-D aggregation with the training-time outputs of every stage, ``disparity_regression``),
``models/loss.py``'s ``model_loss`` over the valid-disparity mask and ``main.py``'s ``train_sample`` (Adam,
``tensor2float`` of the loss); PSMNet's ``models/basic.py`` (the concatenation cost volume
filled disparity by disparity into a ``Variable(torch.FloatTensor(...).zero_())``, ``disparityregression``) under
``main.py``'s ``test`` (images padded to a multiple of 16, the end-point error over the valid pixels, 0 when there
are none).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data
from torch import nn
from torch.autograd import Variable

from .helpers import seeded, tensor2float

# ------------------------------------------------------------------ GwcNet models/submodule.py


def convbn(in_channels, out_channels, kernel_size, stride, pad, dilation):
    return nn.Sequential(
        nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=dilation if dilation > 1 else pad,
            dilation=dilation,
            bias=False,
        ),
        nn.BatchNorm2d(out_channels),
    )


def convbn_3d(in_channels, out_channels, kernel_size, stride, pad):
    return nn.Sequential(
        nn.Conv3d(in_channels, out_channels, kernel_size=kernel_size, padding=pad, stride=stride, bias=False),
        nn.BatchNorm3d(out_channels),
    )


def disparity_regression(x, maxdisp):
    assert len(x.shape) == 4
    disp_values = torch.arange(0, maxdisp, dtype=x.dtype, device=x.device)
    disp_values = disp_values.view(1, maxdisp, 1, 1)
    return torch.sum(x * disp_values, 1, keepdim=False)


def groupwise_correlation(fea1, fea2, num_groups):
    B, C, H, W = fea1.shape
    assert C % num_groups == 0
    channels_per_group = C // num_groups
    cost = (fea1 * fea2).view([B, num_groups, channels_per_group, H, W]).mean(dim=2)
    assert cost.shape == (B, num_groups, H, W)
    return cost


def build_gwc_volume(refimg_fea, targetimg_fea, maxdisp, num_groups):
    B, C, H, W = refimg_fea.shape
    volume = refimg_fea.new_zeros([B, num_groups, maxdisp, H, W])
    for i in range(maxdisp):
        if i > 0:
            volume[:, :, i, :, i:] = groupwise_correlation(
                refimg_fea[:, :, :, i:], targetimg_fea[:, :, :, :-i], num_groups
            )
        else:
            volume[:, :, i, :, :] = groupwise_correlation(refimg_fea, targetimg_fea, num_groups)
    volume = volume.contiguous()
    return volume


class feature_extraction(nn.Module):
    def __init__(self, concat_feature=False, concat_feature_channel=12):
        super().__init__()
        self.concat_feature = concat_feature
        self.firstconv = nn.Sequential(
            convbn(3, 8, 3, 2, 1, 1), nn.ReLU(inplace=True), convbn(8, 16, 3, 2, 1, 1), nn.ReLU(inplace=True)
        )
        self.layer = nn.Sequential(convbn(16, 16, 3, 1, 1, 2), nn.ReLU(inplace=True))

    def forward(self, x):
        x = self.firstconv(x)
        l2 = self.layer(x)
        gwc_feature = torch.cat((x, l2), dim=1)
        return {"gwc_feature": gwc_feature}


class GwcNet(nn.Module):
    def __init__(self, maxdisp, use_concat_volume=False):
        super().__init__()
        self.maxdisp = maxdisp
        self.use_concat_volume = use_concat_volume

        self.num_groups = 8
        self.feature_extraction = feature_extraction(concat_feature=False)

        self.dres0 = nn.Sequential(
            convbn_3d(self.num_groups, 8, 3, 1, 1),
            nn.ReLU(inplace=True),
            convbn_3d(8, 8, 3, 1, 1),
            nn.ReLU(inplace=True),
        )
        self.dres1 = nn.Sequential(convbn_3d(8, 8, 3, 1, 1), nn.ReLU(inplace=True), convbn_3d(8, 8, 3, 1, 1))
        self.dres2 = nn.Sequential(convbn_3d(8, 8, 3, 1, 1), nn.ReLU(inplace=True))

        self.classif0 = nn.Sequential(
            convbn_3d(8, 8, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(8, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )
        self.classif1 = nn.Sequential(
            convbn_3d(8, 8, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(8, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, np.sqrt(2.0 / n))
            elif isinstance(m, nn.Conv3d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.kernel_size[2] * m.out_channels
                m.weight.data.normal_(0, np.sqrt(2.0 / n))

    def forward(self, left, right):
        features_left = self.feature_extraction(left)
        features_right = self.feature_extraction(right)

        gwc_volume = build_gwc_volume(
            features_left["gwc_feature"], features_right["gwc_feature"], self.maxdisp // 4, self.num_groups
        )
        volume = gwc_volume

        cost0 = self.dres0(volume)
        cost0 = self.dres1(cost0) + cost0

        out1 = self.dres2(cost0)

        if self.training:
            cost0 = self.classif0(cost0)
            cost1 = self.classif1(out1)

            cost0 = F.interpolate(cost0, [self.maxdisp, left.size()[2], left.size()[3]], mode="trilinear")
            cost0 = torch.squeeze(cost0, 1)
            pred0 = F.softmax(cost0, dim=1)
            pred0 = disparity_regression(pred0, self.maxdisp)

            cost1 = F.interpolate(cost1, [self.maxdisp, left.size()[2], left.size()[3]], mode="trilinear")
            cost1 = torch.squeeze(cost1, 1)
            pred1 = F.softmax(cost1, dim=1)
            pred1 = disparity_regression(pred1, self.maxdisp)
            return [pred0, pred1]

        else:
            cost1 = self.classif1(out1)
            cost1 = F.interpolate(cost1, [self.maxdisp, left.size()[2], left.size()[3]], mode="trilinear")
            cost1 = torch.squeeze(cost1, 1)
            pred1 = F.softmax(cost1, dim=1)
            pred1 = disparity_regression(pred1, self.maxdisp)
            return [pred1]


# ------------------------------------------------------------------ GwcNet models/loss.py, main.py


def model_loss(disp_ests, disp_gt, mask):
    weights = [0.5, 1.0]
    all_losses = []
    for disp_est, weight in zip(disp_ests, weights):  # noqa: B905
        all_losses.append(weight * F.smooth_l1_loss(disp_est[mask], disp_gt[mask]))  # BREAK: masked mean
    return sum(all_losses)


class GwcTrainer(nn.Module):
    """``main.py``'s model, optimizer and ``train_sample`` (``compute_metrics`` off between summaries)."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.model = GwcNet(args.maxdisp)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.lr, betas=(0.9, 0.999))

    def forward(self, sample, compute_metrics=False):
        model, optimizer, args = self.model, self.optimizer, self.args
        model.train()

        imgL, imgR, disp_gt = sample["left"], sample["right"], sample["disparity"]

        optimizer.zero_grad()  # BREAK: set the grads to None directly

        disp_ests = model(imgL, imgR)
        mask = (disp_gt < args.maxdisp) & (disp_gt > 0)
        loss = model_loss(disp_ests, disp_gt, mask)

        image_outputs = {"disp_est": disp_ests, "disp_gt": disp_gt, "imgL": imgL, "imgR": imgR}
        loss.backward()  # BREAK must-not: the step needs the gradients
        optimizer.step()

        return tensor2float(loss), image_outputs["disp_est"][-1].detach()


def stereo_sample(batch, height, width, maxdisp, seed):
    """A SceneFlow-like sample: the right view is the left one shifted by a constant disparity, some pixels invalid."""
    g = torch.Generator().manual_seed(seed)
    left = torch.randn(batch, 3, height, width, generator=g)
    right = torch.roll(left, shifts=-3, dims=3) + 0.05 * torch.randn(batch, 3, height, width, generator=g)
    disparity = 3.0 + torch.rand(batch, height, width, generator=g) * 2
    disparity[:, :, :3] = 0.0  # occluded border: no ground truth
    disparity[:, 0, 5] = maxdisp + 4.0  # beyond the search range
    return {"left": left, "right": right, "disparity": disparity}


def build_gwcnet_train():
    seeded(1706)
    args = argparse.Namespace(maxdisp=16, lr=0.001, lrepochs="10,12,14,16:2", summary_freq=20)
    return GwcTrainer(args), (stereo_sample(2, 16, 32, args.maxdisp, 0),)


# ------------------------------------------------------------------ PSMNet models/basic.py, main.py


class disparityregression(nn.Module):
    def __init__(self, maxdisp):
        super().__init__()
        self.disp = torch.Tensor(np.reshape(np.array(range(maxdisp)), [1, maxdisp, 1, 1]))

    def forward(self, x):
        out = torch.sum(x * self.disp.data, 1, keepdim=True)
        return out


class PSMNet(nn.Module):
    def __init__(self, maxdisp):
        super().__init__()
        self.maxdisp = maxdisp
        self.feature_extraction = nn.Sequential(
            convbn(3, 8, 3, 2, 1, 1), nn.ReLU(inplace=True), convbn(8, 8, 3, 2, 1, 1), nn.ReLU(inplace=True)
        )

        self.dres0 = nn.Sequential(convbn_3d(16, 8, 3, 1, 1), nn.ReLU(inplace=True))
        self.dres1 = nn.Sequential(convbn_3d(8, 8, 3, 1, 1), nn.ReLU(inplace=True), convbn_3d(8, 8, 3, 1, 1))
        self.classify = nn.Sequential(
            convbn_3d(8, 8, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(8, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )

    def forward(self, left, right):
        refimg_fea = self.feature_extraction(left)
        targetimg_fea = self.feature_extraction(right)

        # matching
        cost = Variable(
            torch.FloatTensor(
                refimg_fea.size()[0],
                refimg_fea.size()[1] * 2,
                self.maxdisp // 4,
                refimg_fea.size()[2],
                refimg_fea.size()[3],
            ).zero_()
        )

        for i in range(self.maxdisp // 4):
            if i > 0:
                cost[:, : refimg_fea.size()[1], i, :, i:] = refimg_fea[:, :, :, i:]
                cost[:, refimg_fea.size()[1] :, i, :, i:] = targetimg_fea[:, :, :, :-i]
            else:
                cost[:, : refimg_fea.size()[1], i, :, :] = refimg_fea
                cost[:, refimg_fea.size()[1] :, i, :, :] = targetimg_fea
        cost = cost.contiguous()

        cost0 = self.dres0(cost)
        cost0 = self.dres1(cost0) + cost0

        cost = self.classify(cost0)
        cost = F.interpolate(cost, [self.maxdisp, left.size()[2], left.size()[3]], mode="trilinear")
        cost = torch.squeeze(cost, 1)
        pred = F.softmax(cost, dim=1)
        pred = disparityregression(self.maxdisp)(pred)

        return pred


class PSMNetTest(nn.Module):
    """``main.py``'s ``test(imgL, imgR, disp_true)`` with the SceneFlow checkpoint loaded."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.model = PSMNet(args.maxdisp)

    def forward(self, imgL, imgR, disp_true):
        model = self.model
        model.eval()

        # ---------
        mask = disp_true < 192
        # ----

        if imgL.shape[2] % 16 != 0:
            times = imgL.shape[2] // 16
            top_pad = (times + 1) * 16 - imgL.shape[2]
        else:
            top_pad = 0

        if imgL.shape[3] % 16 != 0:
            times = imgL.shape[3] // 16
            right_pad = (times + 1) * 16 - imgL.shape[3]
        else:
            right_pad = 0

        imgL = F.pad(imgL, (0, right_pad, top_pad, 0))
        imgR = F.pad(imgR, (0, right_pad, top_pad, 0))

        with torch.no_grad():
            output3 = model(imgL, imgR)
            output3 = torch.squeeze(output3, 1)

        if top_pad != 0:
            img = output3[:, top_pad:, :]
        else:
            img = output3

        if len(disp_true[mask]) == 0:  # BREAK: count the mask; a where for none
            loss = 0
        else:
            loss = F.l1_loss(img[mask], disp_true[mask])  # BREAK: masked mean over the valid pixels

        return loss.data.cpu()


def build_psmnet_test():
    seeded(1707)
    args = argparse.Namespace(maxdisp=16, model="basic", loadmodel="./trained/pretrained_sceneflow.tar")
    m = PSMNetTest(args)
    s = stereo_sample(2, 12, 32, args.maxdisp, 1)
    s["disparity"][1, 2:4, 6:9] = 200.0  # beyond the 192 px SceneFlow range
    return m, (s["left"], s["right"], s["disparity"])
