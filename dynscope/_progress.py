"""Progress of long work on stderr (a leaf: imports nothing from dynscope).

Where a user waits (timing, memory, advise, laying out pictures, reading a job's logs, the
CLI), each phase is said as it starts: a progress bar (tqdm) when stderr is a terminal, one
plain line per phase otherwise (CI logs, a notebook's captured output, ``nohup``), so a long
run never looks hung. Off with ``show=False`` (the options' ``progress=False``, the CLI's
``--quiet``) or ``DYNSCOPE_PROGRESS=0`` in the environment.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Progress", "progress_enabled", "within"]

_OFF = ("0", "false", "no", "off")

#: Inside work whose own progress already speaks (advise's trials run reports that time):
#: the inner tasks say nothing.
_WITHIN: contextvars.ContextVar[bool] = contextvars.ContextVar("dynscope_progress_within", default=False)


@contextlib.contextmanager
def within() -> Iterator[None]:
    """Progress made in the block is not shown: an outer task speaks for it."""
    token = _WITHIN.set(True)
    try:
        yield
    finally:
        _WITHIN.reset(token)


def progress_enabled(show: bool | None = None) -> bool:
    """Whether progress is shown: ``show`` False (or ``DYNSCOPE_PROGRESS`` set to 0, false,
    no or off, or inside :func:`within`) hides it; otherwise it is shown."""
    if show is False or _WITHIN.get():
        return False
    return os.environ.get("DYNSCOPE_PROGRESS", "").strip().lower() not in _OFF


class Progress:
    """One task's progress ("dynscope timing [12.3 s]: compiling the program (default)").

    Args:
        task: what the lines are about ("timing", "render", "trace").
        show: False hides everything; None and True show unless ``DYNSCOPE_PROGRESS=0``.
        stream: where to write; defaults to ``sys.stderr`` at each write.
        quiet_s: say nothing until the task has run this long (short work stays silent);
            a phase started earlier is said once this much time has passed, by a timer
            if nothing else happens first.
    """

    #: Off a terminal, a phase with many steps says how far it got at most this often.
    EVERY_S = 10.0

    def __init__(self, task: str, *, show: bool | None = None, stream: TextIO | None = None,
                 quiet_s: float = 0.0) -> None:
        self.task = task
        self.show = progress_enabled(show)
        self._stream = stream
        self.quiet_s = quiet_s
        self.start = time.perf_counter()
        self._lock = threading.Lock()
        self._bar: Any = None
        self._pending = ""
        self._text = ""
        self._total: int | None = None
        self._count = 0
        self._said_at = 0.0
        self._timer: threading.Timer | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def elapsed(self) -> float:
        """Seconds since the task started."""
        return time.perf_counter() - self.start

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def _write(self, text: str) -> None:
        try:
            print(f"dynscope {self.task} [{self.elapsed():5.1f} s]: {text}", file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed stream: progress is never worth an error
            self.show = False

    def phase(self, text: str, *, total: int | None = None) -> None:
        """A new phase begins; ``total``: how many steps it has (a bar on a terminal)."""
        if not self.show:
            return
        with self._lock:
            self._close_bar()
            self._text, self._total, self._count, self._said_at = text, total, 0, self.elapsed()
            if self.elapsed() < self.quiet_s:
                self._pending = text
                self._timer = threading.Timer(self.quiet_s - self.elapsed(), self._say_pending)
                self._timer.daemon = True
                self._timer.start()
                return
            self._pending = ""
            self._open(text, total)

    def _say_pending(self) -> None:
        """The timer's: a phase still running once ``quiet_s`` has passed is said."""
        with self._lock:
            if self._pending and self.show:
                text, self._pending = self._pending, ""
                self._open(f"{text} ({self._count}/{self._total} done)" if self._total else text, self._total)

    def _open(self, text: str, total: int | None) -> None:
        if total and total > 1 and self._tty():
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=f"dynscope {self.task}: {text}", file=self.stream,
                                 leave=False, dynamic_ncols=True)
                return
            except ImportError:  # tqdm is a dependency; a broken install still gets lines
                pass
        self._write(text)

    def advance(self, what: str = "") -> None:
        """One step of the phase done (``what``: which, for the bar's postfix)."""
        if not self.show:
            return
        with self._lock:
            self._count += 1
            if self._pending and self.elapsed() >= self.quiet_s:
                text, self._pending = self._pending, ""
                self._open(f"{text} ({self._count}/{self._total} done)" if self._total else text, self._total)
                if self._bar is not None:
                    self._bar.update(self._count)
                return
            if self._bar is not None:
                self._bar.update(1)
                if what:
                    self._bar.set_postfix_str(what, refresh=False)
            elif not self._pending and self._total and self.elapsed() - self._said_at >= self.EVERY_S:
                self._said_at = self.elapsed()
                self._write(f"{self._text}: {self._count}/{self._total}" + (f" ({what})" if what else ""))

    def done(self, text: str = "") -> None:
        """The task ended: close the bar; ``text`` said when the task was long enough to show."""
        if not self.show:
            return
        with self._lock:
            self._close_bar()
            self._pending = ""
            if text and self.elapsed() >= self.quiet_s:
                self._write(text)

    def _close_bar(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
