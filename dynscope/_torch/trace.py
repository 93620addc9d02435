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
    """One kept trace event."""

    name: str  # event name, or the artifact's name for artifacts
    compile_id: str  # "frame/compile", "" when the event had none
    attempt: int  # Dynamo's restart attempt (0 first)
    metadata: dict[str, Any] = field(default_factory=dict)  # the event's own metadata
    payload: str = ""  # the event's text, "" when none


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
        if isinstance(metadata, dict) and records.STR in metadata:
            entry = metadata[records.STR]
            if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[1], int):
                with self._lock_events:
                    self.strings[entry[1]] = str(entry[0])
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
    name = _event_name(metadata, lowering)
    if name is None or not records.wanted(name, payload):
        return None
    if name in records.NAME_ONLY:
        payload = ""
    frame_id = metadata.get("frame_id")
    compile_id = f"{frame_id}/{metadata.get('frame_compile_id')}" if frame_id is not None else ""
    body = metadata.get(_body_key(name))
    body = body if isinstance(body, dict) else {}
    if name in records.USER_STACK_ONLY:
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


def _body_key(name: str) -> str:
    """The metadata key holding a kept record's own fields: its kind for a top-level kind
    (inductor_post_grad_graph's artifact form too, which holds none), else its container."""
    if name in records.KEPT_EVENTS or name in records.LOWERING_EVENTS:
        return name
    return records.GRAPH_DUMP if name in records.AOT_DUMPS else records.ARTIFACT


def _event_name(metadata: dict[str, Any], lowering: bool) -> str | None:
    for key in records.ALWAYS_ORDER:
        if key in metadata:
            return key
    if lowering:
        for key in records.LOWERING_ORDER:
            if key in metadata:
                return key
    artifact = metadata.get(records.ARTIFACT)
    if isinstance(artifact, dict):
        art = artifact.get("name")
        if art in records.KEPT_ARTIFACTS or (lowering and art in records.LOWERING_ARTIFACTS):
            return str(art)
    dump = metadata.get(records.GRAPH_DUMP)
    if lowering and isinstance(dump, dict) and dump.get("name") in records.AOT_DUMPS:
        return str(dump["name"])
    return None
