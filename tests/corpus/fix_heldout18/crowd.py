"""Crowd counting: ZhihengCV/Bayesian-Crowd-Counting.

``models/vgg.py``'s ``VGG`` regressor (a VGG-style ``features`` stack, the bilinear upsampling, ``reg_layer`` and
``torch.abs`` density), ``losses/post_prob.py``'s ``Post_Prob`` (squared distances from every annotated head to the
density cells' centres, split back per image by ``num_points_per_image``, the background distance appended, the
softmax over points) and ``losses/bay_loss.py``'s ``Bay_Loss`` (images without annotations counted against zero),
under the loss half of ``utils/regression_trainer.py``'s ``train_eopch`` iteration: the ground-truth counts in numpy,
the predicted counts moved to numpy and the loss / MSE / MAE meters.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Module

from .helpers import AverageMeter, seeded

# ------------------------------------------------------------------ models/vgg.py (reduced)


class VGG(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.features = features
        self.reg_layer = nn.Sequential(
            nn.Conv2d(16, 8, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(8, 4, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(4, 1, 1),
        )

    def forward(self, x):
        x = self.features(x)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        x = self.reg_layer(x)
        return torch.abs(x)


def make_layers(cfg, batch_norm=False):
    layers = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
        else:
            conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = v
    return nn.Sequential(*layers)


# ------------------------------------------------------------------ losses/post_prob.py


class Post_Prob(Module):
    def __init__(self, sigma, c_size, stride, background_ratio, use_background, device):
        super().__init__()
        assert c_size % stride == 0

        self.sigma = sigma
        self.bg_ratio = background_ratio
        self.device = device
        # coordinate is same to image space, set to constant since crop size is same
        self.cood = torch.arange(0, c_size, step=stride, dtype=torch.float32, device=device) + stride / 2
        self.cood.unsqueeze_(0)
        self.softmax = torch.nn.Softmax(dim=0)
        self.use_bg = use_background

    def forward(self, points, st_sizes):
        num_points_per_image = [len(points_per_image) for points_per_image in points]
        all_points = torch.cat(points, dim=0)

        if len(all_points) > 0:
            x = all_points[:, 0].unsqueeze_(1)
            y = all_points[:, 1].unsqueeze_(1)
            x_dis = -2 * torch.matmul(x, self.cood) + x * x + self.cood * self.cood
            y_dis = -2 * torch.matmul(y, self.cood) + y * y + self.cood * self.cood
            y_dis.unsqueeze_(2)
            x_dis.unsqueeze_(1)
            dis = y_dis + x_dis
            dis = dis.view((dis.size(0), -1))

            dis_list = torch.split(dis, num_points_per_image)
            prob_list = []
            for dis, st_size in zip(dis_list, st_sizes):  # noqa: B905
                if len(dis) > 0:
                    if self.use_bg:
                        min_dis = torch.clamp(torch.min(dis, dim=0, keepdim=True)[0], min=0.0)
                        d = st_size * self.bg_ratio
                        bg_dis = (d - torch.sqrt(min_dis)) ** 2
                        dis = torch.cat([dis, bg_dis], 0)  # concatenate background distance to the last
                    dis = -dis / (2.0 * self.sigma**2)
                    prob = self.softmax(dis)
                else:
                    prob = None
                prob_list.append(prob)
        else:
            prob_list = []
            for _ in range(len(points)):
                prob_list.append(None)
        return prob_list


# ------------------------------------------------------------------ losses/bay_loss.py


class Bay_Loss(Module):
    def __init__(self, use_background, device):
        super().__init__()
        self.device = device
        self.use_bg = use_background

    def forward(self, prob_list, target_list, pre_density):
        loss = 0
        for idx, prob in enumerate(prob_list):  # iterative through each sample
            if prob is None:  # image contains no annotation points
                pre_count = torch.sum(pre_density[idx])
                target = torch.zeros((1,), dtype=torch.float32, device=self.device)
            else:
                N = len(prob)
                if self.use_bg:
                    target = torch.zeros((N,), dtype=torch.float32, device=self.device)
                    target[:-1] = target_list[idx]
                else:
                    target = target_list[idx]
                pre_count = torch.sum(pre_density[idx].view((1, -1)) * prob, dim=1)  # flatten into vector

            loss += torch.sum(torch.abs(target - pre_count))
        loss = loss / len(prob_list)
        return loss


# ------------------------------------------------------------------ utils/regression_trainer.py


class RegTrainerStep(nn.Module):
    """The loss half of one ``train_eopch`` iteration."""

    def __init__(self, args):
        super().__init__()
        self.device = torch.device("cpu")
        self.model = VGG(make_layers([8, "M", 16, "M", 16]))
        self.post_prob = Post_Prob(
            args.sigma,
            args.crop_size,
            args.downsample_ratio,
            args.background_ratio,
            args.use_background,
            self.device,
        )
        self.criterion = Bay_Loss(args.use_background, self.device)
        self.epoch_loss = AverageMeter()
        self.epoch_mae = AverageMeter()
        self.epoch_mse = AverageMeter()

    def forward(self, inputs, points, targets, st_sizes):
        self.model.train()  # Set model to training mode
        inputs = inputs.to(self.device)
        st_sizes = st_sizes.to(self.device)
        gd_count = np.array([len(p) for p in points], dtype=np.float32)
        points = [p.to(self.device) for p in points]
        targets = [t.to(self.device) for t in targets]

        with torch.set_grad_enabled(True):
            outputs = self.model(inputs)
            prob_list = self.post_prob(points, st_sizes)
            loss = self.criterion(prob_list, targets, outputs)

            N = inputs.size(0)
            pre_count = torch.sum(outputs.view(N, -1), dim=1).detach().cpu().numpy()
            res = pre_count - gd_count
            self.epoch_loss.update(loss.item(), N)  # BREAK: the meter can sum tensors
            self.epoch_mse.update(np.mean(res * res), N)
            self.epoch_mae.update(np.mean(abs(res)), N)

        return loss, pre_count


def build_bayes_crowd_step():
    seeded(1809)

    class Args:
        sigma = 8.0
        crop_size = 32
        downsample_ratio = 2
        background_ratio = 0.15
        use_background = True

    m = RegTrainerStep(Args)
    inputs = torch.randn(3, 3, 32, 32)
    points = [torch.rand(5, 2) * 32, torch.zeros(0, 2), torch.rand(3, 2) * 32]
    targets = [torch.ones(5), torch.ones(0), torch.ones(3)]
    st_sizes = torch.tensor([32.0, 32.0, 32.0])
    return m, (inputs, points, targets, st_sizes)
