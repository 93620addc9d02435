"""Evaluation metrics: Lightning-AI/torchmetrics' ``MulticlassF1Score`` over an evaluation loop (``Metric.forward``'s
``_forward_reduce_state_update``, ``_multiclass_stat_scores_tensor_validation`` counting the ``torch.unique`` values,
``_multiclass_stat_scores_update`` dropping ``ignore_index`` and counting the confusion matrix with ``_bincount``,
``_fbeta_reduce`` / ``_adjust_weights_safe_divide``), and hszhao/semseg's ``validate`` iteration for a PSPNet (the
pyramid pooling module, ``intersectionAndUnionGPU`` copied back with ``.cpu().numpy()`` into ``AverageMeter``s, the
running pixel accuracy, ``loss.item()``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import AverageMeter, intersectionAndUnionGPU, seeded

# ------------------------------------------------------------------ torchmetrics/utilities/compute.py, data.py


def _safe_divide(num, denom, zero_division=0.0):
    num = num if num.is_floating_point() else num.float()
    denom = denom if denom.is_floating_point() else denom.float()
    zero_division_tensor = torch.tensor(zero_division, dtype=num.dtype).to(num.device, non_blocking=True)
    return torch.where(denom != 0, num / denom, zero_division_tensor)


def _bincount(x, minlength=None):
    if minlength is None:
        minlength = len(torch.unique(x))
    if torch.are_deterministic_algorithms_enabled() or x.is_mps:
        mesh = torch.arange(minlength, device=x.device).repeat(len(x), 1)
        return torch.eq(x.reshape(-1, 1), mesh).sum(dim=0)
    return torch.bincount(x, minlength=minlength)  # BREAK: the mapping is below minlength (validated): count with a scatter_add into minlength zeros (or the eq-mesh branch)


# ------------------------------------------------------------------ torchmetrics/functional/classification/stat_scores.py


def _multiclass_stat_scores_tensor_validation(preds, target, num_classes, multidim_average="global", ignore_index=None):
    if preds.ndim == target.ndim + 1:
        if not preds.is_floating_point():
            raise ValueError("If `preds` have one dimension more than `target`, `preds` should be a float tensor.")
        if preds.shape[1] != num_classes:
            raise ValueError("If `preds` have one dimension more than `target`, `preds.shape[1]` should be equal to number of classes.")
        if preds.shape[2:] != target.shape[1:]:
            raise ValueError("If `preds` have one dimension more than `target`, the shape of `preds` should be (N, C, ...), and the shape of `target` should be (N, ...).")
    elif preds.ndim == target.ndim:
        if preds.shape != target.shape:
            raise ValueError("The `preds` and `target` should have the same shape,")
    else:
        raise ValueError("Either `preds` and `target` both should have the (same) shape (N, ...), or `target` should be (N, ...) and `preds` should be (N, C, ...).")

    check_value = num_classes if ignore_index is None else num_classes + 1
    for t, name in ((target, "target"),) + (((preds, "preds"),) if not preds.is_floating_point() else ()):
        num_unique_values = len(torch.unique(t, dim=None))  # BREAK must-not: raising on too many distinct labels is decided by the data: the count has to reach the host
        if num_unique_values > check_value:
            raise RuntimeError(f"Detected more unique values in `{name}` than expected. Expected only {check_value} but found"
                               f" {num_unique_values} in `{name}`. Found values: {torch.unique(t, dim=None)}.")


def _multiclass_stat_scores_format(preds, target, top_k=1):
    # Apply argmax if we have one more dimension
    if preds.ndim == target.ndim + 1 and top_k == 1:
        preds = preds.argmax(dim=1)
    preds = preds.reshape(*preds.shape[:2], -1) if top_k != 1 else preds.reshape(preds.shape[0], -1)
    target = target.reshape(target.shape[0], -1)
    return preds, target


def _multiclass_stat_scores_update(preds, target, num_classes, top_k=1, average="macro", multidim_average="global", ignore_index=None):
    preds = preds.flatten()
    target = target.flatten()
    if ignore_index is not None:
        idx = target != ignore_index
        preds = preds[idx]  # BREAK: keep every pixel and send the ignored ones to an extra bin that is dropped after counting
        target = target[idx]  # BREAK: the same for the targets
    unique_mapping = target.to(torch.long) * num_classes + preds.to(torch.long)
    bins = _bincount(unique_mapping, minlength=num_classes**2)
    confmat = bins.reshape(num_classes, num_classes)
    tp = confmat.diag()
    fp = confmat.sum(0) - tp
    fn = confmat.sum(1) - tp
    tn = confmat.sum() - (fp + fn + tp)
    return tp, fp, tn, fn


def _adjust_weights_safe_divide(score, average, multilabel, tp, fp, fn, top_k=1):
    if average is None or average == "none":
        return score
    if average == "weighted":
        weights = tp + fn
    else:
        weights = torch.ones_like(score)
        if not multilabel:
            weights[tp + fp + fn == 0 if top_k == 1 else tp + fn == 0] = 0.0
    return _safe_divide(weights * score, weights.sum(-1, keepdim=True)).sum(-1)


def _fbeta_reduce(tp, fp, tn, fn, beta, average, multidim_average, multilabel=False, zero_division=0):
    beta2 = beta**2
    if average == "micro":
        tp = tp.sum(dim=0 if multidim_average == "global" else 1)
        fn = fn.sum(dim=0 if multidim_average == "global" else 1)
        fp = fp.sum(dim=0 if multidim_average == "global" else 1)
        return _safe_divide((1 + beta2) * tp, (1 + beta2) * tp + beta2 * fn + fp, zero_division)
    fbeta_score = _safe_divide((1 + beta2) * tp, (1 + beta2) * tp + beta2 * fn + fp, zero_division)
    return _adjust_weights_safe_divide(fbeta_score, average, multilabel, tp, fp, fn)


# ------------------------------------------------------------------ torchmetrics/metric.py, classification/f_beta.py


class MulticlassF1Score(nn.Module):
    """``Metric`` with the ``tp / fp / tn / fn`` sum states and ``forward`` = ``_forward_reduce_state_update``."""

    def __init__(self, num_classes, average="macro", ignore_index=None, validate_args=True):
        super().__init__()
        self.num_classes = num_classes
        self.average = average
        self.ignore_index = ignore_index
        self.validate_args = validate_args
        self.multidim_average = "global"
        self.top_k = 1
        self._defaults = {}
        for s in ("tp", "fp", "tn", "fn"):
            self.add_state(s, default=torch.zeros(num_classes, dtype=torch.long))
        self._update_count = 0

    def add_state(self, name, default):
        setattr(self, name, default)
        self._defaults[name] = default.detach().clone()

    def reset(self):
        self._update_count = 0
        for attr, default in self._defaults.items():
            setattr(self, attr, default.detach().clone().to(default.device))

    def _update_state(self, tp, fp, tn, fn):
        self.tp += tp
        self.fp += fp
        self.tn += tn
        self.fn += fn

    def update(self, preds, target):
        if self.validate_args:
            _multiclass_stat_scores_tensor_validation(preds, target, self.num_classes, self.multidim_average, self.ignore_index)
        preds, target = _multiclass_stat_scores_format(preds, target, self.top_k)
        tp, fp, tn, fn = _multiclass_stat_scores_update(preds, target, self.num_classes, self.top_k, self.average, self.multidim_average, self.ignore_index)
        self._update_state(tp, fp, tn, fn)

    def compute(self):
        return _fbeta_reduce(self.tp, self.fp, self.tn, self.fn, 1.0, self.average, self.multidim_average)

    def _reduce_states(self, incoming_state):
        for attr in self._defaults:
            setattr(self, attr, getattr(self, attr) + incoming_state[attr])

    def forward(self, *args, **kwargs):
        # _forward_reduce_state_update: the batch value from fresh states, then the global states merged back
        global_state = {attr: getattr(self, attr) for attr in self._defaults}
        _update_count = self._update_count
        self.reset()
        self.update(*args, **kwargs)
        batch_val = self.compute()
        self._update_count = _update_count + 1
        with torch.no_grad():
            self._reduce_states(global_state)
        return batch_val


class EvalStep(nn.Module):
    """One step of a Lightning ``validation_step``: a segmentation head's logits scored by the metric's ``forward``."""

    def __init__(self, num_classes=4):
        super().__init__()
        self.head = nn.Conv2d(3, num_classes, 3, padding=1)
        self.f1 = MulticlassF1Score(num_classes, average="macro", ignore_index=255)

    def forward(self, images, targets):
        logits = self.head(images)
        batch_f1 = self.f1(logits, targets)
        return batch_f1, self.f1.compute(), self.f1.tp.clone(), self.f1.fp.clone()


def build_torchmetrics_f1():
    seeded(1607)
    step = EvalStep().eval()
    step.f1.tp += torch.tensor([5, 1, 0, 2])  # states carried from earlier batches of the epoch
    step.f1.fp += torch.tensor([1, 2, 0, 1])
    images = torch.randn(2, 3, 6, 6)
    targets = torch.randint(0, 4, (2, 6, 6))
    targets[:, 0, :] = 255
    return step, (images, targets)


# ------------------------------------------------------------------ hszhao/semseg model/pspnet.py, tool/train.py


class PPM(nn.Module):
    def __init__(self, in_dim, reduction_dim, bins):
        super().__init__()
        self.features = nn.ModuleList([
            nn.Sequential(nn.AdaptiveAvgPool2d(bin), nn.Conv2d(in_dim, reduction_dim, kernel_size=1, bias=False),
                          nn.BatchNorm2d(reduction_dim), nn.ReLU(inplace=True)) for bin in bins
        ])

    def forward(self, x):
        x_size = x.size()
        out = [x]
        for f in self.features:
            out.append(F.interpolate(f(x), x_size[2:], mode="bilinear", align_corners=True))
        return torch.cat(out, 1)


class PSPNet(nn.Module):
    def __init__(self, bins=(1, 2, 3), classes=5, zoom_factor=4):
        super().__init__()
        self.zoom_factor = zoom_factor
        self.layer0 = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.ppm = PPM(16, 4, bins)
        self.cls = nn.Sequential(nn.Conv2d(16 + 4 * len(bins), 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Conv2d(8, classes, 1))

    def forward(self, x):
        x_size = x.size()
        h = int((x_size[2] - 1) / 8 * self.zoom_factor + 1)
        w = int((x_size[3] - 1) / 8 * self.zoom_factor + 1)
        x = self.ppm(self.layer0(x))
        x = self.cls(x)
        if self.zoom_factor != 1:
            x = F.interpolate(x, size=(h, w), mode="bilinear", align_corners=True)
        return x


class Validate(nn.Module):
    """The body of ``validate``'s loop for one batch (single process), with the epoch's meters."""

    def __init__(self, classes=5, ignore_label=255):
        super().__init__()
        self.model = PSPNet(classes=classes)
        self.criterion = nn.CrossEntropyLoss(ignore_index=ignore_label)
        self.classes = classes
        self.ignore_label = ignore_label
        self.zoom_factor = 4
        self.loss_meter = AverageMeter()
        self.intersection_meter = AverageMeter()
        self.union_meter = AverageMeter()
        self.target_meter = AverageMeter()

    def forward(self, input, target):
        output = self.model(input)
        if self.zoom_factor != 8:
            output = F.interpolate(output, size=target.size()[1:], mode="bilinear", align_corners=True)
        loss = self.criterion(output, target)

        n = input.size(0)
        loss = torch.mean(loss)

        output = output.max(1)[1]
        intersection, union, target = intersectionAndUnionGPU(output, target, self.classes, self.ignore_label)
        intersection, union, target = intersection.cpu().numpy(), union.cpu().numpy(), target.cpu().numpy()
        self.intersection_meter.update(intersection), self.union_meter.update(union), self.target_meter.update(target)

        accuracy = sum(self.intersection_meter.val) / (sum(self.target_meter.val) + 1e-10)
        self.loss_meter.update(loss.item(), n)  # BREAK: the meter's arithmetic works on a 0-d tensor: pass the (detached) loss itself
        return {"accuracy": accuracy, "intersection": self.intersection_meter.sum, "union": self.union_meter.sum, "target": self.target_meter.sum}


def build_semseg_validate():
    seeded(1608)
    v = Validate().eval()
    input = torch.randn(2, 3, 17, 17)
    target = torch.randint(0, 5, (2, 17, 17))
    target[:, :3, :] = 255
    return v, (input, target)
