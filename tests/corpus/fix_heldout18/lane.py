"""Lane detection: cfzd/Ultra-Fast-Lane-Detection.

``model/model.py``'s ``parsingNet`` with the auxiliary segmentation branch (row-anchor classification over
``griding_num + 1`` cells, ``cls_dim`` flattened through ``np.prod``), ``utils/loss.py``'s ``SoftmaxFocalLoss``,
``ParsingRelationLoss`` and ``ParsingRelationDis`` wired through ``utils/factory.py``'s ``get_loss_dict``, and
``utils/metrics.py``'s ``MultiLabelAcc`` / ``AccTopk`` / ``Metric_mIoU`` (``converter`` to flat numpy, ``fast_hist``
by ``np.bincount``) wired through ``get_metric_dict``, under one iteration of ``train.py``'s ``train`` in its loss
half: ``inference``, ``calc_loss`` logging each term every 20 steps, ``resolve_val_data``, ``update_metrics`` and the
metrics written to the logger (the progress bar left out).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .helpers import SoftmaxFocalLoss, SummaryWriter, seeded

# ------------------------------------------------------------------ utils/loss.py


class ParsingRelationLoss(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits):
        n, c, h, w = logits.shape
        loss_all = []
        for i in range(0, h - 1):
            loss_all.append(logits[:, :, i, :] - logits[:, :, i + 1, :])
        # loss0 : n,c,w
        loss = torch.cat(loss_all)
        return torch.nn.functional.smooth_l1_loss(loss, torch.zeros_like(loss))


class ParsingRelationDis(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.L1Loss()

    def forward(self, x):
        n, dim, num_rows, num_cols = x.shape
        x = torch.nn.functional.softmax(x[:, : dim - 1, :, :], dim=1)
        embedding = torch.Tensor(np.arange(dim - 1)).float().to(x.device).view(1, -1, 1, 1)
        pos = torch.sum(x * embedding, dim=1)

        diff_list1 = []
        for i in range(0, num_rows // 2):
            diff_list1.append(pos[:, i, :] - pos[:, i + 1, :])

        loss = 0
        for i in range(len(diff_list1) - 1):
            loss += self.l1(diff_list1[i], diff_list1[i + 1])
        loss /= len(diff_list1) - 1
        return loss


# ------------------------------------------------------------------ utils/metrics.py


def converter(data):
    if isinstance(data, torch.Tensor):
        data = data.cpu().data.numpy().flatten()
    return data.flatten()


def fast_hist(label_pred, label_true, num_classes):
    hist = np.bincount(  # BREAK: the labels are in range: count against every bin
        num_classes * label_true.astype(int) + label_pred, minlength=num_classes**2
    )
    hist = hist.reshape(num_classes, num_classes)
    return hist


class Metric_mIoU:
    def __init__(self, class_num):
        self.class_num = class_num
        self.hist = np.zeros((self.class_num, self.class_num))

    def update(self, predict, target):
        predict, target = converter(predict), converter(target)
        self.hist += fast_hist(predict, target, self.class_num)

    def reset(self):
        self.hist = np.zeros((self.class_num, self.class_num))

    def get_miou(self):
        miou = np.diag(self.hist) / (
            np.sum(self.hist, axis=1) + np.sum(self.hist, axis=0) - np.diag(self.hist)
        )
        miou = np.nanmean(miou)  # BREAK: a NaN-masked sum over a count
        return miou

    def get_acc(self):
        acc = np.diag(self.hist) / self.hist.sum(axis=1)
        acc = np.nanmean(acc)
        return acc

    def get(self):
        return self.get_miou()


class MultiLabelAcc:
    def __init__(self):
        self.cnt = 0
        self.correct = 0

    def reset(self):
        self.cnt = 0
        self.correct = 0

    def update(self, predict, target):
        predict, target = converter(predict), converter(target)
        self.cnt += len(predict)
        self.correct += np.sum(predict == target)

    def get_acc(self):
        return self.correct * 1.0 / self.cnt

    def get(self):
        return self.get_acc()


class AccTopk:
    def __init__(self, background_classes, k):
        self.background_classes = background_classes
        self.k = k
        self.cnt = 0
        self.top5_correct = 0

    def reset(self):
        self.cnt = 0
        self.top5_correct = 0

    def update(self, predict, target):
        predict, target = converter(predict), converter(target)
        self.cnt += len(predict)
        background_idx = (predict == self.background_classes) + (target == self.background_classes)
        self.top5_correct += np.sum(predict[background_idx] == target[background_idx])  # BREAK: count masked
        not_background_idx = np.logical_not(background_idx)
        self.top5_correct += np.sum(
            np.absolute(predict[not_background_idx] - target[not_background_idx]) < self.k  # BREAK: masked
        )

    def get(self):
        return self.top5_correct * 1.0 / self.cnt


def update_metrics(metric_dict, pair_data):
    for i in range(len(metric_dict["name"])):
        metric_op = metric_dict["op"][i]
        data_src = metric_dict["data_src"][i]
        metric_op.update(pair_data[data_src[0]], pair_data[data_src[1]])


def reset_metrics(metric_dict):
    for op in metric_dict["op"]:
        op.reset()


# ------------------------------------------------------------------ utils/factory.py


def get_metric_dict(cfg):
    metric_dict = {
        "name": ["top1", "top2", "top3", "iou"],
        "op": [
            MultiLabelAcc(),
            AccTopk(cfg.griding_num, 2),
            AccTopk(cfg.griding_num, 3),
            Metric_mIoU(cfg.num_lanes + 1),
        ],
        "data_src": [
            ("cls_out", "cls_label"),
            ("cls_out", "cls_label"),
            ("cls_out", "cls_label"),
            ("seg_out", "seg_label"),
        ],
    }
    return metric_dict


def get_loss_dict(cfg):
    loss_dict = {
        "name": ["cls_loss", "relation_loss", "aux_loss", "relation_dis"],
        "op": [SoftmaxFocalLoss(2), ParsingRelationLoss(), torch.nn.CrossEntropyLoss(), ParsingRelationDis()],
        "weight": [1.0, cfg.sim_loss_w, 1.0, cfg.shp_loss_w],
        "data_src": [("cls_out", "cls_label"), ("cls_out",), ("seg_out", "seg_label"), ("cls_out",)],
    }
    return loss_dict


# ------------------------------------------------------------------ model/model.py (reduced backbone)


class conv_bn_relu(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, bias=False):
        super().__init__()
        self.conv = torch.nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            bias=bias,
        )
        self.bn = torch.nn.BatchNorm2d(out_channels)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = self.relu(x)
        return x


class resnet(torch.nn.Module):
    """A stand-in for torchvision's ResNet trunk: features at 1/8, 1/16 and 1/32."""

    def __init__(self, width):
        super().__init__()
        self.layer2 = torch.nn.Sequential(
            conv_bn_relu(3, width, 3, stride=4, padding=1), conv_bn_relu(width, width, 3, stride=2, padding=1)
        )
        self.layer3 = conv_bn_relu(width, 2 * width, 3, stride=2, padding=1)
        self.layer4 = conv_bn_relu(2 * width, 4 * width, 3, stride=2, padding=1)

    def forward(self, x):
        x2 = self.layer2(x)
        x3 = self.layer3(x2)
        x4 = self.layer4(x3)
        return x2, x3, x4


