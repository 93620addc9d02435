"""Scene-text detection: clovaai/CRAFT-pytorch's ``CRAFT`` trained as backtime92/CRAFT-Reimplementation does.

``craft.py``'s ``CRAFT`` (a VGG16-BN-like trunk reduced to a few stages, the ``double_conv`` U-Net upsampling, the
region / affinity score head permuted to channels-last) and the reimplementation's ``mseloss.py`` ``Maploss``
(per-image online hard negative mining in ``single_image_loss``: the positive pixels' mean, then the mean of all the
negatives or of the top ``3 * positive_pixel`` of them, or of the top 500 pixels of an image without text), under the
loss half of one iteration of ``trainic15data.py``'s loop: the synthetic and real batches concatenated, the score
maps split, the criterion, and ``loss_value += loss.item()``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import seeded

# ------------------------------------------------------------------ basenet/vgg16_bn.py (reduced), craft.py


def init_weights(modules):
    for m in modules:
        if isinstance(m, nn.Conv2d):
            nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.zero_()
        elif isinstance(m, nn.BatchNorm2d):
            m.weight.data.fill_(1)
            m.bias.data.zero_()
        elif isinstance(m, nn.Linear):
            m.weight.data.normal_(0, 0.01)
            m.bias.data.zero_()


class vgg16_bn(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()

        def stage(cin, cout, pool):
            layers = [nn.MaxPool2d(kernel_size=2, stride=2)] if pool else []
            layers += [
                nn.Conv2d(cin, cout, kernel_size=3, padding=1),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
            ]
            return nn.Sequential(*layers)

        self.slice1 = stage(3, width, pool=True)
        self.slice2 = stage(width, 2 * width, pool=True)
        self.slice3 = stage(2 * width, 4 * width, pool=True)
        self.slice4 = stage(4 * width, 4 * width, pool=True)
        self.slice5 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1),
            nn.Conv2d(4 * width, 4 * width, kernel_size=3, padding=6, dilation=6),
            nn.Conv2d(4 * width, 4 * width, kernel_size=1),
        )
        init_weights(self.modules())

    def forward(self, X):
        h = self.slice1(X)
        h_relu2_2 = h
        h = self.slice2(h)
        h_relu3_2 = h
        h = self.slice3(h)
        h_relu4_3 = h
        h = self.slice4(h)
        h_relu5_3 = h
        h = self.slice5(h)
        h_fc7 = h
        return h_fc7, h_relu5_3, h_relu4_3, h_relu3_2, h_relu2_2


class double_conv(nn.Module):
    def __init__(self, in_ch, mid_ch, out_ch):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch + mid_ch, mid_ch, kernel_size=1),
            nn.BatchNorm2d(mid_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_ch, out_ch, kernel_size=3, padding=1),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        x = self.conv(x)
        return x


class CRAFT(nn.Module):
    def __init__(self, width=8):
        super().__init__()

        """ Base network """
        self.basenet = vgg16_bn(width)

        """ U network """
        self.upconv1 = double_conv(4 * width, 4 * width, 2 * width)
        self.upconv2 = double_conv(4 * width, 2 * width, width)
        self.upconv3 = double_conv(2 * width, width, width)
        self.upconv4 = double_conv(width, width, width)

        num_class = 2
        self.conv_cls = nn.Sequential(
            nn.Conv2d(width, width, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width // 2, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(width // 2, num_class, kernel_size=1),
        )

        init_weights(self.upconv1.modules())
        init_weights(self.upconv2.modules())
        init_weights(self.upconv3.modules())
        init_weights(self.upconv4.modules())
        init_weights(self.conv_cls.modules())

    def forward(self, x):
        """Base network"""
        sources = self.basenet(x)

        """ U network """
        y = torch.cat([sources[0], sources[1]], dim=1)
        y = self.upconv1(y)

        y = F.interpolate(y, size=sources[2].size()[2:], mode="bilinear", align_corners=False)
        y = torch.cat([y, sources[2]], dim=1)
        y = self.upconv2(y)

        y = F.interpolate(y, size=sources[3].size()[2:], mode="bilinear", align_corners=False)
        y = torch.cat([y, sources[3]], dim=1)
        y = self.upconv3(y)

        y = F.interpolate(y, size=sources[4].size()[2:], mode="bilinear", align_corners=False)
        y = torch.cat([y, sources[4]], dim=1)
        feature = self.upconv4(y)

        y = self.conv_cls(feature)

        return y.permute(0, 2, 3, 1), feature


# ------------------------------------------------------------------ mseloss.py


class Maploss(nn.Module):
    def __init__(self, use_gpu=True):
        super().__init__()

    def single_image_loss(self, pre_loss, loss_label):
        batch_size = pre_loss.shape[0]
        sum_loss = torch.mean(pre_loss.view(-1)) * 0
        pre_loss = pre_loss.view(batch_size, -1)
        loss_label = loss_label.view(batch_size, -1)
        for i in range(batch_size):
            average_number = 0
            positive_pixel = len(pre_loss[i][(loss_label[i] >= 0.1)])  # BREAK: masked counts, all at once
            average_number += positive_pixel
            if positive_pixel != 0:
                posi_loss = torch.mean(pre_loss[i][(loss_label[i] >= 0.1)])
                sum_loss += posi_loss
                if len(pre_loss[i][(loss_label[i] < 0.1)]) < 3 * positive_pixel:
                    nega_loss = torch.mean(pre_loss[i][(loss_label[i] < 0.1)])
                    average_number += len(pre_loss[i][(loss_label[i] < 0.1)])
                else:
                    nega_loss = torch.mean(
                        torch.topk(pre_loss[i][(loss_label[i] < 0.1)], 3 * positive_pixel)[0]
                    )
                    average_number += 3 * positive_pixel
                sum_loss += nega_loss
            else:
                nega_loss = torch.mean(torch.topk(pre_loss[i], 500)[0])
                average_number += 500
                sum_loss += nega_loss
            # sum_loss += loss/average_number

        return sum_loss

    def forward(self, gh_label, gah_label, p_gh, p_gah, mask):
        loss_fn = torch.nn.MSELoss(reduction="none")

        assert p_gh.size() == gh_label.size() and p_gah.size() == gah_label.size()
        loss1 = loss_fn(p_gh, gh_label)
        loss2 = loss_fn(p_gah, gah_label)
        loss_g = torch.mul(loss1, mask)
        loss_a = torch.mul(loss2, mask)

        char_loss = self.single_image_loss(loss_g, gh_label)
        affi_loss = self.single_image_loss(loss_a, gah_label)
        return char_loss / loss_g.shape[0] + affi_loss / loss_a.shape[0]


# ------------------------------------------------------------------ trainic15data.py


class TrainIteration(nn.Module):
    """The loss half of one ``for index, (real_images, ...) in enumerate(real_data_loader)`` iteration."""

    def __init__(self):
        super().__init__()
        self.net = CRAFT(width=8)
        self.criterion = Maploss()
        self.loss_value = 0

    def forward(self, syn_batch, real_batch):
        real_images, real_gh_label, real_gah_label, real_mask, _ = real_batch
        syn_images, syn_gh_label, syn_gah_label, syn_mask, __ = syn_batch
        self.net.train()
        images = torch.cat((syn_images, real_images), 0)
        gh_label = torch.cat((syn_gh_label, real_gh_label), 0)
        gah_label = torch.cat((syn_gah_label, real_gah_label), 0)
        mask = torch.cat((syn_mask, real_mask), 0)

        images = images.type(torch.FloatTensor)
        gh_label = gh_label.type(torch.FloatTensor)
        gah_label = gah_label.type(torch.FloatTensor)
        mask = mask.type(torch.FloatTensor)

        out, _ = self.net(images)

        out1 = out[:, :, :, 0]
        out2 = out[:, :, :, 1]
        loss = self.criterion(gh_label, gah_label, out1, out2, mask)

        self.loss_value += loss.item()  # BREAK: the running loss can stay a tensor
        return loss, out


def gaussian_maps(n, size, boxes):
    """Region / affinity score maps with a Gaussian heat per character box (``GaussianTransformer`` in spirit)."""
    ys = torch.arange(size, dtype=torch.float32)[:, None]
    xs = torch.arange(size, dtype=torch.float32)[None, :]
    region = torch.zeros(n, size, size)
    affinity = torch.zeros(n, size, size)
    for img, (cy, cx, count) in boxes.items():
        for k in range(count):
            x0 = cx + 6 * k
            region[img] = torch.maximum(region[img], torch.exp(-((ys - cy) ** 2 + (xs - x0) ** 2) / 4.0))
            if k + 1 < count:
                x1 = x0 + 3
                affinity[img] = torch.maximum(
                    affinity[img], torch.exp(-((ys - cy) ** 2 + (xs - x1) ** 2) / 3.0)
                )
    return region, affinity


def build_craft_train_iteration():
    seeded(1817)
    m = TrainIteration()
    size = 48
    # the score maps are at half resolution (the trunk's first pooling), as the data loader builds them
    syn_region, syn_affinity = gaussian_maps(2, size // 2, {0: (4, 3, 2), 1: (10, 2, 2)})
    real_region, real_affinity = gaussian_maps(1, size // 2, {})
    syn = (torch.rand(2, 3, size, size), syn_region, syn_affinity, torch.ones(2, size // 2, size // 2), None)
    real_mask = torch.ones(1, size // 2, size // 2)
    real_mask[:, :4, :4] = 0
    real = (torch.rand(1, 3, size, size), real_region, real_affinity, real_mask, None)
    return m, (syn, real)
