"""Programs that dynscope's hooks must never break (tests/capture/test_do_no_harm.py).

Held-out shapes that once made report() raise "unhashable type: 'dict'" from the line tracer
(a feature-hashing model with ``zlib.crc32`` in ``forward``, a closure that breaks, Hugging
Face's BigBird block-sparse attention and a ViLT eval), plus a training step (the backward
hook runs) and a program that raises its own error (which must reach the user unchanged).
Each program is ``(model, calls)``; all run on the CPU in well under a second eagerly.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch
from torch import nn


class FeatureHash(nn.Module):
    """Hashes words into buckets with zlib.crc32 (a C call Dynamo cannot trace: it breaks)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(64, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, words: list[str], x: torch.Tensor) -> torch.Tensor:
        ids = torch.tensor([zlib.crc32(w.encode()) % 64 for w in words])
        pooled = self.emb(ids, torch.tensor([0]))
        return self.out(pooled) + x.sum()


def feature_hash() -> tuple[Any, list[Any]]:
    torch.manual_seed(0)
    return FeatureHash().eval(), [(["red", "green"], torch.randn(3)), (["blue"], torch.randn(3))]


def breaking_closure() -> tuple[Any, list[Any]]:
    """A closure over a dict that prints between two tensor steps."""
    torch.manual_seed(0)
    scale = {"a": 2.0, "b": 0.5}

    def step(x: torch.Tensor) -> torch.Tensor:
        y = x * scale["a"]
        print("step", tuple(y.shape))
        return torch.relu(y) * scale["b"]

    return step, [torch.randn(4), torch.randn(4)]


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def train_step() -> tuple[Any, list[Any]]:
    """A training step that logs its loss with .item() (a break) and runs backward."""
    torch.manual_seed(0)
    net = _Net()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(net(x), y)
        if loss.item() > 1e6:  # a guard a real loop keeps: a break on a data-dependent value
            raise FloatingPointError("loss diverged")
        loss.backward()
        return loss.detach()

    return step, [(torch.randn(4, 8), torch.randn(4, 1)), (torch.randn(4, 8), torch.randn(4, 1))]


class BadInput(ValueError):
    """The program's own error."""


class Picky(nn.Module):
    """Raises its own error on the second call (negative inputs), after a break."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if bool((y < 0).any()):
            raise BadInput(f"negative inputs: {int((y < 0).sum())}")
        return y + 1


def picky() -> tuple[Any, list[Any]]:
    return Picky(), [torch.ones(3), -torch.ones(3)]


def bigbird() -> tuple[Any, list[Any]]:
    """Hugging Face BigBird with block-sparse attention, from a small config (no download)."""
    from transformers import BigBirdConfig, BigBirdModel

    torch.manual_seed(0)
    cfg = BigBirdConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, attention_type="block_sparse",
                        block_size=4, num_random_blocks=2)
    return BigBirdModel(cfg).eval(), [{"input_ids": torch.randint(0, 100, (1, 64))}]


def vilt() -> tuple[Any, list[Any]]:
    """Hugging Face ViLT (text + image patches) in eval, from a small config."""
    from transformers import ViltConfig, ViltModel

    torch.manual_seed(0)
    cfg = ViltConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, image_size=32, patch_size=8, max_position_embeddings=40)
    inputs = {"input_ids": torch.randint(0, 100, (1, 8)), "pixel_values": torch.randn(1, 3, 32, 32)}
    return ViltModel(cfg).eval(), [inputs]


#: name -> maker; the fast tier runs the small ones, the heavy tier the Hugging Face models.
SMALL = {"feature_hash": feature_hash, "breaking_closure": breaking_closure, "train_step": train_step,
         "picky": picky}
HF = {"bigbird": bigbird, "vilt": vilt}
