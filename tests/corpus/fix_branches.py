"""Programs that leave early or update their state under a test on a tensor, in the shapes real
repositories write them, for ``dynscope.fix``: a masked mean that returns zeros when the mask
keeps nothing, a loss that skips a step whose value is not finite, a warm-up counter kept as a
buffer, a best-loss tracker; and two that must keep their branch (the early value has another
shape; the count is a Python number the program reads as one).

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class MaskedPool(nn.Module):
    """Mean of the projected frames a voice detector keeps; zeros for a silent clip."""

    def __init__(self, dim: int = 8, out: int = 5) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, out)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(frames))
        voiced = frames.pow(2).mean(-1) > 0.8
        w = voiced.to(h.dtype).unsqueeze(-1)
        if voiced.sum() == 0:  # SITE: early return to torch.where
            return h.sum(0) * 0.0
        total = (h * w).sum(0)
        return total / voiced.sum()


def masked_pool() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(700)
    return MaskedPool(), (_x(12, 8, seed=1),)


class SkipNonFinite(nn.Module):
    """A regression step that gives a zero loss (and the prediction) when the loss is not finite."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 10), nn.ReLU(), nn.Linear(10, 1))
        self.weight_decay = 1e-3

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pred = self.net(x).squeeze(-1)
        loss = F.mse_loss(pred, y)
        if not torch.isfinite(loss):  # SITE: early return to torch.where
            return pred, loss * 0.0
        penalty = sum(p.pow(2).sum() for p in self.net.parameters())
        loss = loss + self.weight_decay * penalty
        return pred, loss


def skip_non_finite() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(701)
    return SkipNonFinite(), (_x(9, 6, seed=2), _x(9, seed=3))


