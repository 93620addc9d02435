"""Self- and semi-supervised steps: DINO's multi-crop wrapper and centred, sharpened teacher loss, BYOL with
its lazily copied target encoder (lucidrains/byol-pytorch), FlexMatch's class-wise flexible thresholds
(TorchSSL), Co-teaching's small-loss exchange (bhanml/Co-teaching), MixMatch's sharpen-and-mixup step
(YU1ut/MixMatch-pytorch)."""

from __future__ import annotations

import copy
import math
import sys
from collections import Counter
from functools import wraps

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import mlp, seeded

# ------------------------------------------------------------------ DINO (facebookresearch/dino)


class TinyViTBackbone(nn.Module):
    def __init__(self, patch=4, dim=16):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.block = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Identity()

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        return self.head(self.block(x)[:, 0])


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        backbone.fc, backbone.head = nn.Identity(), nn.Identity()
        self.backbone = backbone
        self.head = head

    def forward(self, x):
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(torch.unique_consecutive(  # BREAK: count the runs of equal crop sizes in Python
            torch.tensor([inp.shape[-1] for inp in x]),
            return_counts=True,
        )[1], 0)
        start_idx, output = 0, torch.empty(0).to(x[0].device)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx: end_idx]))  # BREAK: (same rewrite: Python int bounds)
            if isinstance(_out, tuple):
                _out = _out[0]
            output = torch.cat((output, _out))
            start_idx = end_idx
        return self.head(output)


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs, nepochs,
                 student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.ncrops = ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))
        self.teacher_temp_schedule = np.concatenate((
            np.linspace(warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs),
            np.ones(nepochs - warmup_teacher_temp_epochs) * teacher_temp,
        ))

    def forward(self, student_output, teacher_output, epoch):
        student_out = student_output / self.student_temp
        student_out = student_out.chunk(self.ncrops)
        temp = self.teacher_temp_schedule[epoch]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
        teacher_out = teacher_out.detach().chunk(2)
        total_loss = 0
        n_loss_terms = 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        self.update_center(teacher_output)
        return total_loss

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True)
        batch_center = batch_center / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


class DINOStep(nn.Module):
    def __init__(self, out_dim=32, local_crops_number=2):
        super().__init__()
        self.student = MultiCropWrapper(TinyViTBackbone(), mlp([16, 32, out_dim]))
        self.teacher = MultiCropWrapper(TinyViTBackbone(), mlp([16, 32, out_dim]))
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad = False
        self.dino_loss = DINOLoss(out_dim, local_crops_number + 2, 0.04, 0.07, 3, 10)

    def forward(self, images, epoch):
        teacher_output = self.teacher(images[:2])
        student_output = self.student(images)
        loss = self.dino_loss(student_output, teacher_output, epoch)
        if not math.isfinite(loss.item()):  # BREAK must-not: a non-finite loss must stop the run from Python before the optimizer steps
            print(f"Loss is {loss.item()}, stopping training", force=True)
            sys.exit(1)
        return loss


def build_dino_multicrop():
    seeded(10)
    model = DINOStep()
    images = [torch.randn(2, 3, 16, 16), torch.randn(2, 3, 16, 16), torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)]
    return model, (images, 1)


# ------------------------------------------------------------------ BYOL (lucidrains/byol-pytorch)


def singleton(cache_key):
    def inner_fn(fn):
        @wraps(fn)
        def wrapper(self, *args, **kwargs):
            instance = getattr(self, cache_key)
            if instance is not None:
                return instance
            instance = fn(self, *args, **kwargs)
            setattr(self, cache_key, instance)
            return instance
        return wrapper
    return inner_fn


def set_requires_grad(model, val):
    for p in model.parameters():
        p.requires_grad = val  # BREAK: (same rewrite: freeze the copy in __init__)


def loss_fn(x, y):
    x = F.normalize(x, dim=-1, p=2)
    y = F.normalize(y, dim=-1, p=2)
    return 2 - 2 * (x * y).sum(dim=-1)


