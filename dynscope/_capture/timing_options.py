"""How to time (TimingOptions) and which Inductor modes exist."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dynscope._errors import InputError
from dynscope._torch.runtime import ATOL, MIN_SAMPLE_MS, MIN_TIME_S, NOISY_SPREAD, REPEATS, RTOL, WARMUP

if TYPE_CHECKING:
    from collections.abc import Sequence

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_ONLY_MODES = ("reduce-overhead",)


@dataclass(frozen=True)
class TimingOptions:
    """How to time.

    Attributes:
        warmup: runs dropped before sampling. Defaults to 3.
        repeats: samples per side (eager, compiled) at most. Defaults to 30.
        min_time_s: stop sampling early once both sides have this much sampled time and
            at least 5 samples. Defaults to 0.2.
        min_sample_ms: on CPU, a sample loops the callable until it lasts this long and
            reports the time per run (timer resolution and jitter stay small against it).
            CUDA samples are one run each, after an L2 flush. Defaults to 10.0.
        noisy_spread: flag a measurement whose IQR / median exceeds this. Defaults to 0.25.
        rtol, atol: tolerance for compiled-vs-eager outputs. Defaults to 1e-3, 1e-4.
        interleave: alternate eager and compiled samples (PyTorch's runner does; drift
            then hits both sides alike). False samples all eager runs, then all compiled
            ones (each side then runs with warm caches and thread pools). Defaults to True.
        end_to_end: also time the whole callable. Defaults to True.
        backward: also time forward+backward of training graphs (outputs that needed
            gradients at capture) and compare gradients with eager. Defaults to True.
        cache_dir: Inductor's on-disk cache folder (a second report reuses compiled code);
            None keeps PyTorch's default (also cached). Defaults to None.
        progress: report progress on stderr (a bar on a terminal, a line per phase
            otherwise); False: none (as ``DYNSCOPE_PROGRESS=0``). Defaults to None (shown).
        budget_s: the seconds timing and memory measurement may take in all (the
            compiles they start included): once spent, sampling stops at a few samples,
            graphs, modes and end-to-end runs not yet measured are skipped, and
            ``Report.notes`` says what was cut. None: no limit. Defaults to None.
    """

    # The defaults are the timing runtime's, which a standalone script's command line shares.
    warmup: int = WARMUP
    repeats: int = REPEATS
    min_time_s: float = MIN_TIME_S
    min_sample_ms: float = MIN_SAMPLE_MS
    noisy_spread: float = NOISY_SPREAD
    interleave: bool = True
    rtol: float = RTOL
    atol: float = ATOL
    end_to_end: bool = True
    backward: bool = True
    cache_dir: str | None = None
    progress: bool | None = None
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.budget_s is not None and (isinstance(self.budget_s, bool) or not isinstance(self.budget_s, (int, float))
                                          or not self.budget_s > 0):
            raise InputError(f"TimingOptions(budget_s={self.budget_s!r}): give a positive number of seconds, or None for no limit")


def validate_modes(modes: Sequence[str], device: str | None = None) -> tuple[str, ...]:
    """Check requested modes; CUDA-graph modes need a CUDA device."""
    if isinstance(modes, str):
        modes = (modes,)
    out = tuple(modes)
    if not out:
        raise InputError(f"modes is empty; choose from {', '.join(MODES)}")
    for m in out:
        if m not in MODES:
            raise InputError(f"unknown mode {m!r}; valid modes: {', '.join(MODES)}")
        if m in CUDA_ONLY_MODES and device is not None and not device.startswith("cuda"):
            raise InputError(
                f"mode {m!r} uses CUDA graphs and needs CUDA inputs; the inputs are on {device}. "
                f"On CPU use 'default' or 'max-autotune-no-cudagraphs'."
            )
    return out


def device_of(values: Any) -> str:
    """Device of the first tensor found in (nested) call arguments; "cpu" if none."""
    stack = [values]
    while stack:
        v = stack.pop(0)
        if isinstance(v, torch.Tensor):
            return str(v.device)
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return "cpu"
