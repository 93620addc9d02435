"""Medical imaging: Project-MONAI/MONAI's segmentation training and validation step (the spleen / BraTS tutorial
shape): a small U-Net, ``DiceCELoss(to_onehot_y=True, softmax=True, include_background=False, weight=...)`` whose
``DiceLoss`` reduces over ``torch.arange(2, len(input.shape)).tolist()`` and checks the class weights with
``self.class_weight.min() < 0``, then ``decollate_batch`` with the ``AsDiscrete`` post transforms and ``DiceMetric``
(``compute_dice`` with ``ignore_empty``, the cumulative buffer, ``do_metric_reduction``)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ monai/networks/utils.py, monai/losses/dice.py


def one_hot(labels, num_classes, dtype=torch.float, dim=1):
    """For every value v in `labels`, the value in the output will be either 1 or 0 (a channel per class)."""
    # if `dim` is bigger, add singleton dim at the end
    if labels.ndim < dim + 1:
        shape = list(labels.shape) + [1] * (dim + 1 - len(labels.shape))
        labels = torch.reshape(labels, shape)

    sh = list(labels.shape)

    if sh[dim] != 1:
        raise AssertionError("labels should have a channel with length equal to one.")

    sh[dim] = num_classes

    o = torch.zeros(size=sh, dtype=dtype, device=labels.device)
    labels = o.scatter_(dim=dim, index=labels.long(), value=1)

    return labels


class DiceLoss(nn.Module):
    def __init__(self, include_background=True, to_onehot_y=False, sigmoid=False, softmax=False, squared_pred=False,
                 jaccard=False, reduction="mean", smooth_nr=1e-5, smooth_dr=1e-5, batch=False, weight=None):
        super().__init__()
        self.include_background = include_background
        self.to_onehot_y = to_onehot_y
        self.sigmoid = sigmoid
        self.softmax = softmax
        self.other_act = None
        self.squared_pred = squared_pred
        self.jaccard = jaccard
        self.reduction = reduction
        self.smooth_nr = float(smooth_nr)
        self.smooth_dr = float(smooth_dr)
        self.batch = batch
        weight = torch.as_tensor(weight) if weight is not None else None
        self.register_buffer("class_weight", weight)
        self.class_weight: None | torch.Tensor

    def forward(self, input, target):
        if self.sigmoid:
            input = torch.sigmoid(input)

        n_pred_ch = input.shape[1]
        if self.softmax:
            if n_pred_ch == 1:
                warnings.warn("single channel prediction, `softmax=True` ignored.", stacklevel=2)
            else:
                input = torch.softmax(input, 1)

        if self.other_act is not None:
            input = self.other_act(input)

        if self.to_onehot_y:
            if n_pred_ch == 1:
                warnings.warn("single channel prediction, `to_onehot_y=True` ignored.", stacklevel=2)
            else:
                target = one_hot(target, num_classes=n_pred_ch)

        if not self.include_background:
            if n_pred_ch == 1:
                warnings.warn("single channel prediction, `include_background=False` ignored.", stacklevel=2)
            else:
                # if skipping background, removing first channel
                target = target[:, 1:]
                input = input[:, 1:]

        if target.shape != input.shape:
            raise AssertionError(f"ground truth has different shape ({target.shape}) from input ({input.shape})")

        # reducing only spatial dimensions (not batch nor channels)
        reduce_axis: list[int] = torch.arange(2, len(input.shape)).tolist()  # BREAK: the axes are known from the rank: list(range(2, len(input.shape)))
        if self.batch:
            # reducing spatial dimensions and batch
            reduce_axis = [0] + reduce_axis

        intersection = torch.sum(target * input, dim=reduce_axis)

        if self.squared_pred:
            ground_o = torch.sum(target**2, dim=reduce_axis)
            pred_o = torch.sum(input**2, dim=reduce_axis)
        else:
            ground_o = torch.sum(target, dim=reduce_axis)
            pred_o = torch.sum(input, dim=reduce_axis)

        denominator = ground_o + pred_o

        if self.jaccard:
            denominator = 2.0 * (denominator - intersection)

        f: torch.Tensor = 1.0 - (2.0 * intersection + self.smooth_nr) / (denominator + self.smooth_dr)

        num_of_classes = target.shape[1]
        if self.class_weight is not None and num_of_classes != 1:
            # make sure the lengths of weights are equal to the number of classes
            if self.class_weight.ndim == 0:
                self.class_weight = torch.as_tensor([self.class_weight] * num_of_classes)
            else:
                if self.class_weight.shape[0] != num_of_classes:
                    raise ValueError("the length of the `weight` sequence should be the same as the number of classes.")
            if self.class_weight.min() < 0:  # BREAK: the weights are fixed at construction: validate them once in __init__ (the same ValueError) instead of on every call
                raise ValueError("the value/values of the `weight` should be no less than 0.")
            # apply class_weight to loss
            f = f * self.class_weight.to(f)

        if self.reduction == "mean":
            f = torch.mean(f)  # the batch and channel average
        elif self.reduction == "sum":
            f = torch.sum(f)  # sum over the batch and channel dims
        return f


class DiceCELoss(nn.Module):
    def __init__(self, include_background=True, to_onehot_y=False, softmax=False, weight=None, lambda_dice=1.0, lambda_ce=1.0):
        super().__init__()
        self.dice = DiceLoss(include_background=include_background, to_onehot_y=to_onehot_y, softmax=softmax, weight=weight)
        self.cross_entropy = nn.CrossEntropyLoss(weight=None if weight is None else torch.cat([torch.ones(1), torch.as_tensor(weight)]))
        self.lambda_dice = lambda_dice
        self.lambda_ce = lambda_ce

    def ce(self, input, target):
        """Compute CrossEntropy loss for the input logits and target (the channel dim of a one-channel target dropped)."""
        n_pred_ch, n_target_ch = input.shape[1], target.shape[1]
        if n_pred_ch != n_target_ch and n_target_ch == 1:
            target = torch.squeeze(target, dim=1)
            target = target.long()
        elif not torch.is_floating_point(target):
            target = target.to(dtype=input.dtype)
        return self.cross_entropy(input, target)

    def forward(self, input, target):
        if input.dim() != target.dim():
            raise ValueError("the number of dimensions for input and target should be the same")
        dice_loss = self.dice(input, target)
        ce_loss = self.ce(input, target)
        total_loss = self.lambda_dice * dice_loss + self.lambda_ce * ce_loss
        return total_loss


# ------------------------------------------------------------------ monai/metrics/meandice.py, utils.py, transforms


def ignore_background(y_pred, y):
    y = y[:, 1:] if y.shape[1] > 1 else y
    y_pred = y_pred[:, 1:] if y_pred.shape[1] > 1 else y_pred
    return y_pred, y


def compute_dice(y_pred, y, include_background=True, ignore_empty=True):
    if not include_background:
        y_pred, y = ignore_background(y_pred=y_pred, y=y)

    if y.shape != y_pred.shape:
        raise ValueError(f"y_pred and y should have same shapes, got {y_pred.shape} and {y.shape}.")

    # reducing only spatial dimensions (not batch nor channels)
    n_len = len(y_pred.shape)
    reduce_axis = list(range(2, n_len))
    intersection = torch.sum(y * y_pred, dim=reduce_axis)

    y_o = torch.sum(y, reduce_axis)
    y_pred_o = torch.sum(y_pred, dim=reduce_axis)
    denominator = y_o + y_pred_o

    if ignore_empty:
        return torch.where(y_o > 0, (2.0 * intersection) / denominator, torch.tensor(float("nan"), device=y_o.device))
    return torch.where(denominator > 0, (2.0 * intersection) / denominator, torch.tensor(1.0, device=y_o.device))


def do_metric_reduction(f, reduction="mean"):
    # some elements might be Nan (if ground truth y was missing (zeros))
    # we need to account for it
    nans = torch.isnan(f)
    not_nans = (~nans).float()

    t_zero = torch.zeros(1, device=f.device, dtype=f.dtype)
    if reduction == "none":
        return f, not_nans

    f[nans] = 0
    if reduction == "mean":
        # 2 steps, first, mean by channel (accounting for nans), then by batch
        not_nans = not_nans.sum(dim=1)
        f = torch.where(not_nans > 0, f.sum(dim=1) / not_nans, t_zero)  # channel average

        not_nans = (not_nans > 0).float().sum(dim=0)
        f = torch.where(not_nans > 0, f.sum(dim=0) / not_nans, t_zero)  # batch average
    else:
        raise ValueError(f"Unsupported reduction: {reduction}")
    return f, not_nans


class DiceMetric:
    """``CumulativeIterationMetric``: per-iteration dice appended to a buffer, reduced by ``aggregate``."""

    def __init__(self, include_background=True, reduction="mean", get_not_nans=False, ignore_empty=True):
        self.include_background = include_background
        self.reduction = reduction
        self.get_not_nans = get_not_nans
        self.ignore_empty = ignore_empty
        self._buffers = []

    def __call__(self, y_pred, y):
        if isinstance(y_pred, (list, tuple)):
            y_pred = torch.stack(y_pred)
            y = torch.stack(y)
        dims = y_pred.ndimension()
        if dims < 3:
            raise ValueError(f"y_pred should have at least 3 dimensions (batch, channel, spatial), got {dims}.")
        acc = compute_dice(y_pred=y_pred, y=y, include_background=self.include_background, ignore_empty=self.ignore_empty)
        self._buffers.append(acc)
        return acc

    def get_buffer(self):
        return torch.cat(self._buffers, dim=0)

    def aggregate(self, reduction=None):
        data = self.get_buffer()
        if not isinstance(data, torch.Tensor):
            raise ValueError("the data to aggregate must be PyTorch Tensor.")

        # do metric reduction
        f, not_nans = do_metric_reduction(data, reduction or self.reduction)
        return (f, not_nans) if self.get_not_nans else f

    def reset(self):
        self._buffers = []


def decollate_batch(batch):
    return list(torch.unbind(batch, dim=0))


class AsDiscrete:
    def __init__(self, argmax=False, to_onehot=None):
        self.argmax = argmax
        self.to_onehot = to_onehot

    def __call__(self, img):
        img_t = img
        if self.argmax:
            img_t = torch.argmax(img_t, dim=0, keepdim=True)
        if self.to_onehot is not None:
            if not isinstance(self.to_onehot, int):
                raise ValueError(f"the number of classes for One-Hot must be an integer, got {type(self.to_onehot)}.")
            img_t = one_hot(img_t, num_classes=self.to_onehot, dim=0, dtype=torch.float)
        return img_t


class UNet(nn.Module):
    """A two-level U-Net (MONAI's ``UNet(spatial_dims=2, channels=(8, 16), strides=(2,))`` in spirit)."""

    def __init__(self, in_channels=1, out_channels=3, channels=(8, 16)):
        super().__init__()
        c0, c1 = channels
        self.down = nn.Sequential(nn.Conv2d(in_channels, c0, 3, 1, 1), nn.InstanceNorm2d(c0), nn.PReLU())
        self.bottom = nn.Sequential(nn.Conv2d(c0, c1, 3, 2, 1), nn.InstanceNorm2d(c1), nn.PReLU())
        self.up = nn.ConvTranspose2d(c1, c0, 3, 2, 1, output_padding=1)
        self.out = nn.Conv2d(2 * c0, out_channels, 1)

    def forward(self, x):
        d = self.down(x)
        u = self.up(self.bottom(d))
        return self.out(torch.cat([d, u], dim=1))


class SegmentationStep(nn.Module):
    """One training batch and the validation of the same batch, as the tutorials' loops do."""

    def __init__(self):
        super().__init__()
        self.model = UNet()
        self.loss_function = DiceCELoss(to_onehot_y=True, softmax=True, include_background=False, weight=[1.0, 2.0])
        self.dice_metric = DiceMetric(include_background=False, reduction="mean")
        self.post_pred = AsDiscrete(argmax=True, to_onehot=3)
        self.post_label = AsDiscrete(to_onehot=3)

    def forward(self, inputs, labels):
        outputs = self.model(inputs)
        loss = self.loss_function(outputs, labels)

        with torch.no_grad():
            val_outputs = [self.post_pred(i) for i in decollate_batch(outputs)]
            val_labels = [self.post_label(i) for i in decollate_batch(labels)]
            # compute metric for current iteration
            self.dice_metric(y_pred=val_outputs, y=val_labels)
            # aggregate the final mean dice result
            metric = self.dice_metric.aggregate()
            # reset the status for next validation round
            self.dice_metric.reset()
        return loss, metric


def build_monai_seg_step():
    seeded(1518)
    labels = torch.zeros(2, 1, 16, 16)
    labels[0, :, 3:9, 4:12] = 1
    labels[0, :, 10:14, 2:6] = 2
    labels[1, :, 6:12, 6:14] = 2
    return SegmentationStep().train(), (torch.randn(2, 1, 16, 16), labels)
