"""Which line ran each eager op: a Python line tracer that marks the profile.

The profiler says which compiled region an eager op ran in, not which line ran it. After a
graph break that made Dynamo give up on a frame (a ``while`` loop whose condition breaks, as
in Hugging Face's ``generate``), the whole rest of the frame runs eagerly inside the region
of the frame's first compile, and every op there would be listed at that break's line. So
while report() runs the calls, a ``sys.settrace`` tracer opens a profiler range
``dynscope::line <file>:<line>`` around each line of the program's own Python (user code
and libraries; not torch, not the standard library, not dynscope), and coverage ties each
eager op to the innermost such range above it.

The tracer starts at the program's first graph break (before it, every op is in a graph or
at no break), is off while Dynamo compiles (its tracing runs millions of Python calls of its
own), and is not installed when another tracer is set (a debugger, coverage.py: theirs is
left alone) or ``DYNSCOPE_LINES=0``: ops then keep their region's break site.

The tracer runs inside the user's frames, so it is a guarded hook (:mod:`dynscope._hooks`):
on any error it takes itself out and the report says so. Its caches are keyed by the code
object's identity: a code object Dynamo made can hold a dict constant, and is then unhashable.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from dynscope._hooks import Hook
from dynscope._torch.registry import is_user_file

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import CodeType, FrameType

LINE_MARK = "dynscope::line "


class LineMarks:
    """Marks each line the program's Python runs with a profiler range, in the ``with`` block
    on the thread that opened it (see the module docstring).

    Lines are marked only once the program has broken a graph (:meth:`arm`, called when a
    compile ends with new graph-break records): a program that compiles whole has no eager
    op to place and pays nothing; a tracer slows the Python it runs about twofold.
    """

    def __init__(self) -> None:
        self.active = False  # marking: armed, and no other tracer was set
        self._ready = False  # in the block, with no other tracer set
        self._thread = 0
        # By id(code), the code object kept in the value so its id is never reused meanwhile.
        self._wanted: dict[int, tuple[CodeType, bool]] = {}
        self._names: dict[tuple[int, int], tuple[CodeType, str]] = {}
        self._hook = Hook("line tracer")
        self._open: dict[FrameType, Any] = {}
        self._paused = 0
        self._range: Any = None
        self._outer: set[int] = set()

    @contextlib.contextmanager
    def marking(self) -> Iterator[None]:
        """Be ready to mark lines in the block (never when a tracer is already set)."""
        try:
            from torch._C._profiler import _RecordFunctionFast
        except ImportError:  # pragma: no cover - torch without the fast range
            yield
            return
        # Off by choice (DYNSCOPE_LINES=0: ops stay at their region's break, as a tracer of
        # the user's own would leave them), or another tracer is set.
        if sys.gettrace() is not None or os.environ.get("DYNSCOPE_LINES", "").strip().lower() in ("0", "off", "false", "no"):
            yield
            return
        self._range = _RecordFunctionFast
        self._thread = threading.get_ident()
        # The frames running when the block began (report() and its callers): never marked.
        self._outer = {id(f) for f in _stack(sys._getframe())}
        self._ready = True
        try:
            yield
        finally:
            self._ready = False
            if self.active:
                sys.settrace(None)
            for rf in self._open.values():
                rf.__exit__(None, None, None)
            self._open.clear()

    def arm(self) -> None:
        """Start marking (the program broke a graph); marking goes on while not paused."""
        if self._ready and not self.active and not self._hook.off and threading.get_ident() == self._thread:
            self.active = True
            if not self._paused:
                sys.settrace(self._call)
            self._mark_running()

    def _mark_running(self) -> None:
        """Mark the lines of the program's frames that were already running when marking began
        (a loop that called the function that broke: ``sys.settrace`` reaches new frames only)."""
        try:
            self._hook.check()
            for frame in _stack(sys._getframe(1)):
                if id(frame) in self._outer or frame.f_trace is not None:
                    continue
                if self._call(frame, "call", None) is not None:
                    frame.f_trace = self._local
        except Exception as err:  # noqa: BLE001 - never into the user's frame
            self._stop(err)

    def pause(self) -> None:
        """Stop marking new frames (Dynamo starts compiling)."""
        if self._ready and threading.get_ident() == self._thread:
            self._paused += 1
            if self.active:
                sys.settrace(None)

    def resume(self) -> None:
        """Mark new frames again (Dynamo finished compiling)."""
        if self._ready and threading.get_ident() == self._thread and self._paused:
            self._paused -= 1
            if not self._paused and self.active:
                sys.settrace(self._call)

    def _stop(self, err: BaseException) -> None:
        """The tracer failed: take it out, close its ranges, record what is lost."""
        self._hook.failed(err)
        self.active = False
        sys.settrace(None)
        for rf in self._open.values():
            with contextlib.suppress(Exception):
                rf.__exit__(None, None, None)
        self._open.clear()

    def _call(self, frame: FrameType, event: str, _arg: Any) -> Any:
        try:
            self._hook.check()
            code = frame.f_code
            entry = self._wanted.get(id(code))
            if entry is None:
                # The program's own Python and its libraries: not torch, dynscope or the stdlib.
                entry = self._wanted[id(code)] = (code, is_user_file(code.co_filename))
            return self._local if entry[1] else None
        except Exception as err:  # noqa: BLE001 - never into the user's frame (module docstring)
            self._stop(err)
            return None

    def _name(self, code: CodeType, line: int) -> str:
        """The mark of ``line`` of ``code``; :data:`GLUE` for the lines of a Dynamo-compiled
        code object that are Dynamo's own (its first line: calling the graph, rebuilding
        Python values for the resume function at a break), which belong to the region."""
        key = (id(code), line)
        entry = self._names.get(key)
        if entry is None:
            glue = line == code.co_firstlineno and _compiled_by_dynamo(code)
            entry = self._names[key] = (code, GLUE if glue else f"{LINE_MARK}{code.co_filename}:{line}")
        return entry[1]

    def _local(self, frame: FrameType, event: str, _arg: Any) -> Any:
        if self._hook.off:
            return None
        try:
            self._hook.check()
            if event == "line":
                rf = self._open.pop(frame, None)
                if rf is not None:
                    rf.__exit__(None, None, None)
                name = self._name(frame.f_code, frame.f_lineno)
                rf = self._range(name)
                rf.__enter__()
                self._open[frame] = rf
            elif event == "return":
                rf = self._open.pop(frame, None)
                if rf is not None:
                    rf.__exit__(None, None, None)
        except Exception as err:  # noqa: BLE001 - never into the user's frame (module docstring)
            self._stop(err)
            return None
        return self._local


def _stack(frame: FrameType | None) -> list[FrameType]:
    """``frame`` and the frames that called it, innermost first."""
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


#: The mark of Dynamo's own lines in code it compiled: an op under it is the region's.
GLUE = LINE_MARK + "-"


def _compiled_by_dynamo(code: CodeType) -> bool:
    """Whether ``code`` is the bytecode Dynamo made for a frame (not the user's own)."""
    try:
        from torch._dynamo.utils import orig_code_map
    except ImportError:  # pragma: no cover
        return False
    try:
        return code in orig_code_map
    except TypeError:  # an unhashable code object (a dict constant): not one of Dynamo's
        return False


def line_of(mark: str) -> tuple[str, int]:
    """(file, line) of a range :class:`LineMarks` opened (the profiler keeps only a range's
    name: the mark's ``file:line`` is read back here, where it is written); ("", 0) for any
    other range."""
    if not mark.startswith(LINE_MARK):
        return "", 0
    filename, _, number = mark[len(LINE_MARK):].rpartition(":")
    return filename, int(number) if number.isdigit() else 0
