"""Sampling eager against compiled, as dynscope times: the runtime plus budgets and Samples.

The clock, interleaved samples, seeding and the numerics check are the timing runtime's
(``dynscope._torch.runtime``, the code every standalone script carries too); this module
adds what only dynscope does with them: the time budget that cuts sampling short, and
:class:`Samples`, the medians, spread and noisy flag a Timing is filled from. The runtime's
names are re-exported here for dynscope's timing modules.
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynscope._torch import runtime
from dynscope._torch.runtime import (
    NOISY_SPREAD,
    SEED,
    Clock,
    compare_outputs,
    cuda_devices,
    is_random,
    seeded,
    tensors,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dynscope._capture.timing_options import TimingOptions

__all__ = [
    "MIN_SAMPLES_CUT", "NOISY_SPREAD", "SEED", "Deadline", "Clock", "Samples", "compare_outputs", "cuda_devices",
    "interleaved", "is_random", "sample_fields", "seeded", "spending", "tensors",
]

#: Samples each side keeps when the budget runs out mid-measurement (a median of fewer
#: says little; ``budget_s`` is a limit on waiting, not a way to skip measuring).
MIN_SAMPLES_CUT = 3


class Deadline:
    """The seconds measuring may take in all (``TimingOptions.budget_s``, advise's
    ``budget_s``; named apart from ``dynscope.Budget``, a compile budget): once spent,
    sampling loops stop at MIN_SAMPLES_CUT samples and the caller skips what is left,
    saying what was cut.

    Attributes:
        seconds: the budget; None for no limit.
        cut: measurements whose sampling stopped early for the budget.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds if seconds is not None else None
        self.cut = 0

    def spent(self) -> bool:
        """True once the budget's time has passed."""
        return self._deadline is not None and time.monotonic() >= self._deadline


_BUDGET: ContextVar[Deadline | None] = ContextVar("dynscope_budget", default=None)


@contextlib.contextmanager
def spending(budget: Deadline) -> Iterator[Deadline]:
    """Sampling inside the block stops early once ``budget`` is spent."""
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def _stop_for_budget(taken: int) -> bool:
    """True when the running budget is spent and ``taken`` samples are enough to stop at
    (counted once per measurement by the caller, which stops)."""
    budget = _BUDGET.get()
    if budget is None or taken < MIN_SAMPLES_CUT or not budget.spent():
        return False
    budget.cut += 1
    return True


@dataclass(frozen=True)
class Samples:
    """The timing samples of one side (eager or compiled) and what is derived from them.

    Attributes:
        ms: the raw samples, milliseconds per run, in the order taken.
        noisy_spread: ``noisy`` when ``spread`` exceeds this. Defaults to 0.25.
    """

    ms: tuple[float, ...]
    noisy_spread: float = NOISY_SPREAD

    @property
    def median(self) -> float:
        """The median sample; 0.0 when there is none (not measured)."""
        return runtime.median(self.ms)

    @property
    def spread(self) -> float:
        """Interquartile range / median; 0.0 under 4 samples (no quartiles to speak of)."""
        return runtime.spread(self.ms)

    @property
    def noisy(self) -> bool:
        """True when the spread is too wide to trust the median."""
        return self.spread > self.noisy_spread


def sample_fields(eager: Samples, comp: Samples) -> dict[str, Any]:
    """The fields Timing and ModeTiming both fill from an eager and a compiled sample set."""
    return {
        "eager_ms": eager.median,
        "compiled_ms": comp.median,
        "eager_samples_ms": eager.ms,
        "compiled_samples_ms": comp.ms,
        # The measurement is as trustworthy as its noisier side.
        "noisy": eager.noisy or comp.noisy,
        "spread": max(eager.spread, comp.spread),
    }


def interleaved(
    eager: Callable[[], Any], compiled: Callable[[], Any], clock: Clock, opts: TimingOptions
) -> tuple[Samples, Samples]:
    """Samples of both sides after a warm-up (the runtime's ``interleaved``: alternating, or
    back to back when ``opts.interleave`` is False), stopping early when the running budget
    is spent."""
    a, b = runtime.interleaved(eager, compiled, clock, opts, stop=_stop_for_budget)
    return Samples(tuple(a), opts.noisy_spread), Samples(tuple(b), opts.noisy_spread)
