"""Semantic segmentation losses: open-mmlab/mmsegmentation's decode-head ``losses`` with the
``OHEMPixelSampler`` (the kept-pixel threshold read from the sorted probabilities of the true class, at least
``min_kept`` pixels per image) weighting the cross-entropy, CoinCheung/BiSeNet's ``OhemCELoss`` (the pixels whose
loss is over ``-log(thresh)``, or the ``n_min`` hardest when fewer) on BiSeNetV2's main and auxiliary heads as
``tools/train_amp.py`` sums them, and bermanmaxim/LovaszSoftmax's ``lovasz_softmax`` (ignored pixels dropped in
``flatten_probas``, one Lovasz extension per class present in the batch)."""

from __future__ import annotations

from itertools import filterfalse as ifilterfalse

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ mmseg: OHEM pixel sampler


class OHEMPixelSampler:
    """Online Hard Example Mining: keep the pixels whose true-class probability is under a threshold."""

    def __init__(self, context, thresh=None, min_kept=100000):
        assert min_kept > 1
        self.context = context
        self.thresh = thresh
        self.min_kept = min_kept

    def sample(self, seg_logit, seg_label):
        with torch.no_grad():
            assert seg_logit.shape[2:] == seg_label.shape[2:]
            assert seg_label.shape[1] == 1
            seg_label = seg_label.squeeze(1).long()
            batch_kept = self.min_kept * seg_label.size(0)
            valid_mask = seg_label != self.context.ignore_index
            seg_weight = seg_logit.new_zeros(size=seg_label.size())
            valid_seg_weight = seg_weight[valid_mask]  # BREAK: build the weight over all pixels and multiply by the valid mask instead of compacting the valid ones
            if self.thresh is not None:
                seg_prob = F.softmax(seg_logit, dim=1)

                tmp_seg_label = seg_label.clone().unsqueeze(1)
                tmp_seg_label[tmp_seg_label == self.context.ignore_index] = 0
                seg_prob = seg_prob.gather(1, tmp_seg_label).squeeze(1)
                sort_prob, sort_indices = seg_prob[valid_mask].sort()  # BREAK: sort all pixels with the ignored ones pushed to +inf and index the kept rank, clamped to the valid count

                if sort_prob.numel() > 0:
                    min_threshold = sort_prob[min(batch_kept, sort_prob.numel() - 1)]
                else:
                    min_threshold = 0.0
                threshold = max(min_threshold, self.thresh)
                valid_seg_weight[seg_prob[valid_mask] < threshold] = 1.0  # BREAK: the weight is (valid & (seg_prob < threshold)) as float, over all pixels
            else:
                losses = self.context.loss_decode(seg_logit, seg_label, weight=None, ignore_index=self.context.ignore_index, reduction_override="none")
                # faster than topk according to https://github.com/pytorch/pytorch/issues/22812
                _, sort_indices = losses[valid_mask].sort(descending=True)
                valid_seg_weight[sort_indices[:batch_kept]] = 1.0

            seg_weight[valid_mask] = valid_seg_weight

            return seg_weight


def weight_reduce_loss(loss, weight=None, reduction="mean", avg_factor=None):
    if weight is not None:
        loss = loss * weight
    if avg_factor is None:
        if reduction == "mean":
            loss = loss.mean()
        elif reduction == "sum":
            loss = loss.sum()
    elif reduction == "mean":
        loss = loss.sum() / avg_factor
    return loss


class CrossEntropyLoss(nn.Module):
    def __init__(self, loss_weight=1.0):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, cls_score, label, weight=None, avg_factor=None, reduction_override=None, ignore_index=-100):
        reduction = reduction_override if reduction_override else "mean"
        loss = F.cross_entropy(cls_score, label, reduction="none", ignore_index=ignore_index)
        if weight is not None:
            weight = weight.float()
        return self.loss_weight * weight_reduce_loss(loss, weight=weight, reduction=reduction, avg_factor=avg_factor)


