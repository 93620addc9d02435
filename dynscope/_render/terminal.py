"""Colour for the terminal summary: when to use it and how to paint it (a leaf: imports
nothing from dynscope).

Colour goes on after the summary is rendered, as a pass over its plain text, so the text
without colour is exactly what files, golden tests and pipes get, and stripping the
escape codes gives it back. What is coloured: section titles, the counts that are bad
(graph breaks, recompiles above zero) and the "!" lines that say what to read first.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TextIO

__all__ = ["paint_summary", "use_color"]

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
RED = "\x1b[1;31m"
YELLOW = "\x1b[33m"
GREEN = "\x1b[32m"

# A count that is bad when above zero: "3 graph breaks", "1 recompile", "Recompiles (2)".
_BAD_COUNT = re.compile(
    r"\b[1-9]\d* (?:graph breaks?|recompiles?|events?)\b|^Recompiles \([1-9]\d*\)|^Frames that fell back to eager"
)
_RULE = re.compile(r"-+(?: +-+)*")  # tabulate's line under a table's header
_WARNING = re.compile(r"^ *! ")


def use_color(color: bool | None = None, stream: TextIO | None = None) -> bool:
    """Whether the summary is coloured.

    Args:
        color: True or False decide; None (auto) colours when ``stream`` is a terminal,
            unless the environment says otherwise: ``NO_COLOR`` set (to any value) means
            no colour, ``FORCE_COLOR`` set (not "0" or "false") means colour even when
            ``stream`` is not a terminal; ``TERM=dumb`` means no colour.
        stream: where the text goes; defaults to ``sys.stdout``.
    """
    if color is not None:
        return color
    if "NO_COLOR" in os.environ:
        return False
    if os.environ.get("FORCE_COLOR", "").lower() not in ("", "0", "false"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _paint(line: str, style: str) -> str:
    return f"{style}{line}{RESET}" if line else line


def _is_title(lines: list[str], i: int) -> bool:
    """A section title: a line at the left margin after a blank line, starting with a
    capital, that is not a table's header (those are followed by a rule)."""
    line = lines[i]
    following = lines[i + 1] if i + 1 < len(lines) else ""
    return (
        i > 0 and not lines[i - 1].strip() and line[:1].isupper()
        and not _RULE.fullmatch(following.strip() or "x")
    )


def paint_summary(text: str) -> str:
    """``text`` (a rendered summary) with ANSI colour: the title and section titles bold,
    bad counts in red in the totals line and the titles, "!" lines (and their wrapped
    continuation) in yellow, "Graph breaks: none" in green."""
    lines = text.split("\n")
    out = []
    warning = False
    for i, line in enumerate(lines):
        if _WARNING.match(line):
            warning = True
        elif not (warning and line.startswith("      ") and line.strip()):
            warning = False
        if i == 0 and line:
            out.append(_paint(line, BOLD))
        elif warning:
            out.append(_paint(line, YELLOW))
        elif line == "Graph breaks: none":
            out.append(_paint(line, GREEN))
        elif _is_title(lines, i):
            out.append(BOLD + _BAD_COUNT.sub(lambda m: f"{RED}{m.group(0)}{RESET}{BOLD}", line) + RESET)
        elif i > 0 and lines[i - 1].startswith("=="):  # the totals line under the title
            out.append(_BAD_COUNT.sub(lambda m: f"{RED}{m.group(0)}{RESET}", line))
        else:
            out.append(line)
    return "\n".join(out)
