"""Small text formatters every renderer shares (a leaf: imports nothing from dynscope).

One definition each, so the terminal summary, the DOT pictures, the HTML page, the diff
and the budget messages say a count, a place in the code or a duration the same way,
and judge alike when a measured duration is too small to be read as a fact.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ADD_UP_TOLERANCE",
    "OVERHEAD_MS",
    "TIMER_RESOLUTION_MS",
    "clip",
    "location",
    "ms",
    "percent",
    "plural",
    "timer_resolution_ms",
]


def plural(n: int, word: str) -> str:
    """"1 graph", "2 graphs"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def rank_ranges(ranks: Iterable[int], limit: int = 8) -> str:
    """Ranks as runs: "0-4, 6, 8-10"; past ``limit`` runs the first ones, "...", the last,
    and how many ("0-4, 6-20, ..., 246-255 (240 ranks)"), so a 256-rank job reads in a line."""
    rs = sorted(set(ranks))
    runs: list[tuple[int, int]] = []
    for r in rs:
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return rank_runs(runs, len(rs), limit)


def rank_runs(runs: Sequence[tuple[int, int]], count: int, limit: int = 8) -> str:
    """Runs of ranks (first, last each, in order; ``count`` ranks in all) as rank_ranges
    words them, so a range of a hundred billion ranks is one pair of numbers, never a list:
    "2-99,999,999,998"."""
    words = [f"{a:,}" if a == b else f"{a:,}, {b:,}" if b == a + 1 else f"{a:,}-{b:,}" for a, b in runs]
    if len(words) <= limit:
        return ", ".join(words)
    return ", ".join([*words[: limit - 1], "...", words[-1]]) + f" ({count:,} ranks)"


def clip(text: str, n: int) -> str:
    """``text`` cut to at most ``n`` characters, ending in "..." when cut."""
    return text if len(text) <= n else text[: n - 3] + "..."


def location(filename: str, lineno: int, *, full: bool = False) -> str:
    """``file.py:LINE``: where something is in the user's code.

    Args:
        filename: the path as Python reported it.
        lineno: the 1-based line.
        full: keep the whole path (``/src/app/file.py:LINE``) instead of the base name.
    """
    return f"{filename if full else PurePath(filename).name}:{lineno}"


#: Between a figure and its unit in a sentence: a space no wrapping breaks at ("3.60" at the
#: end of one line and "s" on the next reads as two things); the terminal writes it as a plain
#: space once its lines are wrapped, the page keeps it.
FIGURE_GAP = "\u00a0"


def seconds(value: float) -> str:
    """Seconds in a sentence, "3.60 s", its figure and unit never wrapped apart (FIGURE_GAP)."""
    return f"{value:.2f}{FIGURE_GAP}s"


def ms(value: float) -> str:
    """A duration given in milliseconds, for people: "30 ns", "12.5 us", "3.142 ms", "250.0 ms"; "-" when not measured."""
    if value <= 0:
        return "-"
    if value < 0.001:
        return f"{value * 1e6:.0f} ns"
    if value < 1:
        return f"{value * 1000:.1f} us"
    return f"{value:.3f} ms" if value < 100 else f"{value:.1f} ms"


def percent(share: float | None, digits: int = 0) -> str:
    """A share (0.5 is half) as a percentage, "50%"; "-" for None. The one percent formatter.

    Rounding never claims a bound the figure does not reach: a share below 1 never prints
    as "100%" and one above 0 never as "0%". Such a share gets up to two more digits
    ("99.9%", "0.04%"), and past those it prints as ">99.99%" or "<0.01%" (the bound at
    that precision). Shares over 1 (a spread, a capped sum) and exact 0 and 1 print as
    rounded.

    Args:
        share: the ratio, or None when not known.
        digits: digits after the decimal point. Defaults to 0.
    """
    if share is None:
        return "-"
    text = f"{share * 100:.{digits}f}"
    if not (0 < share < 1):
        return text + "%"
    for more in range(digits, digits + 3):
        text = f"{share * 100:.{more}f}"
        if 0 < float(text) < 100:
            return text + "%"
    # Still rounds to a bound: say which side of it the share lies, at that precision.
    step = f"{10.0 ** -(digits + 2):.{digits + 2}f}"
    return f"<{step}%" if share < 0.5 else f">{100 - float(step):.{digits + 2}f}%"


# -- when a measured duration can be read as a fact --------------------------------------

#: Per-run medians under this many milliseconds are below what a sample can resolve.
#: CPU: a sample loops the callable to ``min_sample_ms``, so ``perf_counter`` itself is
#: not the limit, but under 20 us per run the run-to-run jitter of calling a Python
#: function (dispatch, allocator, GIL) is as large as the work. CUDA: one run per sample
#: between CUDA events, which resolve about 0.5 us; under 5 us a run is mostly launch.
TIMER_RESOLUTION_MS = {"cpu": 0.02, "cuda": 0.005}
#: When eager and compiled medians are both under this (50 us), the ratio measures calling
#: overhead (an FX ``GraphModule``'s Python, Inductor's wrapper, kernel launches), not the
#: kernels: a one-op graph at "600x" is this.
OVERHEAD_MS = 0.05
#: Per-graph times that differ from the end-to-end time by more than this share are
#: explained in the summary rather than left to add up.
ADD_UP_TOLERANCE = 0.25


def timer_resolution_ms(device: str) -> float:
    """The smallest per-run median a sample resolves on ``device`` ("cpu", "cuda:0", ...)."""
    return TIMER_RESOLUTION_MS.get(device.split(":")[0], TIMER_RESOLUTION_MS["cpu"])


def human_bytes(n: int) -> str:
    """"768 B", "12.0 KiB", "3.5 MiB", "1.2 GiB"."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def amount(value: float | None, unit: str, *, precise: bool = False) -> str:
    """A measured figure in its unit ("ms", "share", "bytes") for people: short ("3.142 ms",
    "12%", "3.5 MiB") or ``precise`` ("3.1416 ms", "12.3%", "3.5 MiB"); "-" when not measured."""
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.4f} ms" if precise else ms(value)
    if unit == "share":
        return percent(value, 1 if precise else 0)
    if unit == "bytes":
        return human_bytes(int(value))
    raise ValueError(f"unknown unit {unit!r}")


def few(items: tuple[str, ...] | list[str], n: int = 3) -> str:
    """The first ``n`` items joined, "+k" for the rest; "-" when there are none."""
    if not items:
        return "-"
    return ", ".join(items[:n]) + (f", +{len(items) - n}" if len(items) > n else "")
