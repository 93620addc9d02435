"""Programs with graph breaks in the shapes real models have them, for ``dynscope.fix``.

Each program is a (model, inputs) builder; each break site carries a ``# SITE: <rewrite>``
comment naming the rewrite expected to remove it, or ``# SITE: none`` where no patch should
be verified (a rewrite that would change outputs, a value used as a Python int). The file
imports only torch, numpy and the standard library: ``fix`` imports patched copies of it
from hidden files beside it.
"""

from __future__ import annotations

import copy
import logging
import math
import time
import warnings
from typing import Any

import torch
from torch import nn

log = logging.getLogger("dynscope.fix_corpus")
log.addHandler(logging.NullHandler())
log.propagate = False


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- attention -----------------------------------------------------------------------------------


class MaskedAttention(nn.Module):
    """Self-attention with a padding mask, debug logging and a data-dependent rescale."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        print(f"attention scores {tuple(scores.shape)}")  # SITE: guard side effect
        if mask.any():  # SITE: branch to torch.where
            scores = scores.masked_fill(~mask[:, None, :], -1e4)
        if scores.max() > 50:  # SITE: branch to torch.where
            scores = scores / 2
        attn = scores.softmax(-1)
        masked_total = attn[attn > 0.5].sum()  # SITE: mask instead of select
        log.info("peaked weights %s", masked_total)  # SITE: guard side effect
        return self.out(attn @ v) + masked_total


def attention() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    return MaskedAttention(), (_x(2, 6, 16), mask)


# -- routing (mixture of experts) ----------------------------------------------------------------


class Router(nn.Module):
    """Top-1 routing with a capacity check and load statistics."""

    def __init__(self, dim: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = self.gate(x).softmax(-1)
        load = probs.mean(0)
        if load.max().item() > 0.9:  # SITE: branch to torch.where
            probs = probs * 0.5
        busiest = probs.sum(0).argmax().item()  # SITE: none
        out = self.experts[busiest](x) * probs.max(-1, keepdim=True).values
        warnings.warn(f"expert {busiest} carried the batch", stacklevel=1)  # SITE: guard side effect
        balance = sum(load.tolist())  # SITE: keep it a tensor
        return out * balance


def routing() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Router(), _x(8, 16)


# -- decoding ------------------------------------------------------------------------------------


class Decoder(nn.Module):
    """One greedy decode step with temperature, a stop check and a timer."""

    def __init__(self, vocab: int = 32, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()  # SITE: guard side effect
        h = self.embed(tokens).mean(1)
        logits = self.head(h)
        temperature = logits.abs().mean().item()  # SITE: keep it a tensor
        logits = logits / (temperature + 1e-3)
        if (logits.argmax(-1) == eos).all():  # SITE: branch to torch.where
            out = logits * 0
        else:
            out = logits.log_softmax(-1)
        elapsed = time.perf_counter() - started  # SITE: guard side effect
        log.info("decode step %.4f s", elapsed)  # SITE: guard side effect
        return out


def decoding() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return Decoder(), (torch.randint(0, 32, (2, 5), generator=torch.Generator().manual_seed(0)), torch.tensor(3))


class KVStep(nn.Module):
    """A KV-cache step: append, a length check, and logging of the cache size."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        new = self.proj(x)
        cache = torch.cat([cache, new[:, None]], dim=1)
        print("cache length", cache.shape[1])  # SITE: guard side effect
        norm = cache.norm().item()  # SITE: keep it a tensor
        if norm > 100:  # SITE: branch to torch.where
            cache = cache / norm
        weights = (cache @ new[:, :, None]).squeeze(-1).softmax(-1)
        return (weights[:, :, None] * cache).sum(1)


def kv_step() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return KVStep(), (_x(2, 16), _x(2, 3, 16, seed=1))


# -- logging in blocks ---------------------------------------------------------------------------


class LoggedBlock(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.fc(x))
        log.debug("block out %s", y.shape)  # SITE: guard side effect
        if y.mean() > 0:  # SITE: branch to torch.where
            y = y + x
        else:
            y = y - x
        return y


