"""The structured compile trace's logger, compile ids, and callbacks around compiles.

Each use is feature-detected and says which torch it was written against. Checked on torch
2.11, 2.13 and 2.14 (scripts/compat.sh).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from dynscope._hooks import Hook
from dynscope._lexicon.wording import TRACE_LOGGER_NAME

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# -- the structured compile trace --------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The logger behind TORCH_TRACE / tlparse (``torch.__trace``)."""
    try:
        from torch._logging._internal import trace_log  # torch >= 2.2

        return trace_log
    except ImportError:  # pragma: no cover - older layouts
        return logging.getLogger(TRACE_LOGGER_NAME)


@contextlib.contextmanager
def attached(handler: logging.Handler) -> Iterator[None]:
    """Attach ``handler`` to the trace logger and restore the logger exactly afterwards.

    PyTorch only builds trace events while the logger has a handler, and the logger must
    stay at DEBUG and not propagate, or events leak into the user's root logger.
    """
    log = trace_logger()
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


def interned_strings() -> dict[int, str]:
    """number -> string of PyTorch's trace string table (file names in stacks are given by
    number; torch._logging.structured.INTERN_TABLE, torch 2.2 .. 2.14); {} where missing."""
    try:
        from torch._logging.structured import INTERN_TABLE
    except ImportError:  # pragma: no cover - older layouts
        return {}
    return {n: s for s, n in dict(INTERN_TABLE).items()}


# -- compile ids -------------------------------------------------------------------------


def current_compile_id() -> str:
    """Dynamo's "frame/compile" id of the compile in progress, or "" outside one."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - no context means no id
        return ""
    if cid is None or getattr(cid, "frame_id", None) is None:
        return ""
    return f"{cid.frame_id}/{cid.frame_compile_id}"


# -- compile callbacks --------------------------------------------------------------------


@contextlib.contextmanager
def around_compiles(on_start: Callable[[], None], on_end: Callable[[], None]) -> Iterator[None]:
    """Call ``on_start``/``on_end`` around every Dynamo compile in the block.

    Uses ``torch._dynamo.callback`` (torch >= 2.5); a no-op where it is missing.
    """
    try:
        from torch._dynamo.callback import callback_handler

        register_start = callback_handler.register_start_callback
        register_end = callback_handler.register_end_callback
    except (ImportError, AttributeError):  # pragma: no cover - older torch: no pausing
        yield
        return

    # Called inside every Dynamo compile: guarded (dynscope._hooks), never into the compile.
    hook = Hook("compile callbacks")

    def start(*_: Any) -> None:
        hook.call(on_start, default=None)

    def end(*_: Any) -> None:
        hook.call(on_end, default=None)

    register_start(start)
    register_end(end)
    try:
        yield
    finally:
        callback_handler.remove_start_callback(start)
        callback_handler.remove_end_callback(end)