def accuracy(pred, target, topk=1, thresh=None):
    """Top-k accuracy of the per-pixel predictions, in percent (mmseg 0.x, before ``ignore_index``)."""
    assert isinstance(topk, int | tuple)
    if isinstance(topk, int):
        topk = (topk,)
        return_single = True
    else:
        return_single = False
    maxk = max(topk)
    if pred.size(0) == 0:
        accu = [pred.new_tensor(0.0) for i in range(len(topk))]
        return accu[0] if return_single else accu
    assert pred.ndim == target.ndim + 1
    assert pred.size(0) == target.size(0)
    assert maxk <= pred.size(1), f"maxk {maxk} exceeds pred dimension {pred.size(1)}"
    pred_value, pred_label = pred.topk(maxk, dim=1)
    # transpose to shape (maxk, N, ...)
    pred_label = pred_label.transpose(0, 1)
    correct = pred_label.eq(target.unsqueeze(0).expand_as(pred_label))
    if thresh is not None:
        # Only prediction values larger than thresh are counted as correct
        correct = correct & (pred_value > thresh).t()
    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / target.numel()))
    return res[0] if return_single else res


class FCNHead(nn.Module):
    """A two-conv FCN decode head at 1/4 resolution, trained through ``forward_train``."""

    def __init__(self, in_channels=8, channels=16, num_classes=5, ignore_index=255):
        super().__init__()
        self.convs = nn.Sequential(nn.Conv2d(in_channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
                                   nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.conv_seg = nn.Conv2d(channels, num_classes, kernel_size=1)
        self.ignore_index = ignore_index
        self.align_corners = False
        self.loss_decode = CrossEntropyLoss()
        self.sampler = OHEMPixelSampler(context=self, thresh=0.7, min_kept=40)

    def forward(self, inputs):
        return self.conv_seg(self.convs(inputs))

    def forward_train(self, inputs, gt_semantic_seg):
        seg_logits = self.forward(inputs)
        return self.losses(seg_logits, gt_semantic_seg)

    def losses(self, seg_logit, seg_label):
        loss = dict()
        seg_logit = F.interpolate(seg_logit, size=seg_label.shape[2:], mode="bilinear", align_corners=self.align_corners)
        if self.sampler is not None:
            seg_weight = self.sampler.sample(seg_logit, seg_label)
        else:
            seg_weight = None
        seg_label = seg_label.squeeze(1)
        loss["loss_seg"] = self.loss_decode(seg_logit, seg_label, weight=seg_weight, ignore_index=self.ignore_index)
        loss["acc_seg"] = accuracy(seg_logit, seg_label)
        return loss


class OHEMSegStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU())
        self.decode_head = FCNHead()

    def forward(self, img, gt_semantic_seg):
        return self.decode_head.forward_train(self.backbone(img), gt_semantic_seg)


def build_mmseg_ohem():
    seeded(1305)
    img = torch.randn(2, 3, 16, 16)
    seg = torch.randint(0, 5, (2, 1, 16, 16))
    seg[:, :, :3, :] = 255  # an ignored border
    return OHEMSegStep(), (img, seg)


# ------------------------------------------------------------------ CoinCheung/BiSeNet (lib/ohem_ce_loss.py, BiSeNetV2)


class OhemCELoss(nn.Module):
    def __init__(self, thresh, lb_ignore=255):
        super().__init__()
        self.thresh = -torch.log(torch.tensor(thresh, requires_grad=False, dtype=torch.float))
        self.lb_ignore = lb_ignore
        self.criteria = nn.CrossEntropyLoss(ignore_index=lb_ignore, reduction="none")

    def forward(self, logits, labels):
        n_min = labels[labels != self.lb_ignore].numel() // 16  # BREAK: count the valid labels with (labels != lb_ignore).sum() instead of compacting them
        loss = self.criteria(logits, labels).view(-1)
        loss_hard = loss[loss > self.thresh]  # BREAK: the hard pixels are the top of the sorted losses: average the first max(#hard, n_min) sorted values with a rank mask
        if loss_hard.numel() < n_min:
            loss_hard, _ = loss.topk(n_min)
        return torch.mean(loss_hard)


class ConvBNReLU(nn.Module):
    def __init__(self, in_chan, out_chan, ks=3, stride=1, padding=1):
        super().__init__()
        self.conv = nn.Conv2d(in_chan, out_chan, kernel_size=ks, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm2d(out_chan)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class SegmentHead(nn.Module):
    def __init__(self, in_chan, mid_chan, n_classes, up_factor=8):
        super().__init__()
        self.conv = ConvBNReLU(in_chan, mid_chan, 3, stride=1)
        self.drop = nn.Dropout(0.1)
        self.up_factor = up_factor
        self.conv_out = nn.Sequential(nn.Upsample(scale_factor=up_factor, mode="bilinear", align_corners=False),
                                      nn.Conv2d(mid_chan, n_classes, 1, 1, 0, bias=True))

    def forward(self, x):
        return self.conv_out(self.drop(self.conv(x)))


class BiSeNetV2(nn.Module):
    """The detail branch, a two-stage semantic branch, the bilateral guided aggregation and the booster heads."""

    def __init__(self, n_classes=5, aux_mode="train"):
        super().__init__()
        self.aux_mode = aux_mode
        self.detail = nn.Sequential(ConvBNReLU(3, 8, stride=2), ConvBNReLU(8, 8, stride=2))
        self.segment_s1 = ConvBNReLU(3, 8, stride=4, padding=1)
        self.segment_s2 = ConvBNReLU(8, 8, stride=2)
        self.bga_left = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bga_right = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.head = SegmentHead(8, 16, n_classes, up_factor=4)
        if self.aux_mode == "train":
            self.aux2 = SegmentHead(8, 8, n_classes, up_factor=4)
            self.aux3 = SegmentHead(8, 8, n_classes, up_factor=8)

    def forward(self, x):
        feat_d = self.detail(x)
        feat2 = self.segment_s1(x)
        feat_s = self.segment_s2(feat2)
        right = torch.sigmoid(F.interpolate(self.bga_right(feat_s), size=feat_d.shape[2:], mode="bilinear", align_corners=False))
        feat_head = self.bga_left(feat_d) * right
        logits = self.head(feat_head)
        if self.aux_mode == "train":
            logits_aux2 = self.aux2(feat2)
            logits_aux3 = self.aux3(feat_s)
            return logits, logits_aux2, logits_aux3
        return (logits,)


class BiSeNetTrainStep(nn.Module):
    """The loss of one iteration of ``tools/train_amp.py`` (the AMP scaler, optimizer and meters follow it)."""

    def __init__(self, num_aux_heads=2):
        super().__init__()
        self.net = BiSeNetV2()
        self.criteria_pre = OhemCELoss(0.7)
        self.criteria_aux = [OhemCELoss(0.7) for _ in range(num_aux_heads)]

    def forward(self, im, lb):
        lb = torch.squeeze(lb, 1)
        logits, *logits_aux = self.net(im)
        loss_pre = self.criteria_pre(logits, lb)
        loss_aux = [crit(lgt, lb) for crit, lgt in zip(self.criteria_aux, logits_aux, strict=True)]  # BREAK: the comprehension cannot resume its zip iterator after the OhemCELoss breaks inside it; it traces once the loss has none
        loss = loss_pre + sum(loss_aux)
        return loss, loss_pre, loss_aux


def build_bisenet_ohem():
    seeded(1322)
    im = torch.randn(2, 3, 16, 16)
    lb = torch.randint(0, 5, (2, 1, 16, 16))
    lb[:, :, :, -4:] = 255
    return BiSeNetTrainStep(), (im, lb)


# ------------------------------------------------------------------ LovaszSoftmax (pytorch/lovasz_losses.py)


def lovasz_grad(gt_sorted):
    """Gradient of the Lovasz extension w.r.t sorted errors (see Alg. 1 in the paper)."""
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1.0 - intersection / union
    if p > 1:  # cover 1-pixel case
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def isnan(x):
    return x != x


def mean(values, ignore_nan=False, empty=0):
    """nanmean compatible with generators."""
    values = iter(values)
    if ignore_nan:
        values = ifilterfalse(isnan, values)
    try:
        n = 1
        acc = next(values)
    except StopIteration:
        if empty == "raise":
            raise ValueError("Empty mean") from None
        return empty
    for n, v in enumerate(values, 2):  # noqa: B007
        acc += v
    if n == 1:
        return acc
    return acc / n


def lovasz_softmax(probas, labels, classes="present", per_image=False, ignore=None):
    """Multi-class Lovasz-Softmax loss; probas [B, C, H, W] (softmax outputs), labels [B, H, W]."""
    if per_image:
        loss = mean(lovasz_softmax_flat(*flatten_probas(prob.unsqueeze(0), lab.unsqueeze(0), ignore), classes=classes)
                    for prob, lab in zip(probas, labels, strict=True))
    else:
        loss = lovasz_softmax_flat(*flatten_probas(probas, labels, ignore), classes=classes)
    return loss


def lovasz_softmax_flat(probas, labels, classes="present"):
    """Multi-class Lovasz-Softmax loss over flattened pixels; probas [P, C], labels [P]."""
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.0
    C = probas.size(1)
    losses = []
    class_to_sum = list(range(C)) if classes in ["all", "present"] else classes
    for c in class_to_sum:
        fg = (labels == c).float()  # foreground for class c
        if classes == "present" and fg.sum() == 0:  # BREAK: compute every class and average with a presence weight instead of skipping absent classes
            continue
        if C == 1:
            if len(classes) > 1:
                raise ValueError("Sigmoid output possible only with 1 class")
            class_pred = probas[:, 0]
        else:
            class_pred = probas[:, c]
        errors = (fg - class_pred).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        perm = perm.data
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg_sorted)))
    return mean(losses)