class WarmupCounter(nn.Module):
    """A residual branch faded in over the first steps, counted in a buffer that stops at the end."""

    def __init__(self, dim: int = 8, warmup: int = 5) -> None:
        super().__init__()
        self.body, self.branch = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.warmup = warmup
        self.register_buffer("step", torch.tensor(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fade = (self.step.float() / self.warmup).clamp(max=1.0)
        out = self.body(x) + fade * self.branch(x)
        if self.step < self.warmup:  # SITE: state update to torch.where
            self.step += 1
        return out


def warmup_counter() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(702)
    return WarmupCounter(), (_x(4, 8, seed=4),)


class BestLoss(nn.Module):
    """A model that keeps its best loss so far and the number of steps that improved it (buffers)."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.net = nn.Linear(dim, 1)
        self.register_buffer("best", torch.tensor(float("inf")))
        self.register_buffer("improved", torch.tensor(0))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.l1_loss(self.net(x).squeeze(-1), y)
        if loss < self.best:  # SITE: state update to torch.where
            self.best = loss.detach()
            self.improved += 1
        return loss


def best_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(703)
    return BestLoss(), (_x(7, 6, seed=5), _x(7, seed=6))


class GatedKeypoints(nn.Module):
    """Keypoints from heatmaps by soft-argmax; a keypoint whose peak confidence is under the gate
    is marked missing (-1), row by row over the confidences read back as numbers."""

    def __init__(self, joints: int = 5, gate: float = 0.5) -> None:
        super().__init__()
        self.head = nn.Conv2d(4, joints, 3, padding=1)
        self.gate = gate

    def forward(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        heat = self.head(feats[None])[0]
        flat = heat.flatten(1)
        conf = torch.sigmoid(flat.max(1).values)
        prob = flat.softmax(1)
        pos = torch.arange(flat.shape[1], dtype=flat.dtype)
        coords = torch.stack([(prob * (pos % heat.shape[2])).sum(1), (prob * (pos // heat.shape[2])).sum(1)], 1)
        for j, c in enumerate(conf.tolist()):  # SITE: per-element if to torch.where
            if c < self.gate:
                coords[j] = -1.0
        return coords, conf


def gated_keypoints() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(706)
    return GatedKeypoints(), (_x(4, 6, 6, seed=9),)


class ClippedCritic(nn.Module):
    """A WGAN critic whose weights are clipped every few calls, counted in a buffer."""

    def __init__(self, dim: int = 6, c: float = 0.1, every: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
        self.c, self.every = c, every
        self.register_buffer("calls", torch.tensor(6))

    def forward(self, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        if self.calls.item() % self.every == 0:  # SITE: state update to torch.where
            for p in self.net.parameters():
                p.data.clamp_(-self.c, self.c)
        self.calls += 1
        return self.net(fake).mean() - self.net(real).mean()


def clipped_critic() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(707)
    return ClippedCritic(), (_x(6, 6, seed=10) + 1, _x(6, 6, seed=11))


class BinnedCalibration(nn.Module):
    """Reliability statistics of a click model: per confidence bin, the click rate and the mean
    score of the rows in it, left at zero for an empty bin."""

    def __init__(self, dim: int = 5, bins: int = 6) -> None:
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.bins = bins

    def forward(self, x: torch.Tensor, clicks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.sigmoid(self.score(x)).squeeze(-1)
        which = (p.detach() * self.bins).long().clamp(max=self.bins - 1)
        rate, mean = p.new_zeros(self.bins), p.new_zeros(self.bins)
        for b in range(self.bins):
            inside = which == b
            if inside.any():  # SITE: state update to torch.where
                rate[b] = clicks[inside].mean()
                mean[b] = p[inside].mean()
        return rate, (mean - rate).abs()


def binned_calibration() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(708)
    return BinnedCalibration(), (_x(30, 5, seed=12) * 2, (_x(30, seed=13) > 0).float())


class LossScaler(nn.Module):
    """A dynamic loss scale kept in buffers, as mixed-precision training keeps it: doubled every
    few finite steps, halved (and the count reset) on a step whose loss is not finite."""

    def __init__(self, dim: int = 6, every: int = 2) -> None:
        super().__init__()
        self.net = nn.Linear(dim, 3)
        self.every = every
        self.register_buffer("scale", torch.tensor(1024.0))
        self.register_buffer("good", torch.tensor(1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = F.cross_entropy(self.net(x), y)
        if torch.isfinite(loss):  # SITE: state update to torch.where
            self.good += 1
            if self.good % self.every == 0:  # SITE: state update to torch.where
                self.scale *= 2.0
        else:
            self.scale /= 2.0
            self.good.zero_()
        return loss * self.scale, loss.detach()


def loss_scaler() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(709)
    return LossScaler(), (_x(8, 6, seed=14), torch.arange(8) % 3)


class SchedulerStep(nn.Module):
    """A DDIM step (eta 0) of a diffusion sampler: the schedule indexed by the timestep tensor, the
    previous step's alpha 1 before the first."""

    def __init__(self, steps: int = 20, ratio: int = 4) -> None:
        super().__init__()
        self.eps = nn.Sequential(nn.Linear(6, 12), nn.SiLU(), nn.Linear(12, 6))
        self.register_buffer("alphas", torch.cumprod(1.0 - torch.linspace(1e-4, 0.02, steps), 0))
        self.register_buffer("final", torch.tensor(1.0))
        self.ratio = ratio

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        eps = self.eps(sample)
        alpha = self.alphas[timestep]  # an index by an input tensor: traced as a gather, no break
        prev = timestep - self.ratio
        alpha_prev = self.alphas[prev] if prev >= 0 else self.final  # SITE: conditional expression to torch.where
        x0 = (sample - (1 - alpha) ** 0.5 * eps) / alpha ** 0.5
        return alpha_prev ** 0.5 * x0 + (1 - alpha_prev) ** 0.5 * eps


def scheduler_step() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(710)
    return SchedulerStep(), (_x(3, 6, seed=15), torch.tensor(9))


class KeyFrames(nn.Module):
    """Key frames of padded clips: the frames that move most, padding excluded by setting its
    scores to -inf row by row over the lengths read back."""

    def __init__(self, dim: int = 4, k: int = 2) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 3)
        self.k = k

    def forward(self, frames: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        motion = (frames[:, 1:] - frames[:, :-1]).abs().mean(-1)
        score = F.pad(motion, (1, 0), value=0.0)
        for b, n in enumerate(lengths.tolist()):  # SITE: length mask instead of per-row slices
            score[b, n:] = float("-inf")
        idx = score.topk(self.k, dim=1).indices
        picked = frames[torch.arange(frames.shape[0])[:, None], idx]
        return self.proj(picked).mean(1)


def key_frames() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(711)
    return KeyFrames(), (_x(3, 7, 4, seed=16), torch.tensor([7, 4, 5]))


class BinnedECE(nn.Module):
    """Expected calibration error over confidence bins, as temperature-scaling code writes it:
    bin edges read back as numbers, a bin counted only when it holds predictions."""

    def __init__(self, bins: int = 5) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(1.5))
        edges = torch.linspace(0, 1, bins + 1)
        self.register_buffer("lowers", edges[:-1])
        self.register_buffer("uppers", edges[1:])

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        conf, pred = torch.softmax(logits / self.temperature, 1).max(1)
        right = pred.eq(labels)
        ece = torch.zeros(1)
        for lo, hi in zip(self.lowers, self.uppers, strict=True):
            in_bin = conf.gt(lo.item()) * conf.le(hi.item())  # SITE: keep it a tensor
            share = in_bin.float().mean()
            if share.item() > 0:
                gap = conf[in_bin].mean() - right[in_bin].float().mean()
                ece += gap.abs() * share
        return ece


def binned_ece() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(712)
    labels = torch.arange(12) % 3
    return BinnedECE(), (_x(12, 3, seed=17) * 2 + 2 * F.one_hot(labels, 3), labels)


class ShortcutCrop(nn.Module):
    """A crop that returns the first half of the features when the input is bright: the early
    value has another shape, so no torch.where can pick between the two."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if x.mean() > 0:  # SITE: none
            return h[:, : h.shape[1] // 2]
        h = torch.relu(h)
        return h


def shortcut_crop() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(704)
    return ShortcutCrop(), (_x(3, 8, seed=7).abs(),)


class CountedCalls(nn.Module):
    """A model that counts in a Python int the calls whose loss was high, and scales by it: the
    count must stay a number (a tensor would change what the program keeps)."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.net = nn.Linear(dim, 1)
        self.high = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.net(x).squeeze(-1)
        if out.abs().mean() > 0.1:  # SITE: none
            self.high += 1
        return out


def counted_calls() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(705)
    return CountedCalls(), (_x(5, 6, seed=8),)


class CountedPool(nn.Module):
    """Mean of the frames over a threshold, the count read with int() as counting code writes it
    (in our words); zeros where none is."""

    def __init__(self, dim: int = 8, out: int = 5) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, out)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(frames))
        kept = frames.abs().mean(-1) > 0.9
        if int(kept.sum()) == 0:  # SITE: early return to torch.where
            return h.sum(0) * 0.0
        return (h * kept.unsqueeze(-1)).sum(0) / kept.sum()


