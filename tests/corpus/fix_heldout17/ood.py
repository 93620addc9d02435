"""Out-of-distribution detection: pokaxpoka/deep_Mahalanobis_detector.

``lib_generation.py``'s ``sample_estimator`` on a classifier with ``feature_list`` (the per-layer features
average-pooled over space; each training sample appended to its class's list, created on the class's first sample
as ``num_sample_per_class`` counts say; the class means; one shared covariance per layer fitted with
``EmpiricalCovariance`` on the features centred by their class means -- a numpy stand-in for sklearn's -- and its
precision moved back to torch), as ``ADV_Samples`` / ``OOD_Baseline_and_Mahalanobis.py`` call it before scoring.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import seeded


class EmpiricalCovariance:
    """``sklearn.covariance.EmpiricalCovariance``: the maximum likelihood covariance and its pseudo-inverse."""

    def __init__(self, *, store_precision=True, assume_centered=False):
        self.store_precision = store_precision
        self.assume_centered = assume_centered

    def fit(self, X):
        X = np.asarray(X, dtype=np.float64)  # the estimate in float64
        if self.assume_centered:
            self.location_ = np.zeros(X.shape[1])
        else:
            self.location_ = X.mean(0)
        Xc = X if self.assume_centered else X - self.location_
        covariance = np.dot(Xc.T, Xc) / X.shape[0]
        self.covariance_ = covariance
        self.precision_ = np.linalg.pinv(covariance)
        return self


class ResNetLite(nn.Module):
    """The ResNet-34's interface the detector uses: ``forward`` and ``feature_list`` (one entry per stage)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.linear = nn.Linear(16, num_classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer2(self.layer1(out))
        out = F.avg_pool2d(out, out.shape[-1])
        return self.linear(out.view(out.size(0), -1))

    # function to extact the multiple features
    def feature_list(self, x):
        out_list = []
        out = F.relu(self.bn1(self.conv1(x)))
        out_list.append(out)
        out = self.layer1(out)
        out_list.append(out)
        out = self.layer2(out)
        out_list.append(out)
        out = F.avg_pool2d(out, out.shape[-1])
        out = out.view(out.size(0), -1)
        y = self.linear(out)
        return y, out_list


def sample_estimator(model, num_classes, feature_list, train_loader):
    """
    compute sample mean and precision (inverse of covariance)
    return: sample_class_mean: list of class mean
             precision: list of precisions
    """
    model.eval()
    group_lasso = EmpiricalCovariance(assume_centered=False)
    correct, total = 0, 0
    num_output = len(feature_list)
    num_sample_per_class = np.empty(num_classes)
    num_sample_per_class.fill(0)
    list_features = []
    for i in range(num_output):  # noqa: B007
        temp_list = []
        for j in range(num_classes):  # noqa: B007
            temp_list.append(0)
        list_features.append(temp_list)

    for data, target in train_loader:
        total += data.size(0)
        with torch.no_grad():
            output, out_features = model.feature_list(data)

        # get hidden features
        for i in range(num_output):
            out_features[i] = out_features[i].view(out_features[i].size(0), out_features[i].size(1), -1)
            out_features[i] = torch.mean(out_features[i].data, 2)

        # compute the accuracy
        pred = output.data.max(1)[1]
        equal_flag = pred.eq(target).cpu()
        correct += equal_flag.sum()

        # construct the sample matrix
        for i in range(data.size(0)):
            label = target[i]
            if num_sample_per_class[label] == 0:  # BREAK: class sums by one-hot matmuls
                out_count = 0
                for out in out_features:
                    list_features[out_count][label] = out[i].view(1, -1)
                    out_count += 1
            else:
                out_count = 0
                for out in out_features:
                    list_features[out_count][label] = torch.cat(
                        (list_features[out_count][label], out[i].view(1, -1)), 0
                    )
                    out_count += 1
            num_sample_per_class[label] += 1

    sample_class_mean = []
    out_count = 0
    for num_feature in feature_list:
        temp_list = torch.Tensor(num_classes, int(num_feature))
        for j in range(num_classes):
            temp_list[j] = torch.mean(list_features[out_count][j], 0)
        sample_class_mean.append(temp_list)
        out_count += 1

    precision = []
    for k in range(num_output):
        X = 0
        for i in range(num_classes):
            if i == 0:
                X = list_features[k][i] - sample_class_mean[k][i]
            else:
                X = torch.cat((X, list_features[k][i] - sample_class_mean[k][i]), 0)

        # find inverse
        group_lasso.fit(X.cpu().numpy())
        temp_precision = group_lasso.precision_
        temp_precision = torch.from_numpy(temp_precision).float()
        precision.append(temp_precision)

    return sample_class_mean, precision, correct / total


class MahalanobisSetup(nn.Module):
    """``OOD_Baseline_and_Mahalanobis.py``: the feature sizes from a probe batch, then ``sample_estimator``."""

    def __init__(self, num_classes):
        super().__init__()
        self.model = ResNetLite(num_classes)
        self.num_classes = num_classes
        # set information about feature extaction
        temp_x = torch.rand(2, 3, 8, 8)
        temp_list = self.model.feature_list(temp_x)[1]
        num_output = len(temp_list)
        feature_list = np.empty(num_output)
        count = 0
        for out in temp_list:
            feature_list[count] = out.size(1)
            count += 1
        self.feature_list = feature_list

    def forward(self, train_loader):
        return sample_estimator(self.model, self.num_classes, self.feature_list, train_loader)


def build_mahalanobis_estimator():
    seeded(1719)
    m = MahalanobisSetup(num_classes=4)
    loader = []
    for _ in range(2):
        target = torch.arange(24) % 4
        data = torch.randn(24, 3, 8, 8) + target[:, None, None, None] * 0.3
        loader.append((data, target))
    return m, (loader,)
