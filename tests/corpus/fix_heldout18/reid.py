"""Person re-identification: michuanhaohao/reid-strong-baseline.

``modeling/baseline.py``'s ``Baseline`` with the BNNeck (a small convolutional trunk standing in for the ResNet-50
``base``), ``layers/triplet_loss.py``'s ``TripletLoss`` with ``hard_example_mining`` over a PK batch,
``layers/center_loss.py``'s ``CenterLoss`` and the label-smoothed cross-entropy, combined by ``layers/__init__.py``'s
``make_loss_with_center`` for ``triplet_center`` -- under the loss half of ``engine/trainer.py``'s
``create_supervised_trainer_with_center`` update (the batch accuracy included); and ``utils/reid_metric.py``'s
``R1_mAP`` (features gathered by the evaluator's ``_inference``, normalised, the query / gallery split, the distance
matrix moved to numpy) with ``data/datasets/eval_reid.py``'s ``eval_func`` (same-camera matches removed per query,
the CMC curve and the average precision).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from .helpers import CrossEntropyLabelSmooth, seeded

# ------------------------------------------------------------------ layers/triplet_loss.py


def normalize(x, axis=-1):
    """Normalizing to unit length along the specified dimension.
    Args:
      x: pytorch Variable
    Returns:
      x: pytorch Variable, same shape as input
    """
    x = 1.0 * x / (torch.norm(x, 2, axis, keepdim=True).expand_as(x) + 1e-12)
    return x


def euclidean_dist(x, y):
    """
    Args:
      x: pytorch Variable, with shape [m, d]
      y: pytorch Variable, with shape [n, d]
    Returns:
      dist: pytorch Variable, with shape [m, n]
    """
    m, n = x.size(0), y.size(0)
    xx = torch.pow(x, 2).sum(1, keepdim=True).expand(m, n)
    yy = torch.pow(y, 2).sum(1, keepdim=True).expand(n, m).t()
    dist = xx + yy
    dist.addmm_(x, y.t(), beta=1, alpha=-2)
    dist = dist.clamp(min=1e-12).sqrt()  # for numerical stability
    return dist


def hard_example_mining(dist_mat, labels, return_inds=False):
    """For each anchor, find the hardest positive and negative sample.
    Args:
      dist_mat: pytorch Variable, pair wise distance between samples, shape [N, N]
      labels: pytorch LongTensor, with shape [N]
      return_inds: whether to return the indices. Save time if `False`(?)
    Returns:
      dist_ap: pytorch Variable, distance(anchor, positive); shape [N]
      dist_an: pytorch Variable, distance(anchor, negative); shape [N]
    NOTE: Only consider the case in which all labels have same num of samples,
      thus we can cope with all anchors in parallel.
    """

    assert len(dist_mat.size()) == 2
    assert dist_mat.size(0) == dist_mat.size(1)
    N = dist_mat.size(0)

    # shape [N, N]
    is_pos = labels.expand(N, N).eq(labels.expand(N, N).t())
    is_neg = labels.expand(N, N).ne(labels.expand(N, N).t())

    # `dist_ap` means distance(anchor, positive)
    # both `dist_ap` and `relative_p_inds` with shape [N, 1]
    dist_ap, relative_p_inds = torch.max(
        dist_mat[is_pos].contiguous().view(N, -1),  # BREAK: masked max
        1,
        keepdim=True,
    )
    # `dist_an` means distance(anchor, negative)
    # both `dist_an` and `relative_n_inds` with shape [N, 1]
    dist_an, relative_n_inds = torch.min(
        dist_mat[is_neg].contiguous().view(N, -1),  # BREAK: masked min
        1,
        keepdim=True,
    )
    # shape [N]
    dist_ap = dist_ap.squeeze(1)
    dist_an = dist_an.squeeze(1)

    if return_inds:
        raise NotImplementedError("return_inds")

    return dist_ap, dist_an


class TripletLoss:
    """Modified from Tong Xiao's open-reid (https://github.com/Cysu/open-reid).
    Related Triplet Loss theory can be found in paper 'In Defense of the Triplet
    Loss for Person Re-Identification'."""

    def __init__(self, margin=None):
        self.margin = margin
        if margin is not None:
            self.ranking_loss = nn.MarginRankingLoss(margin=margin)
        else:
            self.ranking_loss = nn.SoftMarginLoss()

    def __call__(self, global_feat, labels, normalize_feature=False):
        if normalize_feature:
            global_feat = normalize(global_feat, axis=-1)
        dist_mat = euclidean_dist(global_feat, global_feat)
        dist_ap, dist_an = hard_example_mining(dist_mat, labels)
        y = dist_an.new().resize_as_(dist_an).fill_(1)  # BREAK: torch.ones_like
        if self.margin is not None:
            loss = self.ranking_loss(dist_an, dist_ap, y)
        else:
            loss = self.ranking_loss(dist_an - dist_ap, y)
        return loss, dist_ap, dist_an


