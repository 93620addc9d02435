"""Small text formatters every renderer shares (a leaf: imports nothing from dynscope).

One definition each, so the terminal summary, the DOT pictures, the HTML page, the diff
and the budget messages say a count, a place in the code or a duration the same way.
"""

from __future__ import annotations

from pathlib import PurePath

__all__ = ["clip", "location", "ms", "plural"]


def plural(n: int, word: str) -> str:
    """"1 graph", "2 graphs"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


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


def ms(value: float) -> str:
    """A duration given in milliseconds, for people: "12.5 us", "3.142 ms", "250.0 ms"; "-" when not measured."""
    if value <= 0:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} us"
    return f"{value:.3f} ms" if value < 100 else f"{value:.1f} ms"