class NetWrapper(nn.Module):
    def __init__(self, net, projection_size, projection_hidden_size):
        super().__init__()
        self.net = net
        self.projector = nn.Sequential(nn.Linear(24, projection_hidden_size), nn.BatchNorm1d(projection_hidden_size),
                                       nn.ReLU(inplace=True), nn.Linear(projection_hidden_size, projection_size))

    def forward(self, x):
        representation = self.net(x).flatten(1)
        return self.projector(representation), representation


class BYOL(nn.Module):
    def __init__(self, projection_size=16, projection_hidden_size=32, moving_average_decay=0.99, use_momentum=True):
        super().__init__()
        net = nn.Sequential(nn.Conv2d(3, 6, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.online_encoder = NetWrapper(net, projection_size, projection_hidden_size)
        self.use_momentum = use_momentum
        self.target_encoder = None
        self.moving_average_decay = moving_average_decay
        self.online_predictor = nn.Sequential(nn.Linear(projection_size, projection_hidden_size),
                                              nn.BatchNorm1d(projection_hidden_size), nn.ReLU(inplace=True),
                                              nn.Linear(projection_hidden_size, projection_size))

    @singleton("target_encoder")
    def _get_target_encoder(self):
        target_encoder = copy.deepcopy(self.online_encoder)  # BREAK: make the target copy in __init__ (the online weights are unchanged until the first step)
        set_requires_grad(target_encoder, False)
        return target_encoder

    def forward(self, image_one, image_two):
        assert not (self.training and image_one.shape[0] == 1), "you must have greater than 1 sample when training"
        images = torch.cat((image_one, image_two), dim=0)
        online_projections, _ = self.online_encoder(images)
        online_predictions = self.online_predictor(online_projections)
        online_pred_one, online_pred_two = online_predictions.chunk(2, dim=0)
        with torch.no_grad():
            target_encoder = self._get_target_encoder() if self.use_momentum else self.online_encoder
            target_projections, _ = target_encoder(images)
            target_projections = target_projections.detach()
            target_proj_one, target_proj_two = target_projections.chunk(2, dim=0)
        loss_one = loss_fn(online_pred_one, target_proj_two.detach())
        loss_two = loss_fn(online_pred_two, target_proj_one.detach())
        loss = loss_one + loss_two
        return loss.mean()


def build_byol_lazy_target():
    seeded(11)
    model = BYOL()
    return model, (torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8))


# ------------------------------------------------------------------ FlexMatch (TorchSSL flexmatch.py)


class FlexMatch(nn.Module):
    def __init__(self, num_classes=4, ulb_dest_len=24, p_cutoff=0.35, T=1.0, lambda_u=1.0, thresh_warmup=True):
        super().__init__()
        self.model = mlp([8, 32, num_classes])
        self.num_classes, self.ulb_dest_len = num_classes, ulb_dest_len
        self.p_cutoff, self.T, self.lambda_u, self.thresh_warmup = p_cutoff, T, lambda_u, thresh_warmup
        self.register_buffer("selected_label", torch.ones((ulb_dest_len,), dtype=torch.long) * -1)
        self.register_buffer("classwise_acc", torch.zeros((num_classes,)))

    @torch.no_grad()
    def update_classwise_acc(self):
        pseudo_counter = Counter(self.selected_label.tolist())  # BREAK: count the labels with one_hot(label + 1).sum(0)
        if max(pseudo_counter.values()) < self.ulb_dest_len:  # not all(5w) -1
            if self.thresh_warmup:
                for i in range(self.num_classes):
                    self.classwise_acc[i] = pseudo_counter[i] / max(pseudo_counter.values())
            else:
                wo_negative_one = copy.deepcopy(pseudo_counter)
                if -1 in wo_negative_one.keys():
                    wo_negative_one.pop(-1)
                for i in range(self.num_classes):
                    self.classwise_acc[i] = pseudo_counter[i] / max(wo_negative_one.values())

    def forward(self, x_lb, y_lb, x_ulb_w, x_ulb_s, idx_ulb):
        num_lb = x_lb.shape[0]
        inputs = torch.cat((x_lb, x_ulb_w, x_ulb_s))
        logits = self.model(inputs)
        logits_x_lb = logits[:num_lb]
        logits_x_ulb_w, logits_x_ulb_s = logits[num_lb:].chunk(2)
        sup_loss = F.cross_entropy(logits_x_lb, y_lb, reduction="mean")

        self.update_classwise_acc()
        pseudo_label = torch.softmax(logits_x_ulb_w.detach() / self.T, dim=-1)
        max_probs, max_idx = torch.max(pseudo_label, dim=-1)
        # convex mapping of the class-wise learning effect
        mask = max_probs.ge(self.p_cutoff * (self.classwise_acc[max_idx] / (2.0 - self.classwise_acc[max_idx]))).float()
        select = max_probs.ge(self.p_cutoff).long()
        unsup_loss = (F.cross_entropy(logits_x_ulb_s, max_idx, reduction="none") * mask).mean()
        if idx_ulb[select == 1].nelement() != 0:  # BREAK: write every row with torch.where(select == 1, max_idx, old label)
            self.selected_label[idx_ulb[select == 1]] = max_idx[select == 1]  # BREAK: (same rewrite)
        total_loss = sup_loss + self.lambda_u * unsup_loss
        return total_loss, mask.mean()


def build_flexmatch_thresholds():
    seeded(12)
    model = FlexMatch()
    model.selected_label.copy_(torch.randint(-1, 4, (24,)))
    x_lb, y_lb = torch.randn(4, 8), torch.randint(0, 4, (4,))
    x_ulb_w = torch.randn(6, 8)
    x_ulb_s = x_ulb_w + 0.3 * torch.randn(6, 8)
    idx_ulb = torch.randperm(24)[:6]
    return model, (x_lb, y_lb, x_ulb_w, x_ulb_s, idx_ulb)


# ------------------------------------------------------------------ Co-teaching (bhanml/Co-teaching)


def loss_coteaching(y_1, y_2, t, forget_rate, ind, noise_or_not):
    loss_1 = F.cross_entropy(y_1, t, reduction="none")
    ind_1_sorted = np.argsort(loss_1.data)
    loss_1_sorted = loss_1[ind_1_sorted]

    loss_2 = F.cross_entropy(y_2, t, reduction="none")
    ind_2_sorted = np.argsort(loss_2.data)

    remember_rate = 1 - forget_rate
    num_remember = int(remember_rate * len(loss_1_sorted))  # BREAK: keep the forget-rate schedule as Python floats (the numpy array is traced as a tensor)

    pure_ratio_1 = np.sum(noise_or_not[ind[ind_1_sorted[:num_remember]]]) / float(num_remember)
    pure_ratio_2 = np.sum(noise_or_not[ind[ind_2_sorted[:num_remember]]]) / float(num_remember)

    ind_1_update = ind_1_sorted[:num_remember]
    ind_2_update = ind_2_sorted[:num_remember]
    # exchange
    loss_1_update = F.cross_entropy(y_1[ind_2_update], t[ind_2_update])
    loss_2_update = F.cross_entropy(y_2[ind_1_update], t[ind_1_update])

    return torch.sum(loss_1_update) / num_remember, torch.sum(loss_2_update) / num_remember, pure_ratio_1, pure_ratio_2


class CoTeaching(nn.Module):
    def __init__(self, forget_rate=0.25, num_gradual=4, exponent=1, n_epoch=10, n_train=64):
        super().__init__()
        self.cnn1 = mlp([8, 16, 5])
        self.cnn2 = mlp([8, 16, 5])
        self.rate_schedule = np.ones(n_epoch) * forget_rate
        self.rate_schedule[:num_gradual] = np.linspace(0, forget_rate**exponent, num_gradual)
        self.noise_or_not = np.random.rand(n_train) > 0.3

    def forward(self, images, labels, indexes, epoch):
        ind = indexes.cpu().numpy().transpose()
        logits1 = self.cnn1(images)
        logits2 = self.cnn2(images)
        loss_1, loss_2, pure_ratio_1, pure_ratio_2 = loss_coteaching(
            logits1, logits2, labels, self.rate_schedule[epoch], ind, self.noise_or_not)
        return loss_1, loss_2, pure_ratio_1, pure_ratio_2


def build_coteaching():
    seeded(13)
    model = CoTeaching()
    return model, (torch.randn(12, 8), torch.randint(0, 5, (12,)), torch.randperm(64)[:12], 6)


# ------------------------------------------------------------------ MixMatch (YU1ut/MixMatch-pytorch)


def linear_rampup(current, rampup_length=16):
    if rampup_length == 0:
        return 1.0
    current = np.clip(current / rampup_length, 0.0, 1.0)
    return float(current)


class SemiLoss:
    def __init__(self, lambda_u=75.0):
        self.lambda_u = lambda_u

    def __call__(self, outputs_x, targets_x, outputs_u, targets_u, epoch):
        probs_u = torch.softmax(outputs_u, dim=1)
        Lx = -torch.mean(torch.sum(F.log_softmax(outputs_x, dim=1) * targets_x, dim=1))
        Lu = torch.mean((probs_u - targets_u) ** 2)
        return Lx, Lu, self.lambda_u * linear_rampup(epoch)


def interleave_offsets(batch, nu):
    groups = [batch // (nu + 1)] * (nu + 1)
    for x in range(batch - sum(groups)):
        groups[-x - 1] += 1
    offsets = [0]
    for g in groups:
        offsets.append(offsets[-1] + g)
    assert offsets[-1] == batch
    return offsets


def interleave(xy, batch):
    nu = len(xy) - 1
    offsets = interleave_offsets(batch, nu)
    xy = [[v[offsets[p]:offsets[p + 1]] for p in range(nu + 1)] for v in xy]
    for i in range(1, nu + 1):
        xy[0][i], xy[i][i] = xy[i][i], xy[0][i]
    return [torch.cat(v, dim=0) for v in xy]


class MixMatch(nn.Module):
    def __init__(self, num_classes=5, T=0.5, alpha=0.75):
        super().__init__()
        self.model = mlp([8, 16, num_classes])
        self.num_classes, self.T, self.alpha = num_classes, T, alpha
        self.criterion = SemiLoss()

    def forward(self, inputs_x, targets_x, inputs_u, inputs_u2, epoch):
        batch_size = inputs_x.size(0)
        targets_x = torch.zeros(batch_size, self.num_classes).scatter_(1, targets_x.view(-1, 1).long(), 1)
        with torch.no_grad():
            outputs_u = self.model(inputs_u)
            outputs_u2 = self.model(inputs_u2)
            p = (torch.softmax(outputs_u, dim=1) + torch.softmax(outputs_u2, dim=1)) / 2
            pt = p ** (1 / self.T)
            targets_u = pt / pt.sum(dim=1, keepdim=True)
            targets_u = targets_u.detach()

        all_inputs = torch.cat([inputs_x, inputs_u, inputs_u2], dim=0)
        all_targets = torch.cat([targets_x, targets_u, targets_u], dim=0)
        lam = np.random.beta(self.alpha, self.alpha)  # BREAK must-not: the mixup coefficient is numpy's draw; the run has to keep consuming numpy's stream
        lam = max(lam, 1 - lam)
        idx = torch.randperm(all_inputs.size(0))
        input_a, input_b = all_inputs, all_inputs[idx]
        target_a, target_b = all_targets, all_targets[idx]
        mixed_input = lam * input_a + (1 - lam) * input_b
        mixed_target = lam * target_a + (1 - lam) * target_b

        # interleave labeled and unlabeled samples between batches to get correct batchnorm calculation
        mixed_input = list(torch.split(mixed_input, batch_size))
        mixed_input = interleave(mixed_input, batch_size)
        logits = [self.model(mixed_input[0])]
        for input in mixed_input[1:]:
            logits.append(self.model(input))
        logits = interleave(logits, batch_size)
        logits_x = logits[0]
        logits_u = torch.cat(logits[1:], dim=0)
        Lx, Lu, w = self.criterion(logits_x, mixed_target[:batch_size], logits_u, mixed_target[batch_size:], epoch)
        loss = Lx + w * Lu
        return loss, Lx, Lu


def build_mixmatch():
    seeded(14)
    model = MixMatch()
    inputs_u = torch.randn(4, 8)
    return model, (torch.randn(4, 8), torch.randint(0, 5, (4,)), inputs_u, inputs_u + 0.1 * torch.randn(4, 8), 3.5)