def counted_pool() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(706)
    return CountedPool(), (_x(12, 8, seed=9),)


class CalibratedScale(nn.Module):
    """A learned output scale set from the first training batch (a quantizer's step size, in
    our words): ``if self.training and self.calibrated == 0`` runs the set-up once, the flag a
    buffer. Python's part of the test stays an ``if``; the buffer's part picks the updates."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.ones(1))
        self.register_buffer("calibrated", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if self.training and self.calibrated == 0:  # SITE: state update to torch.where
            self.scale.data.copy_(h.abs().mean() / 3)
            self.calibrated.fill_(1)
        return h / self.scale


def calibrated_scale() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(707)
    return CalibratedScale(), (_x(4, 6, seed=10),)


class ModeGatedHead(nn.Module):
    """A head whose boost applies only in one mode of its config and only when the batch's mean
    is positive (in our words): ``if self.cfg.mode is Mode.TRAIN and y.mean() > 0: ... else: ...``.
    Python's part of the test stays an ``if``, the else kept for it; the tensor's part a where."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.lin = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.cfg.mode is Mode.TRAIN and y.mean() > 0:  # SITE: branch to torch.where
            y = y * self.cfg.boost
        else:
            y = y - 1
        return y


class CornerCaseLoss(nn.Module):
    """A matching loss's corner case (in our words, after LoFTR's): with no positive at all, one
    is made up, its weight zeroed when weights are given, and the positive term's weight, a local
    name, set to zero. Python's ``weight is not None`` stays an ``if`` around its update."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.pos_w = 1.0

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        conf = torch.sigmoid(self.lin(x))
        pos = conf > 0.97
        pos_w = self.pos_w
        if not pos.any():  # SITE: state update to torch.where
            pos[0, 0] = True
            if weight is not None:
                weight[0, 0] = 0.0
            pos_w = 0.0
        w = weight if weight is not None else torch.ones_like(conf)
        return pos_w * (conf * pos * w).sum() / pos.sum()


def corner_case_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(709)
    return CornerCaseLoss(), (_x(4, 6, seed=12), torch.ones(4, 6))


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@dataclasses.dataclass(frozen=True)
class HeadConfig:
    mode: Mode = Mode.TRAIN
    boost: float = 2.0


def mode_gated_head() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(708)
    return ModeGatedHead(HeadConfig()), (_x(4, 6, seed=11),)


PROGRAMS: dict[str, Any] = {
    "masked_pool": masked_pool,
    "skip_non_finite": skip_non_finite,
    "warmup_counter": warmup_counter,
    "best_loss": best_loss,
    "gated_keypoints": gated_keypoints,
    "clipped_critic": clipped_critic,
    "binned_calibration": binned_calibration,
    "loss_scaler": loss_scaler,
    "scheduler_step": scheduler_step,
    "key_frames": key_frames,
    "binned_ece": binned_ece,
    "shortcut_crop": shortcut_crop,
    "counted_calls": counted_calls,
    "counted_pool": counted_pool,
    "calibrated_scale": calibrated_scale,
    "mode_gated_head": mode_gated_head,
    "corner_case_loss": corner_case_loss,
}