# ------------------------------------------------------------------ layers/center_loss.py


class CenterLoss(nn.Module):
    """Center loss.

    Reference:
    Wen et al. A Discriminative Feature Learning Approach for Deep Face Recognition. ECCV 2016.

    Args:
        num_classes (int): number of classes.
        feat_dim (int): feature dimension.
    """

    def __init__(self, num_classes=751, feat_dim=2048, use_gpu=True):
        super().__init__()
        self.num_classes = num_classes
        self.feat_dim = feat_dim
        self.use_gpu = use_gpu
        self.centers = nn.Parameter(torch.randn(self.num_classes, self.feat_dim))

    def forward(self, x, labels):
        """
        Args:
            x: feature matrix with shape (batch_size, feat_dim).
            labels: ground truth labels with shape (num_classes).
        """
        assert x.size(0) == labels.size(0), "features.size(0) is not equal to labels.size(0)"

        batch_size = x.size(0)
        distmat = (
            torch.pow(x, 2).sum(dim=1, keepdim=True).expand(batch_size, self.num_classes)
            + torch.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(self.num_classes, batch_size).t()
        )
        distmat.addmm_(x, self.centers.t(), beta=1, alpha=-2)

        classes = torch.arange(self.num_classes).long()
        labels = labels.unsqueeze(1).expand(batch_size, self.num_classes)
        mask = labels.eq(classes.expand(batch_size, self.num_classes))

        dist = distmat * mask.float()
        loss = dist.clamp(min=1e-12, max=1e12).sum() / batch_size
        return loss


# ------------------------------------------------------------------ layers/__init__.py


def make_loss_with_center(cfg, num_classes):  # modified by gu
    feat_dim = cfg.FEAT_DIM
    center_criterion = CenterLoss(num_classes=num_classes, feat_dim=feat_dim, use_gpu=True)  # center loss
    if cfg.METRIC_LOSS_TYPE == "triplet_center":
        triplet = TripletLoss(cfg.MARGIN)  # triplet loss
    else:
        raise NotImplementedError(cfg.METRIC_LOSS_TYPE)

    if cfg.IF_LABELSMOOTH == "on":
        xent = CrossEntropyLabelSmooth(num_classes=num_classes)  # new add by luo
        print("label smooth on, numclasses:", num_classes)

    def loss_func(score, feat, target):
        if cfg.METRIC_LOSS_TYPE == "triplet_center":
            if cfg.IF_LABELSMOOTH == "on":
                return (
                    xent(score, target)
                    + triplet(feat, target)[0]
                    + cfg.CENTER_LOSS_WEIGHT * center_criterion(feat, target)
                )
            else:
                return (
                    nn.functional.cross_entropy(score, target)
                    + triplet(feat, target)[0]
                    + cfg.CENTER_LOSS_WEIGHT * center_criterion(feat, target)
                )
        else:
            raise NotImplementedError(cfg.METRIC_LOSS_TYPE)

    return loss_func, center_criterion


# ------------------------------------------------------------------ modeling/baseline.py


def weights_init_kaiming(m):
    classname = m.__class__.__name__
    if classname.find("Linear") != -1:
        nn.init.kaiming_normal_(m.weight, a=0, mode="fan_out")
        nn.init.constant_(m.bias, 0.0)
    elif classname.find("Conv") != -1:
        nn.init.kaiming_normal_(m.weight, a=0, mode="fan_in")
        if m.bias is not None:
            nn.init.constant_(m.bias, 0.0)
    elif classname.find("BatchNorm") != -1:
        if m.affine:
            nn.init.constant_(m.weight, 1.0)
            nn.init.constant_(m.bias, 0.0)


