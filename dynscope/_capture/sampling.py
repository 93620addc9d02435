"""Sampling eager against compiled, and comparing what they computed.

The clock (perf_counter on CPU, CUDA events after an L2 flush on GPU), interleaved samples
with warm-up, and the numerics check that runs both sides under one seed.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dynscope._capture.timing_options import TimingOptions

#: A relative spread (IQR / median) above this makes a median untrustworthy.
NOISY_SPREAD = 0.25

#: Samples each side keeps when the budget runs out mid-measurement (a median of fewer
#: says little; ``budget_s`` is a limit on waiting, not a way to skip measuring).
MIN_SAMPLES_CUT = 3


class Budget:
    """The seconds measuring may take in all (``TimingOptions.budget_s``): once spent,
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


_BUDGET: ContextVar[Budget | None] = ContextVar("dynscope_budget", default=None)


@contextlib.contextmanager
def spending(budget: Budget) -> Iterator[Budget]:
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
        return statistics.median(self.ms) if self.ms else 0.0

    @property
    def spread(self) -> float:
        """Interquartile range / median; 0.0 under 4 samples (no quartiles to speak of)."""
        if len(self.ms) < 4:
            return 0.0
        q = statistics.quantiles(self.ms, n=4)
        med = self.median
        return (q[2] - q[0]) / med if med > 0 else 0.0

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



class Clock:
    """Times one run of a callable: perf_counter on CPU, CUDA events after an L2 flush on GPU."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self._flush = None
        if self.cuda:
            # 256 MB: larger than any current GPU's L2, so each sample starts cold.
            self._flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=device)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], Any], loops: int = 1) -> float:
        """Time per run, over ``loops`` back-to-back runs (CPU) or one run (CUDA)."""
        if self.cuda:
            assert self._flush is not None
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))
        begin = time.perf_counter()
        for _ in range(loops):
            fn()
        return (time.perf_counter() - begin) * 1000.0 / loops


def interleaved(
    eager: Callable[[], Any], compiled: Callable[[], Any], clock: Clock, opts: TimingOptions
) -> tuple[Samples, Samples]:
    """Samples of both sides, alternating eager and compiled runs after a warm-up."""
    for _ in range(opts.warmup):
        eager()
        compiled()
    clock.sync()
    loops = 1
    if not clock.cuda:
        one = min(clock.time_ms(eager), clock.time_ms(compiled))
        loops = max(1, math.ceil(opts.min_sample_ms / max(one, 1e-6)))
    a: list[float] = []
    b: list[float] = []
    if not opts.interleave:
        a, b = _block(eager, clock, loops, opts), _block(compiled, clock, loops, opts)
    else:
        while len(a) < opts.repeats:
            a.append(clock.time_ms(eager, loops))
            b.append(clock.time_ms(compiled, loops))
            if len(a) >= 5 and min(sum(a), sum(b)) * loops >= opts.min_time_s * 1000:
                break
            if _stop_for_budget(len(a)):
                break
    return Samples(tuple(a), opts.noisy_spread), Samples(tuple(b), opts.noisy_spread)


def _block(fn: Callable[[], Any], clock: Clock, loops: int, opts: TimingOptions) -> list[float]:
    """Samples of one side back to back, after a warm-up of its own."""
    for _ in range(opts.warmup):
        fn()
    out: list[float] = []
    while len(out) < opts.repeats:
        out.append(clock.time_ms(fn, loops))
        if len(out) >= 5 and sum(out) * loops >= opts.min_time_s * 1000:
            break
        if _stop_for_budget(len(out)):
            break
    return out


def compare_outputs(expected: Any, got: Any, rtol: float, atol: float) -> tuple[float, float, bool]:
    """(max abs error, max relative error, outputs match) over all tensor outputs."""
    exp = [t for t in tensors(expected)]
    out = [t for t in tensors(got)]
    if len(exp) != len(out):
        return math.inf, math.inf, False
    max_abs = max_rel = 0.0
    ok = True
    for e, g in zip(exp, out, strict=True):
        if e.shape != g.shape:
            return math.inf, math.inf, False
        if not (e.is_floating_point() or e.is_complex()):
            same = bool(torch.equal(e, g))
            ok &= same
            max_abs = max(max_abs, 0.0 if same else math.inf)
            continue
        e64, g64 = e.detach().double(), g.detach().double()
        if bool((torch.isnan(g64) & ~torch.isnan(e64)).any()):
            return math.nan, math.nan, False  # compiled made NaNs eager did not
        both = ~(torch.isnan(e64) | torch.isnan(g64))
        diff = (e64 - g64).abs()[both]
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / (e64.abs()[both] + 1e-12)).max()))
        ok &= bool(torch.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True))
    return max_abs, max_rel, ok


def tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


#: The seed both sides of a numerics check run under.
SEED = 0


def seeded(fn: Callable[..., Any], inputs: list[Any], device: str, seed: int = SEED) -> Any:
    """``fn(*inputs)`` under ``torch.manual_seed(seed)``; the RNG state is restored after."""
    with torch.random.fork_rng(devices=cuda_devices(device)):
        torch.manual_seed(seed)
        return fn(*inputs)


def cuda_devices(device: str) -> list[int]:
    # manual_seed seeds every CUDA device, so every initialised one is restored.
    if device.startswith("cuda") or torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


def is_random(gm: Callable[..., Any], inputs: list[Any], device: str) -> bool:
    """True when the graph draws random numbers: two seeds give different outputs."""
    first = seeded(gm, inputs, device, SEED)
    second = seeded(gm, inputs, device, SEED + 1)
    return not compare_outputs(first, second, 0.0, 0.0)[2]