class parsingNet(torch.nn.Module):
    def __init__(self, size=(288, 800), width=8, cls_dim=(37, 10, 4), use_aux=False):
        super().__init__()

        self.size = size
        self.w = size[0]
        self.h = size[1]
        self.cls_dim = cls_dim  # (num_gridding, num_cls_per_lane, num_of_lanes)
        # num_cls_per_lane is the number of row anchors
        self.use_aux = use_aux
        self.total_dim = np.prod(cls_dim)

        # input : nchw,
        # output: (w+1) * sample_rows * 4
        self.model = resnet(width)

        if self.use_aux:
            self.aux_header2 = torch.nn.Sequential(
                conv_bn_relu(width, width, kernel_size=3, stride=1, padding=1)
            )
            self.aux_header3 = torch.nn.Sequential(
                conv_bn_relu(2 * width, width, kernel_size=3, stride=1, padding=1)
            )
            self.aux_header4 = torch.nn.Sequential(
                conv_bn_relu(4 * width, width, kernel_size=3, stride=1, padding=1)
            )
            self.aux_combine = torch.nn.Sequential(
                conv_bn_relu(3 * width, width, 3, padding=2, dilation=2),
                torch.nn.Conv2d(width, cls_dim[-1] + 1, 1),
                # output : n, num_of_lanes+1, h, w
            )

        self.pool_dim = 8 * (size[0] // 32) * (size[1] // 32)
        self.cls = torch.nn.Sequential(
            torch.nn.Linear(self.pool_dim, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, int(self.total_dim)),
        )

        self.pool = torch.nn.Conv2d(4 * width, 8, 1)
        # 1/32,2048 channel
        # 288,800 -> 9,40,2048
        # (w+1) * sample_rows * 4
        # 37 * 10 * 4

    def forward(self, x):
        # n c h w - > n 2048 sh sw
        # -> n 2048
        x2, x3, fea = self.model(x)
        if self.use_aux:
            x2 = self.aux_header2(x2)
            x3 = self.aux_header3(x3)
            x3 = torch.nn.functional.interpolate(x3, scale_factor=2, mode="bilinear")
            x4 = self.aux_header4(fea)
            x4 = torch.nn.functional.interpolate(x4, scale_factor=4, mode="bilinear")
            aux_seg = torch.cat([x2, x3, x4], dim=1)
            aux_seg = self.aux_combine(aux_seg)
        else:
            aux_seg = None

        fea = self.pool(fea).view(-1, self.pool_dim)

        group_cls = self.cls(fea).view(-1, *self.cls_dim)

        if self.use_aux:
            return group_cls, aux_seg

        return group_cls


# ------------------------------------------------------------------ train.py


def inference(net, data_label, use_aux):
    if use_aux:
        img, cls_label, seg_label = data_label
        img, cls_label, seg_label = img, cls_label.long(), seg_label.long()
        cls_out, seg_out = net(img)
        return {"cls_out": cls_out, "cls_label": cls_label, "seg_out": seg_out, "seg_label": seg_label}
    else:
        img, cls_label = data_label
        img, cls_label = img, cls_label.long()
        cls_out = net(img)
        return {"cls_out": cls_out, "cls_label": cls_label}


def resolve_val_data(results, use_aux):
    results["cls_out"] = torch.argmax(results["cls_out"], dim=1)
    if use_aux:
        results["seg_out"] = torch.argmax(results["seg_out"], dim=1)
    return results


def calc_loss(loss_dict, results, logger, global_step):
    loss = 0

    for i in range(len(loss_dict["name"])):
        data_src = loss_dict["data_src"][i]

        datas = [results[src] for src in data_src]

        loss_cur = loss_dict["op"][i](*datas)

        if global_step % 20 == 0:
            logger.add_scalar("loss/" + loss_dict["name"][i], loss_cur, global_step)

        loss += loss_cur * loss_dict["weight"][i]
    return loss


class TrainStep(nn.Module):
    """The loss half of one iteration of ``train``'s ``for b_idx, data_label in enumerate(progress_bar)``."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.net = parsingNet(
            size=(cfg.height, cfg.width),
            width=8,
            cls_dim=(cfg.griding_num + 1, cfg.num_rows, cfg.num_lanes),
            use_aux=cfg.use_aux,
        )
        self.loss_dict = get_loss_dict(cfg)
        self.metric_dict = get_metric_dict(cfg)
        self.logger = SummaryWriter()

    def forward(self, epoch, b_idx, data_label, len_data_loader):
        net, use_aux, logger, metric_dict = self.net, self.cfg.use_aux, self.logger, self.metric_dict
        net.train()
        reset_metrics(metric_dict)
        global_step = epoch * len_data_loader + b_idx

        results = inference(net, data_label, use_aux)

        loss = calc_loss(self.loss_dict, results, logger, global_step)

        results = resolve_val_data(results, use_aux)

        update_metrics(metric_dict, results)
        if global_step % 20 == 0:
            for me_name, me_op in zip(metric_dict["name"], metric_dict["op"]):  # noqa: B905
                logger.add_scalar("metric/" + me_name, me_op.get(), global_step=global_step)
        return loss, results["cls_out"], results["seg_out"]


def build_ufld_train_step():
    seeded(1810)

    class Cfg:
        height, width = 64, 128
        griding_num = 10
        num_rows = 6
        num_lanes = 2
        use_aux = True
        sim_loss_w = 0.0
        shp_loss_w = 0.0

    m = TrainStep(Cfg)
    img = torch.randn(2, 3, Cfg.height, Cfg.width)
    cls_label = torch.randint(0, Cfg.griding_num + 1, (2, Cfg.num_rows, Cfg.num_lanes))
    seg_label = torch.randint(0, Cfg.num_lanes + 1, (2, Cfg.height // 8, Cfg.width // 8))
    return m, (2, 0, (img, cls_label, seg_label), 10)
