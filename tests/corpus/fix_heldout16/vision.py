"""Image classification: facebookresearch/ConvNeXt's ``train_one_epoch`` iteration (per-iteration learning-rate and
weight-decay schedules read from numpy arrays, ``loss.item()`` checked with ``math.isfinite``, the class accuracy,
``utils.MetricLogger`` and ``utils.TensorboardLogger`` fed with the loss and the accuracy) on ``ConvNeXt`` (depthwise
7x7 blocks, channels-first ``LayerNorm``, layer scale, timm's ``DropPath``)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import MetricLogger, TensorboardLogger, seeded


def drop_path(x, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # work with diff dim tensors, not just 2D ConvNets
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    if keep_prob > 0.0 and scale_by_keep:
        random_tensor.div_(keep_prob)
    return x * random_tensor


class DropPath(nn.Module):
    def __init__(self, drop_prob: float = 0.0, scale_by_keep: bool = True):
        super().__init__()
        self.drop_prob = drop_prob
        self.scale_by_keep = scale_by_keep

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)


class LayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = eps
        self.data_format = data_format
        if self.data_format not in ["channels_last", "channels_first"]:
            raise NotImplementedError
        self.normalized_shape = (normalized_shape,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        elif self.data_format == "channels_first":
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.eps)
            x = self.weight[:, None, None] * x + self.bias[:, None, None]
            return x


class Block(nn.Module):
    def __init__(self, dim, drop_path=0.0, layer_scale_init_value=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)  # depthwise conv
        self.norm = LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)  # pointwise/1x1 convs, implemented with linear layers
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones((dim)), requires_grad=True) if layer_scale_init_value > 0 else None  # noqa: UP034
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x):
        input = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
        x = self.norm(x)
        x = self.pwconv1(x)
        x = self.act(x)
        x = self.pwconv2(x)
        if self.gamma is not None:
            x = self.gamma * x
        x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)

        x = input + self.drop_path(x)
        return x


class ConvNeXt(nn.Module):
    def __init__(self, in_chans=3, num_classes=10, depths=(1, 1), dims=(8, 16), drop_path_rate=0.1, layer_scale_init_value=1e-6, head_init_scale=1.0):
        super().__init__()

        self.downsample_layers = nn.ModuleList()  # stem and 3 intermediate downsampling conv layers
        stem = nn.Sequential(nn.Conv2d(in_chans, dims[0], kernel_size=4, stride=4), LayerNorm(dims[0], eps=1e-6, data_format="channels_first"))
        self.downsample_layers.append(stem)
        for i in range(len(dims) - 1):
            downsample_layer = nn.Sequential(LayerNorm(dims[i], eps=1e-6, data_format="channels_first"), nn.Conv2d(dims[i], dims[i + 1], kernel_size=2, stride=2))
            self.downsample_layers.append(downsample_layer)

        self.stages = nn.ModuleList()  # 4 feature resolution stages, each consisting of multiple residual blocks
        dp_rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        cur = 0
        for i in range(len(dims)):
            stage = nn.Sequential(*[Block(dim=dims[i], drop_path=dp_rates[cur + j], layer_scale_init_value=layer_scale_init_value) for j in range(depths[i])])
            self.stages.append(stage)
            cur += depths[i]

        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)  # final norm layer
        self.head = nn.Linear(dims[-1], num_classes)
        self.head.weight.data.mul_(head_init_scale)
        self.head.bias.data.mul_(head_init_scale)

    def forward_features(self, x):
        for i in range(len(self.stages)):
            x = self.downsample_layers[i](x)
            x = self.stages[i](x)
        return self.norm(x.mean([-2, -1]))  # global average pooling, (N, C, H, W) -> (N, C)

    def forward(self, x):
        x = self.forward_features(x)
        x = self.head(x)
        return x


class ScalarWriter:
    def __init__(self):
        self.scalars = []

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))


class TrainOneEpochIteration(nn.Module):
    """The body of ``train_one_epoch``'s loop for one iteration (no mixup, full precision), up to ``loss.backward()``,
    which the check's backward of the returned loss stands in for, and the logging that follows it."""

    def __init__(self):
        super().__init__()
        self.model = ConvNeXt()
        self.criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=4e-3, weight_decay=0.05)
        for group in self.optimizer.param_groups:
            group["lr_scale"] = 1.0
        self.metric_logger = MetricLogger(delimiter="  ")
        self.log_writer = TensorboardLogger(ScalarWriter())
        self.lr_schedule_values = np.linspace(4e-3, 1e-4, 20)
        self.wd_schedule_values = np.linspace(0.05, 0.2, 20)
        self.update_freq = 1
        self.start_steps = 0

    def forward(self, samples, targets, data_iter_step):
        step = data_iter_step // self.update_freq
        it = self.start_steps + step  # global training iteration
        # Update LR & WD for the first acc
        if self.lr_schedule_values is not None or self.wd_schedule_values is not None and data_iter_step % self.update_freq == 0:
            for i, param_group in enumerate(self.optimizer.param_groups):  # noqa: B007
                if self.lr_schedule_values is not None:
                    param_group["lr"] = self.lr_schedule_values[it] * param_group["lr_scale"]
                if self.wd_schedule_values is not None and param_group["weight_decay"] > 0:
                    param_group["weight_decay"] = self.wd_schedule_values[it]

        output = self.model(samples)
        loss = self.criterion(output, targets)

        loss_value = loss.item()  # BREAK must-not: training stops on a non-finite loss (math.isfinite, an assert): the value is needed on the host

        if not math.isfinite(loss_value):  # this could trigger if using AMP
            print(f"Loss is {loss_value}, stopping training")
            assert math.isfinite(loss_value)

        loss /= self.update_freq

        class_acc = (output.max(-1)[-1] == targets).float().mean()
        self.metric_logger.update(loss=loss_value)
        self.metric_logger.update(class_acc=class_acc)
        self.log_writer.update(loss=loss_value, head="loss")
        self.log_writer.update(class_acc=class_acc, head="loss")
        self.log_writer.set_step()
        return loss, class_acc


def build_convnext_train_step():
    seeded(1618)
    it = TrainOneEpochIteration().train()
    samples = torch.randn(4, 3, 16, 16)
    targets = torch.randint(0, 10, (4,))
    return it, (samples, targets, 3)