def weights_init_classifier(m):
    classname = m.__class__.__name__
    if classname.find("Linear") != -1:
        nn.init.normal_(m.weight, std=0.001)
        if m.bias:
            nn.init.constant_(m.bias, 0.0)


class Baseline(nn.Module):
    in_planes = 32

    def __init__(self, num_classes, neck, neck_feat):
        super().__init__()
        self.base = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.Conv2d(16, self.in_planes, 3, stride=2, padding=1),
            nn.BatchNorm2d(self.in_planes),
            nn.ReLU(inplace=True),
        )
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.num_classes = num_classes
        self.neck = neck
        self.neck_feat = neck_feat

        if self.neck == "no":
            self.classifier = nn.Linear(self.in_planes, self.num_classes)
        elif self.neck == "bnneck":
            self.bottleneck = nn.BatchNorm1d(self.in_planes)
            self.bottleneck.bias.requires_grad_(False)  # no shift
            self.classifier = nn.Linear(self.in_planes, self.num_classes, bias=False)

            self.bottleneck.apply(weights_init_kaiming)
            self.classifier.apply(weights_init_classifier)

    def forward(self, x):
        global_feat = self.gap(self.base(x))  # (b, 2048, 1, 1)
        global_feat = global_feat.view(global_feat.shape[0], -1)  # flatten to (bs, 2048)

        if self.neck == "no":
            feat = global_feat
        elif self.neck == "bnneck":
            feat = self.bottleneck(global_feat)  # normalize for angular softmax

        if self.training:
            cls_score = self.classifier(feat)
            return cls_score, global_feat  # global feature for triplet loss
        else:
            if self.neck_feat == "after":
                # print("Test with feature after BN")
                return feat
            else:
                # print("Test with feature before BN")
                return global_feat


class Cfg:
    FEAT_DIM = 32
    METRIC_LOSS_TYPE = "triplet_center"
    MARGIN = 0.3
    IF_LABELSMOOTH = "on"
    CENTER_LOSS_WEIGHT = 0.0005
    NECK = "bnneck"
    TEST_NECK_FEAT = "after"
    TEST_FEAT_NORM = "yes"


# ------------------------------------------------------------------ engine/trainer.py


class TrainerWithCenterUpdate(nn.Module):
    """The loss half of ``create_supervised_trainer_with_center``'s ``_update``."""

    def __init__(self, cfg, num_classes):
        super().__init__()
        self.model = Baseline(num_classes, cfg.NECK, cfg.TEST_NECK_FEAT)
        loss_fn, center_criterion = make_loss_with_center(cfg, num_classes)
        self.loss_fn = loss_fn
        self.center_criterion = center_criterion

    def forward(self, batch):
        model = self.model
        model.train()
        img, target = batch
        score, feat = model(img)
        loss = self.loss_fn(score, feat, target)
        # compute acc
        acc = (score.max(1)[1] == target).float().mean()
        return loss, acc


def build_reid_triplet_center():
    seeded(1811)
    m = TrainerWithCenterUpdate(Cfg, num_classes=6)
    # a PK batch: P = 3 identities, K = 2 images each
    img = torch.randn(6, 3, 32, 16)
    target = torch.tensor([4, 4, 1, 1, 5, 5])
    return m, ((img, target),)


# ------------------------------------------------------------------ data/datasets/eval_reid.py, utils/reid_metric.py


