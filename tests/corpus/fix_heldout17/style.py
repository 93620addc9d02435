"""Arbitrary style transfer: naoto0804/pytorch-AdaIN.

``net.py``'s ``Net`` (the frozen VGG encoder cut into ``enc_1`` .. ``enc_4`` by slicing its children,
``encode_with_intermediate``, the mirrored decoder, the content loss against the AdaIN target and the style loss on
the feature means and standard deviations), ``function.py``'s ``calc_mean_std`` / ``adaptive_instance_normalization``,
and one iteration of ``train.py`` (``adjust_learning_rate``, Adam on the decoder, the weighted losses written to the
``SummaryWriter`` with ``.item()``).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn as nn

from .helpers import ScalarWriter, seeded

device = torch.device("cpu")


def calc_mean_std(feat, eps=1e-5):
    # eps is a small value added to the variance to avoid divide-by-zero.
    size = feat.size()
    assert len(size) == 4
    N, C = size[:2]
    feat_var = feat.view(N, C, -1).var(dim=2) + eps
    feat_std = feat_var.sqrt().view(N, C, 1, 1)
    feat_mean = feat.view(N, C, -1).mean(dim=2).view(N, C, 1, 1)
    return feat_mean, feat_std


def adaptive_instance_normalization(content_feat, style_feat):
    assert content_feat.size()[:2] == style_feat.size()[:2]
    size = content_feat.size()
    style_mean, style_std = calc_mean_std(style_feat)
    content_mean, content_std = calc_mean_std(content_feat)

    normalized_feat = (content_feat - content_mean.expand(size)) / content_std.expand(size)
    return normalized_feat * style_std.expand(size) + style_mean.expand(size)


adain = adaptive_instance_normalization

decoder = nn.Sequential(
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(64, 32, (3, 3)),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(32, 16, (3, 3)),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(16, 8, (3, 3)),
    nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 3, (3, 3)),
)

vgg = nn.Sequential(
    nn.Conv2d(3, 3, (1, 1)),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(3, 8, (3, 3)),
    nn.ReLU(),  # relu1-1
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 8, (3, 3)),
    nn.ReLU(),  # relu1-2
    nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(8, 16, (3, 3)),
    nn.ReLU(),  # relu2-1
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(16, 16, (3, 3)),
    nn.ReLU(),  # relu2-2
    nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(16, 32, (3, 3)),
    nn.ReLU(),  # relu3-1
    nn.MaxPool2d((2, 2), (2, 2), (0, 0), ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)),
    nn.Conv2d(32, 64, (3, 3)),
    nn.ReLU(),  # relu4-1, this is the last layer used
)


class Net(nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        enc_layers = list(encoder.children())
        self.enc_1 = nn.Sequential(*enc_layers[:4])  # input -> relu1_1
        self.enc_2 = nn.Sequential(*enc_layers[4:11])  # relu1_1 -> relu2_1
        self.enc_3 = nn.Sequential(*enc_layers[11:18])  # relu2_1 -> relu3_1
        self.enc_4 = nn.Sequential(*enc_layers[18:22])  # relu3_1 -> relu4_1 (relu3_2 .. relu3_4 left out)
        self.decoder = decoder
        self.mse_loss = nn.MSELoss()

        # fix the encoder
        for name in ["enc_1", "enc_2", "enc_3", "enc_4"]:
            for param in getattr(self, name).parameters():
                param.requires_grad = False

    # extract relu1_1, relu2_1, relu3_1, relu4_1 from input image
    def encode_with_intermediate(self, input):
        results = [input]
        for i in range(4):
            func = getattr(self, f"enc_{i + 1:d}")
            results.append(func(results[-1]))
        return results[1:]

    # extract relu4_1 from input image
    def encode(self, input):
        for i in range(4):
            input = getattr(self, f"enc_{i + 1:d}")(input)
        return input

    def calc_content_loss(self, input, target):
        assert input.size() == target.size()
        assert target.requires_grad is False
        return self.mse_loss(input, target)

    def calc_style_loss(self, input, target):
        assert input.size() == target.size()
        assert target.requires_grad is False
        input_mean, input_std = calc_mean_std(input)
        target_mean, target_std = calc_mean_std(target)
        return self.mse_loss(input_mean, target_mean) + self.mse_loss(input_std, target_std)

    def forward(self, content, style, alpha=1.0):
        assert 0 <= alpha <= 1
        style_feats = self.encode_with_intermediate(style)
        content_feat = self.encode(content)
        t = adain(content_feat, style_feats[-1])
        t = alpha * t + (1 - alpha) * content_feat

        g_t = self.decoder(t)
        g_t_feats = self.encode_with_intermediate(g_t)

        loss_c = self.calc_content_loss(g_t_feats[-1], t)
        loss_s = self.calc_style_loss(g_t_feats[0], style_feats[0])
        for i in range(1, 4):
            loss_s += self.calc_style_loss(g_t_feats[i], style_feats[i])
        return loss_c, loss_s


class TrainIteration(nn.Module):
    """``train.py``'s loop body for iteration ``i``."""

    def __init__(self, args, vgg, decoder):
        super().__init__()
        self.args = args
        self.network = Net(vgg, decoder)
        self.network.train()
        self.optimizer = torch.optim.Adam(self.network.decoder.parameters(), lr=args.lr)
        self.writer = ScalarWriter()

    def adjust_learning_rate(self, optimizer, iteration_count):
        """Imitating the original implementation"""
        lr = self.args.lr / (1.0 + self.args.lr_decay * iteration_count)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

    def forward(self, content_images, style_images, i):
        args, optimizer, writer = self.args, self.optimizer, self.writer
        self.adjust_learning_rate(optimizer, iteration_count=i)
        content_images = content_images.to(device)
        style_images = style_images.to(device)
        loss_c, loss_s = self.network(content_images, style_images)
        loss_c = args.content_weight * loss_c
        loss_s = args.style_weight * loss_s
        loss = loss_c + loss_s

        optimizer.zero_grad()  # BREAK: set the grads to None directly
        loss.backward()  # BREAK must-not: the step needs the gradients
        optimizer.step()

        writer.add_scalar("loss_content", loss_c.item(), i + 1)  # BREAK: log the detached tensor
        writer.add_scalar("loss_style", loss_s.item(), i + 1)  # BREAK: log the detached tensor
        return loss.detach(), [p.detach().clone() for p in self.network.decoder.parameters()]


def build_adain_train_iteration():
    seeded(1713)
    args = argparse.Namespace(
        lr=1e-4, lr_decay=5e-5, max_iter=160000, batch_size=2, style_weight=10.0, content_weight=1.0
    )
    # train.py: the module-level nets, the VGG loaded from vgg_normalised.pth and cut after relu4_1
    it = TrainIteration(
        args, nn.Sequential(*list(copy.deepcopy(vgg).children())[:22]), copy.deepcopy(decoder)
    )
    content = torch.rand(2, 3, 16, 16)
    style = torch.rand(2, 3, 16, 16) * 0.5 + torch.linspace(0, 0.5, 16)[None, None, None, :]
    return it, (content, style, 41)
