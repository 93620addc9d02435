"""Semi-supervised semantic segmentation with pseudo-labels: Haochen-Wang420/U2PL.

``train_semi.py``'s ``train`` iteration after the supervised-only epochs, in its loss half: the teacher's
pseudo-labels on the unlabeled batch (``torch.max`` of the upsampled softmax), the strong augmentation off (its
``np.random.uniform`` coin not drawn), the student on the labeled and unlabeled images at once, the supervised cross-entropy with
``ignore_index=255``, the teacher's second pass in train mode, ``compute_unsupervised_loss`` (the unreliable pixels
dropped above the ``np.percentile`` of the valid pixels' entropy, the loss re-weighted by the kept fraction) with the
drop percent annealed over the epochs, the contrastive term disabled (``0 * rep_all.sum()``), and the meters fed with
``.item()``.  The DeepLab v3+ of ``u2pl/models`` is reduced to a small encoder / ASPP-like head with its ``rep``
projection.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import AverageMeter, seeded

# ------------------------------------------------------------------ u2pl/models/model_helper.py (reduced)


class ModelBuilder(nn.Module):
    def __init__(self, net_cfg):
        super().__init__()
        self._num_classes = net_cfg["num_classes"]
        inner = net_cfg["inner_planes"]
        self.encoder = nn.Sequential(
            nn.Conv2d(3, inner, 3, stride=2, padding=1),
            nn.BatchNorm2d(inner),
            nn.ReLU(inplace=True),
            nn.Conv2d(inner, 2 * inner, 3, stride=2, padding=1),
            nn.BatchNorm2d(2 * inner),
            nn.ReLU(inplace=True),
        )
        self.aspp = nn.ModuleList(
            [nn.Conv2d(2 * inner, inner, 3, padding=d, dilation=d) for d in net_cfg["dilations"]]
        )
        self.head = nn.Sequential(
            nn.Conv2d(inner * len(net_cfg["dilations"]), inner, 1),
            nn.BatchNorm2d(inner),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Conv2d(inner, self._num_classes, 1)
        self.representation = nn.Sequential(
            nn.Conv2d(inner, inner, 1),
            nn.BatchNorm2d(inner),
            nn.ReLU(inplace=True),
            nn.Conv2d(inner, net_cfg["rep_dim"], 1),
        )

    def forward(self, x):
        h, w = x.shape[-2:]
        f = self.encoder(x)
        aspp_out = torch.cat([branch(f) for branch in self.aspp], dim=1)
        feat = self.head(aspp_out)
        pred = self.classifier(feat)
        outs = {"pred": pred, "rep": self.representation(feat)}
        return outs


# ------------------------------------------------------------------ u2pl/utils/loss_helper.py


class CriterionOhem(nn.Module):
    """``get_criterion`` without OHEM: plain cross-entropy with the ignore label."""

    def __init__(self, ignore_index=255):
        super().__init__()
        self._criterion = nn.CrossEntropyLoss(ignore_index=ignore_index)

    def forward(self, preds, target):
        return self._criterion(preds, target)


def compute_unsupervised_loss(predict, target, percent, pred_teacher):
    batch_size, num_class, h, w = predict.shape

    with torch.no_grad():
        # drop pixels with high entropy
        prob = torch.softmax(pred_teacher, dim=1)
        entropy = -torch.sum(prob * torch.log(prob + 1e-10), dim=1)

        thresh = np.percentile(
            entropy[target != 255].detach().cpu().numpy().flatten(),  # BREAK: nan-masked quantile
            percent,
        )
        thresh_mask = entropy.ge(thresh).bool() * (target != 255).bool()

        target[thresh_mask] = 255
        weight = batch_size * h * w / torch.sum(target != 255)

    loss = weight * F.cross_entropy(predict, target, ignore_index=255)  # [10, 321, 321]

    return loss


# ------------------------------------------------------------------ train_semi.py


class SemiTrainStep(nn.Module):
    """The loss half of one ``train`` iteration, at an epoch past ``sup_only_epoch``."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = ModelBuilder(cfg["net"])
        self.model_teacher = ModelBuilder(cfg["net"])
        for p in self.model_teacher.parameters():
            p.requires_grad = False
        with torch.no_grad():
            for t_params, s_params in zip(
                self.model_teacher.parameters(), self.model.parameters(), strict=True
            ):
                t_params.data = s_params.data.clone()
        self.sup_loss_fn = CriterionOhem(ignore_index=255)
        self.sup_losses = AverageMeter()
        self.uns_losses = AverageMeter()
        self.con_losses = AverageMeter()

    def forward(self, epoch, image_l, label_l, image_u):
        cfg = self.cfg
        model, model_teacher = self.model, self.model_teacher
        model.train()
        batch_size, h, w = label_l.size()

        # generate pseudo labels first
        model_teacher.eval()
        pred_u_teacher = model_teacher(image_u)["pred"]
        pred_u_teacher = F.interpolate(pred_u_teacher, (h, w), mode="bilinear", align_corners=True)
        pred_u_teacher = F.softmax(pred_u_teacher, dim=1)
        logits_u_aug, label_u_aug = torch.max(pred_u_teacher, dim=1)

        # apply strong data augmentation: cutout, cutmix, or classmix
        if cfg["trainer"]["unsupervised"].get("apply_aug", False) and np.random.uniform(0, 1) < 0.5:
            raise NotImplementedError("generate_unsup_data")
        else:
            image_u_aug = image_u

        # forward
        num_labeled = len(image_l)
        image_all = torch.cat((image_l, image_u_aug))
        outs = model(image_all)
        pred_all, rep_all = outs["pred"], outs["rep"]
        pred_l, pred_u = pred_all[:num_labeled], pred_all[num_labeled:]
        pred_l_large = F.interpolate(pred_l, size=(h, w), mode="bilinear", align_corners=True)
        pred_u_large = F.interpolate(pred_u, size=(h, w), mode="bilinear", align_corners=True)

        # supervised loss
        sup_loss = self.sup_loss_fn(pred_l_large, label_l.clone())

        # teacher forward
        model_teacher.train()
        with torch.no_grad():
            out_t = model_teacher(image_all)
            pred_all_teacher = out_t["pred"]
            pred_u_teacher = pred_all_teacher[num_labeled:]
            pred_u_large_teacher = F.interpolate(
                pred_u_teacher, size=(h, w), mode="bilinear", align_corners=True
            )

        # unsupervised loss
        drop_percent = cfg["trainer"]["unsupervised"].get("drop_percent", 100)
        percent_unreliable = (100 - drop_percent) * (1 - epoch / cfg["trainer"]["epochs"])
        drop_percent = 100 - percent_unreliable
        unsup_loss = compute_unsupervised_loss(
            pred_u_large, label_u_aug.clone(), drop_percent, pred_u_large_teacher.detach()
        ) * cfg["trainer"]["unsupervised"].get("loss_weight", 1)

        # contrastive loss using unreliable pseudo labels
        if cfg["trainer"].get("contrastive", False):
            raise NotImplementedError("compute_contra_memobank_loss")
        else:
            contra_loss = 0 * rep_all.sum()

        loss = sup_loss + unsup_loss + contra_loss

        # gather all loss from different gpus
        reduced_sup_loss = sup_loss.clone().detach()
        self.sup_losses.update(reduced_sup_loss.item())  # BREAK: the meter can sum tensors

        reduced_uns_loss = unsup_loss.clone().detach()
        self.uns_losses.update(reduced_uns_loss.item())  # BREAK: the meter can sum tensors

        reduced_con_loss = contra_loss.clone().detach()
        self.con_losses.update(reduced_con_loss.item())  # BREAK: the meter can sum tensors

        return loss


def build_u2pl_train_step():
    seeded(1807)
    cfg = {
        "net": {"num_classes": 4, "inner_planes": 8, "dilations": (1, 2), "rep_dim": 8},
        "trainer": {
            "epochs": 10,
            "unsupervised": {"drop_percent": 80, "apply_aug": False, "loss_weight": 1.0},
            "contrastive": False,
        },
    }
    m = SemiTrainStep(cfg)
    image_l = torch.randn(2, 3, 24, 24)
    label_l = torch.randint(0, 4, (2, 24, 24))
    label_l[:, :3, :] = 255
    image_u = torch.randn(2, 3, 24, 24)
    return m, (3, image_l, label_l, image_u)