def eval_func(distmat, q_pids, g_pids, q_camids, g_camids, max_rank=50):
    """Evaluation with market1501 metric
    Key: for each query identity, its gallery images from the same camera view are discarded.
    """
    num_q, num_g = distmat.shape
    if num_g < max_rank:
        max_rank = num_g
    indices = np.argsort(distmat, axis=1)
    matches = (g_pids[indices] == q_pids[:, np.newaxis]).astype(np.int32)

    # compute cmc curve for each query
    all_cmc = []
    all_AP = []
    num_valid_q = 0.0  # number of valid query
    for q_idx in range(num_q):
        # get query pid and camid
        q_pid = q_pids[q_idx]
        q_camid = q_camids[q_idx]

        # remove gallery samples that have the same pid and camid with query
        order = indices[q_idx]
        remove = (g_pids[order] == q_pid) & (g_camids[order] == q_camid)
        keep = np.invert(remove)

        # compute cmc curve
        # binary vector, positions with value 1 are correct matches
        orig_cmc = matches[q_idx][keep]  # BREAK: kept entries first, all queries at once
        if not np.any(orig_cmc):
            # this condition is true when query identity does not appear in gallery
            continue

        cmc = orig_cmc.cumsum()
        cmc[cmc > 1] = 1

        all_cmc.append(cmc[:max_rank])
        num_valid_q += 1.0

        # compute average precision
        # reference: https://en.wikipedia.org/wiki/Evaluation_measures_(information_retrieval)#Average_precision
        num_rel = orig_cmc.sum()
        tmp_cmc = orig_cmc.cumsum()
        tmp_cmc = [x / (i + 1.0) for i, x in enumerate(tmp_cmc)]
        tmp_cmc = np.asarray(tmp_cmc) * orig_cmc
        AP = tmp_cmc.sum() / num_rel
        all_AP.append(AP)

    assert num_valid_q > 0, "Error: all query identities do not appear in gallery"

    all_cmc = np.asarray(all_cmc).astype(np.float32)
    all_cmc = all_cmc.sum(0) / num_valid_q
    mAP = np.mean(all_AP)

    return all_cmc, mAP


class R1_mAP:
    def __init__(self, num_query, max_rank=50, feat_norm="yes"):
        super().__init__()
        self.num_query = num_query
        self.max_rank = max_rank
        self.feat_norm = feat_norm

    def reset(self):
        self.feats = []
        self.pids = []
        self.camids = []

    def update(self, output):
        feat, pid, camid = output
        self.feats.append(feat)
        self.pids.extend(np.asarray(pid))
        self.camids.extend(np.asarray(camid))

    def compute(self):
        feats = torch.cat(self.feats, dim=0)
        if self.feat_norm == "yes":
            print("The test feature is normalized")  # BREAK must-not: the message is printed
            feats = torch.nn.functional.normalize(feats, dim=1, p=2)
        # query
        qf = feats[: self.num_query]
        q_pids = np.asarray(self.pids[: self.num_query])
        q_camids = np.asarray(self.camids[: self.num_query])
        # gallery
        gf = feats[self.num_query :]
        g_pids = np.asarray(self.pids[self.num_query :])
        g_camids = np.asarray(self.camids[self.num_query :])
        m, n = qf.shape[0], gf.shape[0]
        distmat = (
            torch.pow(qf, 2).sum(dim=1, keepdim=True).expand(m, n)
            + torch.pow(gf, 2).sum(dim=1, keepdim=True).expand(n, m).t()
        )
        distmat.addmm_(qf, gf.t(), beta=1, alpha=-2)
        distmat = distmat.cpu().numpy()
        cmc, mAP = eval_func(distmat, q_pids, g_pids, q_camids, g_camids)

        return cmc, mAP


class Evaluator(nn.Module):
    """``create_supervised_evaluator``'s ``_inference`` over the validation loader, then ``R1_mAP.compute``."""

    def __init__(self, cfg, num_classes, num_query):
        super().__init__()
        self.model = Baseline(num_classes, cfg.NECK, cfg.TEST_NECK_FEAT)
        self.metric = R1_mAP(num_query, max_rank=50, feat_norm=cfg.TEST_FEAT_NORM)

    def _inference(self, batch):
        self.model.eval()
        with torch.no_grad():
            data, pids, camids = batch
            feat = self.model(data)
            return feat, pids, camids

    def forward(self, val_loader):
        self.metric.reset()
        for batch in val_loader:
            self.metric.update(self._inference(batch))
        return self.metric.compute()


def build_reid_r1_map():
    seeded(1812)
    m = Evaluator(Cfg, num_classes=6, num_query=4)
    # query: identities 0..3 from camera 0; gallery: the same identities (and two distractors) from cameras 1, 2
    pids = (0, 1, 2, 3, 0, 1, 2, 3, 0, 2, 7, 8)
    camids = (0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 1, 2)
    imgs = torch.randn(len(pids), 3, 32, 16)
    val_loader = [(imgs[:6], pids[:6], camids[:6]), (imgs[6:], pids[6:], camids[6:])]
    return m, (val_loader,)
