"""Collect PyTorch's structured compile trace in process.

A :class:`TraceCollector` is a logging handler for the ``torch.__trace`` logger (the one
TORCH_TRACE and tlparse read). It keeps the few events dynscope needs as plain dicts and
drops the rest at once, so watching a long training loop stays cheap.

Record layout (torch 2.2 .. 2.14): ``record.metadata`` is a dict with the event name as a
key (or ``artifact: {"name": ...}``) plus ``frame_id``, ``frame_compile_id``, ``attempt``;
``record.payload`` holds the text, when there is one. Which kinds are kept, and what of
them, is the registry's (:mod:`dynscope._torch.records`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynscope._hooks import Hook
from dynscope._torch import records

if TYPE_CHECKING:
    from collections.abc import Iterator


@dataclass(frozen=True)
class TraceEvent:
    """One kept trace event, and the typed record its kind's parser reads from it."""

    name: str  # event name, or the artifact's name for artifacts
    compile_id: str  # "frame/compile", "" when the event had none
    attempt: int  # Dynamo's restart attempt (0 first)
    metadata: dict[str, Any] = field(default_factory=dict)  # the event's own metadata
    payload: str = ""  # the event's text, "" when none

    @functools.cached_property
    def record(self) -> Any:
        """What this event says, as its kind's parser in the registry reads it (records.parse):
        ``CompileMetrics``, ``ParsedBreak``, a tuple of ``Guard``...; None when it could not be
        read. Parsed once, on first ask (eagerly, a collector would parse inside the user's
        compile, and a log read for its counts would parse every payload): an event renamed
        or renumbered with ``dataclasses.replace`` is a new event, read afresh."""
        return records.parse(self)


#: How deep in dynscope's own measurement work (its timing and memory compiles) this context
#: is: a collector made outside it keeps none of the records that work logs.
_OWN_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("dynscope_own_work", default=0)


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """dynscope's own compiles and runs for the block (``timing=True``, ``memory=True``): a
    ``capture()`` open around ``report()`` (a pytest ``compile_budget`` marker) does not see
    them as the program's; the recorders made inside the block do."""
    token = _OWN_DEPTH.set(_OWN_DEPTH.get() + 1)
    try:
        yield
    finally:
        _OWN_DEPTH.reset(token)


def own_depth() -> int:
    """How deep in :func:`own_work` this context is (0: the program's own code)."""
    return _OWN_DEPTH.get()


class TraceCollector(logging.Handler):
    """Logging handler that keeps dynscope's trace events, in arrival order."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.depth = _OWN_DEPTH.get()  # records of deeper own work are not this collector's
        self.events: list[TraceEvent] = []
        # PyTorch's interned strings ("str" records): the file names its stacks give by number.
        self.strings: dict[int, str] = {}
        self._lock_events = threading.Lock()
        # When set, only records logged by this thread (threading.get_ident()) are kept.
        self.thread: int | None = None
        # Also keep what AOTAutograd and Inductor log (only Inductor compiles log it).
        self.lowering = False
        self._hook = Hook("trace collector")

    def emit(self, record: logging.LogRecord) -> None:
        # A handler's error would raise out of PyTorch's logging call, into the compile:
        # guarded, it costs the records from here on (dynscope._hooks), never the compile.
        if self._hook.off:
            return
        try:
            self._hook.check()
            self._emit(record)
        except Exception as err:  # noqa: BLE001 - never into PyTorch's compile
            self._hook.failed(err)

    def _emit(self, record: logging.LogRecord) -> None:
        if self.thread is not None and record.thread != self.thread:
            return
        if _OWN_DEPTH.get() > self.depth:
            return
        metadata = getattr(record, "metadata", None)
        string = records.interned(metadata) if isinstance(metadata, dict) else None
        if string is not None:
            if string[0] >= 0:
                with self._lock_events:
                    self.strings[string[0]] = string[1]
            return
        event = event_from(metadata, getattr(record, "payload", None), lowering=self.lowering, strings=self.strings)
        if event is None:
            return
        with self._lock_events:
            self.events.append(event)

    def snapshot(self) -> list[TraceEvent]:
        """A copy of the events so far."""
        with self._lock_events:
            return list(self.events)


def event_from(
    metadata: Any, payload: Any, *, lowering: bool = False, strings: dict[int, str] | None = None
) -> TraceEvent | None:
    """The kept event for one trace record's metadata and payload; None if not kept.

    With ``lowering``, AOTAutograd's and Inductor's events are kept too. Also reads records
    stored as JSON (tests/traces), which carry the same two fields. ``strings``: the
    interned strings read so far, to put file names back into the event's stacks.
    """
    if not isinstance(metadata, dict):
        return None
    name = records.kind_of(metadata, lowering=lowering)
    if name is None or not records.wanted(name, payload):
        return None
    kind = records.REGISTRY[name]
    if not kind.payload:
        payload = ""
    elif kind.compact is not None and isinstance(payload, str) and payload:
        payload = kind.compact(payload)
    frame_id = metadata.get("frame_id")
    compile_id = f"{frame_id}/{metadata.get('frame_compile_id')}" if frame_id is not None else ""
    body = metadata.get(kind.body_key)
    body = body if isinstance(body, dict) else {}
    if kind.user_stack_only:
        body = {k: v for k, v in body.items() if k != "stack"}
    if strings:
        body = with_files(body, strings)
    return TraceEvent(
        name=name,
        compile_id=compile_id,
        attempt=int(metadata.get("attempt") or 0),
        metadata=body,
        payload=payload if isinstance(payload, str) else "",
    )


def with_files(body: dict[str, Any], strings: dict[int, str]) -> dict[str, Any]:
    """An event body with the interned file numbers of its stacks put back as file names
    (a copy where anything changed)."""
    out = body
    for key in ("stack", "user_stack"):
        frames = body.get(key)
        if isinstance(frames, list) and any(isinstance(f, dict) and isinstance(f.get("filename"), int) for f in frames):
            if out is body:
                out = dict(body)
            out[key] = [
                {**f, "filename": strings.get(f["filename"], str(f["filename"]))}
                if isinstance(f, dict) and isinstance(f.get("filename"), int) else f
                for f in frames
            ]
    return out
