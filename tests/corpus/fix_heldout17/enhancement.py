"""Low-light image enhancement: Li-Chongyi/Zero-DCE.

``model.py``'s ``enhance_net_nopool`` (seven convolutions with skip concatenations, eight light-enhancement curves
applied iteratively), ``Myloss.py``'s non-reference losses (``L_color``, ``L_spa`` with its fixed difference kernels
and ``torch.FloatTensor`` constants, ``L_exp``, ``L_TV``), and one iteration of ``lowlight_train.py`` (Adam,
``torch.nn.utils.clip_grad_norm``, the loss printed every ``display_iter`` iterations).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim

from .helpers import seeded

device = torch.device("cpu")


class enhance_net_nopool(nn.Module):
    def __init__(self):
        super().__init__()

        self.relu = nn.ReLU(inplace=True)

        number_f = 8
        self.e_conv1 = nn.Conv2d(3, number_f, 3, 1, 1, bias=True)
        self.e_conv2 = nn.Conv2d(number_f, number_f, 3, 1, 1, bias=True)
        self.e_conv3 = nn.Conv2d(number_f, number_f, 3, 1, 1, bias=True)
        self.e_conv4 = nn.Conv2d(number_f, number_f, 3, 1, 1, bias=True)
        self.e_conv5 = nn.Conv2d(number_f * 2, number_f, 3, 1, 1, bias=True)
        self.e_conv6 = nn.Conv2d(number_f * 2, number_f, 3, 1, 1, bias=True)
        self.e_conv7 = nn.Conv2d(number_f * 2, 24, 3, 1, 1, bias=True)

        self.maxpool = nn.MaxPool2d(2, stride=2, return_indices=False, ceil_mode=False)
        self.upsample = nn.UpsamplingBilinear2d(scale_factor=2)

    def forward(self, x):
        x1 = self.relu(self.e_conv1(x))
        # p1 = self.maxpool(x1)
        x2 = self.relu(self.e_conv2(x1))
        # p2 = self.maxpool(x2)
        x3 = self.relu(self.e_conv3(x2))
        # p3 = self.maxpool(x3)
        x4 = self.relu(self.e_conv4(x3))

        x5 = self.relu(self.e_conv5(torch.cat([x3, x4], 1)))
        # x5 = self.upsample(x5)
        x6 = self.relu(self.e_conv6(torch.cat([x2, x5], 1)))

        x_r = torch.tanh(self.e_conv7(torch.cat([x1, x6], 1)))
        r1, r2, r3, r4, r5, r6, r7, r8 = torch.split(x_r, 3, dim=1)

        x = x + r1 * (torch.pow(x, 2) - x)
        x = x + r2 * (torch.pow(x, 2) - x)
        x = x + r3 * (torch.pow(x, 2) - x)
        enhance_image_1 = x + r4 * (torch.pow(x, 2) - x)
        x = enhance_image_1 + r5 * (torch.pow(enhance_image_1, 2) - enhance_image_1)
        x = x + r6 * (torch.pow(x, 2) - x)
        x = x + r7 * (torch.pow(x, 2) - x)
        enhance_image = x + r8 * (torch.pow(x, 2) - x)
        r = torch.cat([r1, r2, r3, r4, r5, r6, r7, r8], 1)
        return enhance_image_1, enhance_image, r


class L_color(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        b, c, h, w = x.shape

        mean_rgb = torch.mean(x, [2, 3], keepdim=True)
        mr, mg, mb = torch.split(mean_rgb, 1, dim=1)
        Drg = torch.pow(mr - mg, 2)
        Drb = torch.pow(mr - mb, 2)
        Dgb = torch.pow(mb - mg, 2)
        k = torch.pow(torch.pow(Drg, 2) + torch.pow(Drb, 2) + torch.pow(Dgb, 2), 0.5)

        return k


class L_spa(nn.Module):
    def __init__(self):
        super().__init__()
        # print(1)kernel = torch.FloatTensor(kernel).unsqueeze(0).unsqueeze(0)
        kernel_left = (
            torch.FloatTensor([[0, 0, 0], [-1, 1, 0], [0, 0, 0]]).to(device).unsqueeze(0).unsqueeze(0)
        )
        kernel_right = (
            torch.FloatTensor([[0, 0, 0], [0, 1, -1], [0, 0, 0]]).to(device).unsqueeze(0).unsqueeze(0)
        )
        kernel_up = torch.FloatTensor([[0, -1, 0], [0, 1, 0], [0, 0, 0]]).to(device).unsqueeze(0).unsqueeze(0)
        kernel_down = (
            torch.FloatTensor([[0, 0, 0], [0, 1, 0], [0, -1, 0]]).to(device).unsqueeze(0).unsqueeze(0)
        )
        self.weight_left = nn.Parameter(data=kernel_left, requires_grad=False)
        self.weight_right = nn.Parameter(data=kernel_right, requires_grad=False)
        self.weight_up = nn.Parameter(data=kernel_up, requires_grad=False)
        self.weight_down = nn.Parameter(data=kernel_down, requires_grad=False)
        self.pool = nn.AvgPool2d(4)

    def forward(self, org, enhance):
        b, c, h, w = org.shape

        org_mean = torch.mean(org, 1, keepdim=True)
        enhance_mean = torch.mean(enhance, 1, keepdim=True)

        org_pool = self.pool(org_mean)
        enhance_pool = self.pool(enhance_mean)

        weight_diff = torch.max(  # noqa: F841
            torch.FloatTensor([1]).to(device)
            + 10000
            * torch.min(org_pool - torch.FloatTensor([0.3]).to(device), torch.FloatTensor([0]).to(device)),
            torch.FloatTensor([0.5]).to(device),
        )
        E_1 = torch.mul(  # noqa: F841
            torch.sign(enhance_pool - torch.FloatTensor([0.5]).to(device)), enhance_pool - org_pool
        )

        D_org_letf = F.conv2d(org_pool, self.weight_left, padding=1)
        D_org_right = F.conv2d(org_pool, self.weight_right, padding=1)
        D_org_up = F.conv2d(org_pool, self.weight_up, padding=1)
        D_org_down = F.conv2d(org_pool, self.weight_down, padding=1)

        D_enhance_letf = F.conv2d(enhance_pool, self.weight_left, padding=1)
        D_enhance_right = F.conv2d(enhance_pool, self.weight_right, padding=1)
        D_enhance_up = F.conv2d(enhance_pool, self.weight_up, padding=1)
        D_enhance_down = F.conv2d(enhance_pool, self.weight_down, padding=1)

        D_left = torch.pow(D_org_letf - D_enhance_letf, 2)
        D_right = torch.pow(D_org_right - D_enhance_right, 2)
        D_up = torch.pow(D_org_up - D_enhance_up, 2)
        D_down = torch.pow(D_org_down - D_enhance_down, 2)
        E = D_left + D_right + D_up + D_down
        # E = 25*(D_left + D_right + D_up +D_down)

        return E


class L_exp(nn.Module):
    def __init__(self, patch_size, mean_val):
        super().__init__()
        # print(1)
        self.pool = nn.AvgPool2d(patch_size)
        self.mean_val = mean_val

    def forward(self, x):
        b, c, h, w = x.shape
        x = torch.mean(x, 1, keepdim=True)
        mean = self.pool(x)

        d = torch.mean(torch.pow(mean - torch.FloatTensor([self.mean_val]).to(device), 2))
        return d


class L_TV(nn.Module):
    def __init__(self, TVLoss_weight=1):
        super().__init__()
        self.TVLoss_weight = TVLoss_weight

    def forward(self, x):
        batch_size = x.size()[0]
        h_x = x.size()[2]
        w_x = x.size()[3]
        count_h = (x.size()[2] - 1) * x.size()[3]
        count_w = x.size()[2] * (x.size()[3] - 1)
        h_tv = torch.pow((x[:, :, 1:, :] - x[:, :, : h_x - 1, :]), 2).sum()
        w_tv = torch.pow((x[:, :, :, 1:] - x[:, :, :, : w_x - 1]), 2).sum()
        return self.TVLoss_weight * 2 * (h_tv / count_h + w_tv / count_w) / batch_size


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


class LowlightTrain(nn.Module):
    """``lowlight_train.py``'s ``train(config)``: the net, the losses and Adam, then one iteration of the loop."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.DCE_net = enhance_net_nopool().to(device)
        self.DCE_net.apply(weights_init)
        self.L_color = L_color()
        self.L_spa = L_spa()
        self.L_exp = L_exp(16, 0.6)
        self.L_TV = L_TV()
        self.optimizer = torch.optim.Adam(
            self.DCE_net.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )

    def forward(self, img_lowlight, iteration):
        config, DCE_net, optimizer = self.config, self.DCE_net, self.optimizer
        DCE_net.train()

        img_lowlight = img_lowlight.to(device)

        enhanced_image_1, enhanced_image, A = DCE_net(img_lowlight)

        Loss_TV = 200 * self.L_TV(A)

        loss_spa = torch.mean(self.L_spa(enhanced_image, img_lowlight))

        loss_col = 5 * torch.mean(self.L_color(enhanced_image))

        loss_exp = 10 * torch.mean(self.L_exp(enhanced_image))

        # best_loss
        loss = Loss_TV + loss_spa + loss_col + loss_exp
        #

        optimizer.zero_grad()  # BREAK: set the grads to None directly
        loss.backward()  # BREAK must-not: the step needs the gradients
        torch.nn.utils.clip_grad_norm(DCE_net.parameters(), config.grad_clip_norm)  # BREAK: use the _ form
        optimizer.step()

        if ((iteration + 1) % config.display_iter) == 0:
            print("Loss at iteration", iteration + 1, ":", loss.item())
        return loss.detach(), enhanced_image.detach()


def build_zero_dce_train_iteration():
    seeded(1715)
    config = argparse.Namespace(
        lowlight_images_path="data/train_data/",
        lr=0.0001,
        weight_decay=0.0001,
        grad_clip_norm=0.1,
        num_epochs=200,
        train_batch_size=8,
        val_batch_size=4,
        num_workers=4,
        display_iter=10,
        snapshot_iter=10,
        snapshots_folder="snapshots/",
        load_pretrain=False,
    )
    m = LowlightTrain(config)
    img = torch.rand(2, 3, 32, 32) * 0.3
    return m, (img, 7)