def flatten_probas(probas, labels, ignore=None):
    """Flattens predictions in the batch."""
    if probas.dim() == 3:
        # assumes output of a sigmoid layer
        B, H, W = probas.size()
        probas = probas.view(B, 1, H, W)
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)  # B * H * W, C = P, C
    labels = labels.view(-1)
    if ignore is None:
        return probas, labels
    valid = labels != ignore
    vprobas = probas[valid.nonzero().squeeze()]  # BREAK: keep every pixel and push the ignored ones to the end of each class's sort with zero error
    vlabels = labels[valid]  # BREAK: as above: mask instead of compacting, the Lovasz gradient of the valid prefix is unchanged
    return vprobas, vlabels


class LovaszSegStep(nn.Module):
    """A small encoder-decoder trained with cross-entropy plus the Lovasz-Softmax term, as the repo's demo."""

    def __init__(self, num_classes=6, ignore=255):
        super().__init__()
        self.ignore = ignore
        self.enc = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(), nn.Conv2d(12, 12, 3, padding=1), nn.ReLU())
        self.cls = nn.Conv2d(12, num_classes, 1)

    def forward(self, img, labels):
        out = self.cls(self.enc(img))
        ce = F.cross_entropy(out, labels, ignore_index=self.ignore)
        lovasz = lovasz_softmax(F.softmax(out, dim=1), labels, ignore=self.ignore)
        return ce + lovasz, lovasz


def build_lovasz_softmax():
    seeded(1306)
    img = torch.randn(2, 3, 10, 10)
    labels = torch.randint(0, 4, (2, 10, 10))  # classes 4 and 5 are absent
    labels[0, :2] = 255
    labels[1, :, -3:] = 255
    return LovaszSegStep(), (img, labels)
