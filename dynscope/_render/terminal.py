"""Colour for the terminal summary: when to use it and how to paint it (a leaf: imports
nothing from dynscope).

The summary is made as :class:`Line`s whose pieces carry a tone where they are made (a
section title, a count that is bad news, a "!" note, "Graph breaks: none"); colour comes
from the tone, never from reading the finished text back. Without colour, the lines
joined are exactly what files, golden tests and pipes get, and stripping the escape codes
from the coloured text gives it back.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["BAD", "GOOD", "PLAIN", "TITLE", "WARNING", "Line", "joined", "lines_of", "use_color"]

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
RED = "\x1b[1;31m"
YELLOW = "\x1b[33m"
GREEN = "\x1b[32m"

# The tones. A line's: TITLE bold, WARNING yellow, GOOD green. A piece's: BAD red (a count of
# breaks or recompiles above zero; inside a title it is red and the title bold around it).
PLAIN = ""
TITLE = "title"
WARNING = "warning"
GOOD = "good"
BAD = "bad"


@dataclass(frozen=True)
class Line:
    """One line of the summary: its pieces, each (text, tone), and the line's own tone."""

    pieces: tuple[tuple[str, str], ...] = ()
    tone: str = PLAIN

    @property
    def text(self) -> str:
        """The line without colour."""
        return "".join(t for t, _ in self.pieces)

    def painted(self) -> str:
        """The line with the ANSI colour of its tones (an empty line stays empty)."""
        text = self.text
        if not text:
            return text
        if self.tone == TITLE:
            inner = "".join(f"{RED}{t}{RESET}{BOLD}" if tone == BAD and t else t for t, tone in self.pieces)
            return f"{BOLD}{inner}{RESET}"
        if self.tone in (WARNING, GOOD):
            return f"{YELLOW if self.tone == WARNING else GREEN}{text}{RESET}"
        return "".join(f"{RED}{t}{RESET}" if tone == BAD and t else t for t, tone in self.pieces)


def lines_of(text: str, tone: str = PLAIN) -> list[Line]:
    """``text`` (one line or several) as lines of one tone."""
    return [Line(((t, PLAIN),), tone) for t in text.split("\n")]


def joined(lines: Iterable[Line], *, color: bool) -> str:
    """The lines as text, painted by their tones when ``color``."""
    return "\n".join(line.painted() if color else line.text for line in lines)


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