class LoggedStack(nn.Module):
    def __init__(self, dim: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(LoggedBlock(dim) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print("stack input", x.shape)  # SITE: guard side effect
        for block in self.blocks:
            x = block(x)
        spread = x.std().item()  # SITE: keep it a tensor
        return x / spread


def logged_stack() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return LoggedStack(), _x(4, 16)


# -- pre-processing ------------------------------------------------------------------------------


def normalise_features(x: torch.Tensor) -> torch.Tensor:
    """Feature scaling as pre-processing code writes it: Python numbers and lists."""
    top = max(x.abs().tolist()[0])  # SITE: none
    total = sum(x.flatten().tolist())  # SITE: keep it a tensor
    peak = x.max().item()  # SITE: keep it a tensor
    lowest = min(x.flatten().tolist())  # SITE: keep it a tensor
    print("range", lowest, peak)  # SITE: guard side effect
    return (x - total / x.numel()) / (peak - lowest + top)


def preprocessing() -> tuple[Any, torch.Tensor]:
    return normalise_features, _x(3, 8)


def clipped_scores(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Scores with a clip on a tensor threshold and a masked statistic."""
    scores = x.sigmoid()
    if scores.mean() > threshold:  # SITE: branch to torch.where
        scores = scores.clamp(max=0.9)
        offset = scores.mean()
    else:
        offset = scores.min()
    positives = scores[scores > 0.5].sum()  # SITE: mask instead of select
    return scores - offset + positives


def clipped() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return clipped_scores, (_x(4, 8), torch.tensor(0.4))


# -- training steps ------------------------------------------------------------------------------


class TrainModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pred = self.net(x)
        loss = (pred - y).square().mean()
        value = loss.item()  # SITE: keep it a tensor
        print(f"loss {value:.4f}")  # SITE: guard side effect
        if loss > 10:  # SITE: branch to torch.where
            loss = loss / 10
        return loss


def train_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return TrainModel(), (_x(8, 8), _x(8, 1, seed=1))


def sgd_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A whole training step: forward, loss, backward, the optimizer's update, and a log line."""
    loss = (model(x) - y).square().mean()
    loss.backward()  # SITE: none
    opt.step()  # SITE: on purpose
    opt.zero_grad()  # SITE: on purpose
    print(f"step loss {loss.item():.4f}")  # SITE: guard side effect
    return loss.detach()


def train_step() -> tuple[Any, tuple[Any, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return sgd_step, (model, opt, _x(8, 8), _x(8, 1, seed=1))


class Regularised(nn.Module):
    """A loss with a reference copy, a frozen statistic and a branchy penalty."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ref = copy.deepcopy(x)  # SITE: clone instead of deepcopy
        h = self.fc(x)
        noise = torch.randn_like(h) * 0.01
        noise.requires_grad = False  # SITE: detach instead of requires_grad = False
        penalty = (h - ref).square().mean()
        if penalty > 1:  # SITE: branch to torch.cond
            penalty = penalty.sqrt()
            penalty = penalty * 2
        return (h + noise).sum() + penalty


def regularised() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Regularised(), _x(4, 8)


class Metrics(nn.Module):
    """An evaluation step that logs accuracy, the top probability and its own time."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        t0 = time.time()  # SITE: guard side effect
        loss = nn.functional.cross_entropy(logits, labels)
        acc = (logits.argmax(-1) == labels).float().mean().item()  # SITE: keep it a tensor
        print("accuracy", float(acc))  # SITE: guard side effect
        top = max(logits.softmax(-1).max(-1).values.tolist())  # SITE: keep it a tensor
        log.warning("eval took %.3f s", time.time() - t0)  # SITE: guard side effect
        return loss + top * acc


def metrics() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    return Metrics(), (_x(6, 5), torch.tensor([0, 1, 2, 3, 4, 0]))


def greedy_until_eos(logits: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
    """A decoding loop that stops at the end-of-sequence token: a data-dependent ``break``."""
    out = logits
    for _ in range(3):
        out = out.roll(1, -1)
        if (out.argmax(-1) == eos).any():  # SITE: early stop to a stop mask
            break
    return out


def generation_loop() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return greedy_until_eos, (_x(2, 8), torch.tensor(3))


# -- rewrites that must not be verified ---------------------------------------------------------


def mutating_print(x: torch.Tensor) -> torch.Tensor:
    """The print's argument mutates x: skipping it under compile would change the output."""
    print("scaled", x.mul_(2))  # SITE: none
    return x + 1


def mutating() -> tuple[Any, torch.Tensor]:
    return mutating_print, _x(4)


def shape_branch(x: torch.Tensor) -> torch.Tensor:
    """The branches give different shapes: torch.where cannot hold both."""
    if x.sum() > 0:  # SITE: none
        y = x[:2]
    else:
        y = x
    return y * 2


def shapes() -> tuple[Any, torch.Tensor]:
    return shape_branch, _x(4, 3)


def loop_count(x: torch.Tensor) -> torch.Tensor:
    """A tensor value used as a Python int (a loop count): a tensor cannot stand in."""
    steps = int(x.abs().sum().item()) % 3 + 1  # SITE: none
    for _ in range(steps):
        x = x.sin()
    return x


def loops() -> tuple[Any, torch.Tensor]:
    return loop_count, _x(4)


def uneven_branches(x: torch.Tensor) -> torch.Tensor:
    """Two statements a branch, of other shapes: neither torch.where nor torch.cond holds them."""
    if x.mean() > 0:  # SITE: none
        head = x[:2]
        out = head * 2
    else:
        head = x
        out = x + 1
    return out.sum() + head.sum()


def uneven() -> tuple[Any, torch.Tensor]:
    return uneven_branches, _x(4, 3)


class CopiesItsLayer(nn.Module):
    """A module deep-copied inside forward: .clone() is no method of a module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frozen = copy.deepcopy(self.fc)  # SITE: call with detached state instead of deepcopy
        return frozen(x) + self.fc(x)


def copies_layer() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return CopiesItsLayer(), _x(2, 4)


#: Every program of the corpus: name -> builder.
PROGRAMS = {
    "attention": attention,
    "routing": routing,
    "decoding": decoding,
    "kv_step": kv_step,
    "logged_stack": logged_stack,
    "preprocessing": preprocessing,
    "clipped": clipped,
    "train_loss": train_loss,
    "train_step": train_step,
    "metrics": metrics,
    "generation_loop": generation_loop,
    "regularised": regularised,
    "mutating": mutating,
    "shapes": shapes,
    "loops": loops,
    "uneven": uneven,
    "copies_layer": copies_layer,
}
