"""Training-loop code: an EMA wrapper that clones its model on the first forward, a gradient-accumulation
step that skips micro-batches with a non-finite loss, and a segmentation CE + Dice loss with an ignore label."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- lazily created EMA model


class EMAWrapper(nn.Module):
    """Returns the online model's output and the EMA model's; the EMA copy is made on the first call."""

    def __init__(self, net: nn.Module, decay: float = 0.9) -> None:
        super().__init__()
        self.net = net
        self.decay = decay
        self.ema = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.ema is None:
            self.ema = copy.deepcopy(self.net)  # BREAK: make the copy in __init__ (nothing changes the weights before the first forward)
            self.ema.requires_grad_(False)
        out = self.net(x)
        with torch.no_grad():
            for p_ema, p in zip(self.ema.parameters(), self.net.parameters(), strict=True):
                p_ema.mul_(self.decay).add_(p, alpha=1 - self.decay)
        return out, self.ema(x)


def build_ema_lazy() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(160)
    net = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))
    return EMAWrapper(net), torch.randn(5, 6, generator=seeded(161))


# --------------------------------------------------------------------------- skip non-finite micro-batches


class AccumulationStep(nn.Module):
    """The loss of one optimiser step over gradient-accumulation micro-batches; a micro-batch whose loss is
    not finite (a corrupt label) is skipped and the mean taken over the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        total = xs.new_zeros(())
        n_ok = 0
        for x, y in zip(xs, ys, strict=True):
            loss = F.mse_loss(self.net(x).squeeze(-1), y)
            if not torch.isfinite(loss):  # BREAK: decide ok = isfinite(loss) as a tensor, replace a bad micro-batch's targets by the detached predictions (so no inf/NaN reaches backward), add torch.where(ok, loss, 0) and count ok as a tensor
                continue
            total = total + loss
            n_ok += 1
        return total / max(n_ok, 1)


def build_skip_nonfinite() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(162)
    model = AccumulationStep()
    g = seeded(163)
    xs = torch.randn(4, 5, 6, generator=g)
    ys = torch.randn(4, 5, generator=g)
    ys[2, 3] = float("inf")
    return model, (xs, ys)


# --------------------------------------------------------------------------- CE + Dice with an ignore label


class SegmentationLoss(nn.Module):
    """A tiny conv segmenter and its loss: cross-entropy plus soft Dice over the labelled pixels only."""

    def __init__(self, n_classes: int = 4, ignore_index: int = 255) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, n_classes, 1))
        self.n_classes = n_classes
        self.ignore_index = ignore_index

    def forward(self, images: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = self.net(images)
        valid = target != self.ignore_index
        flat_logits = logits.permute(0, 2, 3, 1)[valid]  # BREAK: keep all pixels: cross_entropy(..., ignore_index=...) and Dice sums weighted by the valid mask
        flat_target = target[valid]  # BREAK: same rewrite (a zeroed placeholder label where the pixel is ignored)
        ce = F.cross_entropy(flat_logits, flat_target)
        probs = flat_logits.softmax(-1)
        onehot = F.one_hot(flat_target, self.n_classes).float()
        inter = (probs * onehot).sum(0)
        card = probs.sum(0) + onehot.sum(0)
        dice = 1.0 - ((2.0 * inter + 1.0) / (card + 1.0)).mean()
        return ce + dice, {"ce": ce.detach(), "dice": dice.detach()}


def build_dice_ignore() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(164)
    model = SegmentationLoss()
    g = seeded(165)
    images = torch.randn(2, 3, 8, 8, generator=g)
    target = torch.randint(0, 4, (2, 8, 8), generator=g)
    target[:, :2, :] = 255  # unlabelled border
    target[1, 5, 5:] = 255
    return model, (images, target)
