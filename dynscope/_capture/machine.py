"""The machine's figures for timing: torch's threads, the cores, the load, and what they
mean for the medians."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from dynscope._format import plural


def contention(threads: int, cores: int, load: float) -> str:
    """What it means for timing that torch runs ``threads`` intra-op threads on ``cores``
    cores under a 1-minute ``load`` average (-1.0: unknown); "" when the threads have the
    cores to themselves.

    The load average counts this process's own running thread, so one unit of it is
    dynscope's; the rest is other work. Threads fight for cores when there are more of them
    than cores, or when they and the other work ask for over 1.25 times the cores: OpenMP's
    threads then wait for each other at every op, and a graph timed alone can read many
    times slower than it runs (not cold caches: with one thread the figures agree).
    """
    if threads <= 0 or cores <= 0:
        return ""
    others = max(load - 1.0, 0.0) if load >= 0 else 0.0
    if threads <= cores and threads + others <= cores * 1.25:
        return ""
    on = f"torch uses {plural(threads, 'thread')} on {plural(cores, 'core')}"
    if load >= 0:
        on += f" with load {load:.1f}"
    # One thread has nothing to give back: only a quieter machine helps.
    fix = "set OMP_NUM_THREADS=1 or torch.set_num_threads(1), or run on a quiet machine" if threads > 1 else (
        "run on a quiet machine"
    )
    return f"{on}: timings fight for cores (medians read slow and spread wide); {fix}"


@dataclass(frozen=True)
class Machine:
    """The machine's figures for timing (see :func:`contention`)."""

    threads: int
    cores: int
    load: float

    @property
    def contention(self) -> str:
        """What these figures mean for timing (:func:`contention`); "" when nothing."""
        return contention(self.threads, self.cores, self.load)

    def fields(self) -> dict[str, Any]:
        """The Timing fields these figures fill."""
        return {"threads": self.threads, "cores": self.cores, "load": self.load, "contention": self.contention}


def read_machine() -> Machine:
    """torch's intra-op thread count, the cores this process may run on (its CPU affinity,
    else the machine's count) and the 1-minute load average (-1.0 where the OS has none)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 0)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows; a system that does not say
        load = -1.0
    return Machine(threads=torch.get_num_threads(), cores=cores, load=load)
