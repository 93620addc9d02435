"""Programs whose breaks are checks on a tensor's value (a warning about the input, a loss
that must be finite), a branch that makes a temporary for itself, and a size read back as
Python numbers only to clamp with, for ``dynscope.fix`` (fix/checks.py, fix/branches.py).

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

log = logging.getLogger("fix_checks")


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class TokenClassifier(nn.Module):
    """An encoder head that warns, as tokenizer-side checks do, when a batch looks mis-padded."""

    def __init__(self, vocab: int = 16, dim: int = 8, labels: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, labels)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if (mask[:, 0] == 0).any():  # SITE: guard a check that reports
            warnings.warn("the batch is left-padded: the first position is padding in some rows", stacklevel=2)
        h = self.embed(ids) * mask[..., None]
        return self.head(h.sum(1) / mask.sum(1, keepdim=True))


def token_classifier() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    ids = torch.tensor([[3, 5, 7, 0], [2, 4, 0, 0]])
    return TokenClassifier(), (ids, (ids != 0).long())


class CheckedRegression(nn.Module):
    """A loss checked for NaN before it is returned, as training loops guard against divergence."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 12), nn.Tanh(), nn.Linear(12, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.smooth_l1_loss(self.net(x), y)
        if torch.isnan(loss):  # SITE: check as an assert
            raise RuntimeError("the loss is NaN: lower the learning rate")
        return loss


def checked_regression() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    return CheckedRegression(), (_x(5, 6), _x(5, 1, seed=1))


class BiasedAttention(nn.Module):
    """Attention that builds its additive padding bias only when some key is padding."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if (key_mask == 0).any():  # SITE: branch to torch.where
            bias = (1.0 - key_mask[:, None, :].float()) * -1e4
            scores = scores + bias
        return scores.softmax(-1) @ v


def biased_attention() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(2)
    return BiasedAttention(), (_x(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))


def normalise_boxes(boxes: torch.Tensor, image_hw: torch.Tensor) -> torch.Tensor:
    """Boxes (x1, y1, x2, y2) in pixels to fractions of an image whose size comes as a tensor."""
    h, w = image_hw.tolist()  # SITE: keep it a tensor
    x = boxes[:, 0::2] / w
    y = boxes[:, 1::2] / h
    return torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], -1)


def normalised() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return normalise_boxes, (_x(6, 4).abs() * 10, torch.tensor([12.0, 16.0]))


def crop_boxes(boxes: torch.Tensor, image_hw: torch.Tensor) -> torch.Tensor:
    """The same size clamps the boxes: ``clamp(min=0, max=w)`` mixes a number and a tensor,
    which reads the tensor back as a number again (the break moves; not verified)."""
    h, w = image_hw.tolist()  # SITE: none
    x = boxes[:, 0::2].clamp(min=0, max=w)
    y = boxes[:, 1::2].clamp(min=0, max=h)
    return torch.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], -1)


def cropped() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return crop_boxes, (_x(6, 4) * 20, torch.tensor([12.0, 16.0]))


class LoggedShift(nn.Module):
    """A check whose body logs a value computed from the tensor: still only a report."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        drift = (x.mean(0) - 1).abs().max()
        if drift > 0.5:  # SITE: guard a check that reports
            log.info("input drift %.3f", drift)  # SITE: guard side effect
        return x * self.scale


def logged_shift() -> tuple[nn.Module, torch.Tensor]:
    return LoggedShift(), _x(3, 4)


class RaisingWithValues(nn.Module):
    """A check whose message shows the tensor: the assert names it in braces instead. It raises
    OverflowError, which the check in the graph cannot (it raises RuntimeError): proposed, the
    exception named, since no run on passing data shows whether a caller catches it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = x.sum()
        if total > 1e6:  # SITE: none
            raise OverflowError(f"sum overflowed: {total}")
        return x * 2


def raising_with_values() -> tuple[nn.Module, torch.Tensor]:
    return RaisingWithValues(), _x(4)


class RaisingWithText(nn.Module):
    """A check whose message is built by a call: no assert carries it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = x.sum()
        if total > 1e6:  # SITE: none
            raise OverflowError("sum overflowed: " + str(total))
        return x * 2


def raising_with_text() -> tuple[nn.Module, torch.Tensor]:
    return RaisingWithText(), _x(4)


#: Every program of this corpus: name -> builder.

class OverflowReport(nn.Module):
    """A layer that reads its largest activation back and prints when it overflows: keeping the
    number a tensor moves the break to the check, whose guard would silence a print the run
    never reached (no patch may be verified)."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        peak = h.abs().max().item()  # SITE: none
        if peak > 1e6:  # SITE: none
            print("activations overflowed:", peak)
        return h * 2


def overflow_report() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(2)
    return OverflowReport(), _x(3, 4)

PROGRAMS = {
    "token_classifier": token_classifier,
    "checked_regression": checked_regression,
    "biased_attention": biased_attention,
    "normalised": normalised,
    "cropped": cropped,
    "logged_shift": logged_shift,
    "raising_with_values": raising_with_values,
    "raising_with_text": raising_with_text,
    "overflow_report": overflow_report,
}
