"""Greedy decode loops of the shape of Hugging Face ``generate`` (tests/capture/test_eager_lines.py).

The stop test breaks the graph inside a helper (``Stop.__call__``: ``bool(unfinished.max() ==
0)``), inside ``while not finished:``, inside a context manager: Dynamo gives up on the whole
decoding frame, which then runs eagerly, and its ops must be listed at the loop's own lines,
not at the helper's break. Variants put the loop under ``@contextlib.contextmanager``,
``torch.no_grad()``, nested helpers and a generator. Line numbers matter to the tests: they
find each line by its text.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from collections.abc import Iterator


class Stop:
    def __call__(self, unfinished: torch.Tensor) -> bool:
        return bool(unfinished.max() == 0)


@contextlib.contextmanager
def decoding() -> Iterator[None]:
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(prev)


class Decoder(nn.Module):
    def __init__(self, steps: int = 6) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.head = nn.Linear(16, 32)
        self.stop = Stop()
        self.steps = steps

    def forward(self, ids: torch.Tensor, unfinished: torch.Tensor) -> torch.Tensor:
        with decoding():
            finished = False
            while not finished:
                logits = self.head(self.emb(ids[:, -1]))
                nxt = logits.argmax(-1)
                nxt = nxt * unfinished + 0 * (1 - unfinished)
                unfinished = unfinished & ~(nxt == 31)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                finished = self.stop(unfinished) or ids.shape[1] >= self.steps + 2
        return ids


class NoGradDecoder(Decoder):
    def forward(self, ids: torch.Tensor, unfinished: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self._loop(ids, unfinished)

    def _loop(self, ids: torch.Tensor, unfinished: torch.Tensor) -> torch.Tensor:
        finished = False
        while not finished:
            nxt = self._step(ids)
            nxt = nxt * unfinished + 0 * (1 - unfinished)
            unfinished = unfinished & ~(nxt == 31)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            finished = self.stop(unfinished) or ids.shape[1] >= self.steps + 2
        return ids

    def _step(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.emb(ids[:, -1]))
        return logits.argmax(-1)


class StreamingDecoder(Decoder):
    """The loop is a generator the forward drains (a streamer's shape)."""

    def forward(self, ids: torch.Tensor, unfinished: torch.Tensor) -> torch.Tensor:
        out = [ids]
        for nxt in self._tokens(ids, unfinished):
            out.append(nxt[:, None])
        return torch.cat(out, dim=1)

    def _tokens(self, ids: torch.Tensor, unfinished: torch.Tensor) -> Iterator[torch.Tensor]:
        with decoding():
            for _ in range(self.steps):
                logits = self.head(self.emb(ids[:, -1]))
                nxt = logits.argmax(-1) * unfinished
                unfinished = unfinished & ~(nxt == 31)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                yield nxt
                if self.stop(unfinished):
                    return


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 30, (2, 2), generator=g), torch.ones(2, dtype=torch.long)


def made(cls: type[Decoder]) -> Decoder:
    torch.manual_seed(0)
    return cls().eval()
