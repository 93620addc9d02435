"""Programs whose state lives outside a module they are given: fix must run copies of all of
it and leave the user's as it was (tests/capture/fix/test_fix_owned.py).

A trainer whose ``step`` is compiled (its model, optimizer, LR scheduler and loss scaler), a
train step that reads its model, optimizer and loss history from its file's globals
(nanoGPT's ``train.py`` style), a ``functools.partial`` over a weight that requires grad, a
model holding a lock, a queue drained by a thread and a log file, and one that draws from a
generator it holds (made again for each copy when it has not started; else no copy can hold it). Each has one data-dependent branch fix rewrites.
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import Any

import torch
from torch import nn

torch.manual_seed(3)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history: list[torch.Tensor] = []


def global_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    if loss > 10:  # SITE: branch
        loss = loss / 10
    loss.backward()
    optimizer.step()
    history.append(loss.detach())
    return loss.detach()


def recursive_log(x: torch.Tensor, depth: int) -> torch.Tensor:
    """Logs into the file's history at every depth, calling itself by its name."""
    history.append(x.sum().detach())
    return x if depth <= 1 else recursive_log(x * 2, depth - 1)


class Trainer:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Linear(8, 1)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=10)
        self.scaler = torch.amp.GradScaler("cpu", enabled=False)
        self.steps = 0

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.opt.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean()
        if loss > 10:  # SITE: branch
            loss = loss / 10
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.sched.step()
        self.steps += 1
        return loss.detach()


def head(x: torch.Tensor, w: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    y = torch.tanh(x @ w) * scale
    if y.mean() > 0:  # SITE: branch
        y = y * 2
    else:
        y = y - 1
    return y


class Writer:
    """A tensorboard-style event writer: rows on a queue a daemon thread drains."""

    def __init__(self) -> None:
        self.q: queue.Queue[Any] = queue.Queue()
        self.rows: list[Any] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            self.rows.append(self.q.get())


class Logged(nn.Module):
    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.lock = threading.Lock()
        self.writer = Writer()
        self.log = open(log_path, "w")  # a trainer's log file, kept open as trainers keep it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.mean() > 0:  # SITE: branch
            y = y * 2
        else:
            y = y - 1
        self.record(y)
        return y

    def record(self, y: torch.Tensor) -> None:
        with self.lock:
            self.log.write(f"step {y.shape}\n")
        self.writer.q.put(("rows", y.shape[0]))


def temperatures() -> Any:
    t = 1.0
    while True:
        yield t
        t *= 0.9


class Annealed(nn.Module):
    def __init__(self, *, started: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.temps = temperatures()
        if started:  # a generator drawn from before: its place cannot be copied
            next(self.temps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) * next(self.temps)
        if y.mean() > 0:  # SITE: branch
            y = y * 2
        else:
            y = y - 1
        return y


def partial_head() -> functools.partial[torch.Tensor]:
    torch.manual_seed(0)
    return functools.partial(head, w=torch.randn(8, 8, requires_grad=True), scale=2.0)
