"""Collect PyTorch's structured compile trace in process.

A :class:`TraceCollector` is a logging handler for the ``torch.__trace`` logger (the one
TORCH_TRACE and tlparse read). It keeps the few events dynscope needs as plain dicts and
drops the rest at once, so watching a long training loop stays cheap.

Record layout (torch 2.2 .. 2.14): ``record.metadata`` is a dict with the event name as a
key (or ``artifact: {"name": ...}``) plus ``frame_id``, ``frame_compile_id``, ``attempt``;
``record.payload`` holds the text, when there is one.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Top-level event names kept; everything else is dropped on arrival.
KEPT_EVENTS = frozenset(
    {"dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics",
     "create_symbol",  # a dynamic size's symbol and the value it ran at (inputs of trace-only graphs)
     # a piece of a compile's graph DDP's optimizer split at gradient buckets, logged inside
     # the backend compile: the pieces of graphs dynscope's backend did not see (the user's
     # own backend, a trace file)
     "optimize_ddp_split_child",
     # where sizes came from: a dynamic size the program fixed, a shape guard, each with
     # its user line (Frame.shapes)
     "symbolic_shape_specialization", "guard_added_fast"}
)
#: Of those, events whose full Python stack ("stack") is dropped on arrival: only the user's
#: frames ("user_stack") are read, and a dynamic model logs hundreds of shape guards.
_USER_STACK_ONLY = frozenset({"symbolic_shape_specialization", "guard_added_fast", "create_symbol"})
#: Artifact names kept.
KEPT_ARTIFACTS = frozenset({"dynamo_graph_break_reason", "recompile_reasons"})
#: Kept too when a collector watches lowering (what AOTAutograd and Inductor did): the AOT
#: graphs, Inductor's output code, provenance, cache results and compile steps.
LOWERING_EVENTS = frozenset(
    {
        "aot_forward_graph",
        "aot_backward_graph",
        "aot_inference_graph",
        "inductor_output_code",
        "chromium_event",
        "inductor_post_grad_graph",  # an event on a cache hit, an artifact otherwise
    }
)
LOWERING_ARTIFACTS = frozenset(
    {
        "inductor_post_grad_graph",
        "inductor_provenance_tracking_node_mappings",
        "inductor_provenance_tracking_kernel_stack_traces",
        "fx_graph_cache_hit",
        "fx_graph_cache_miss",
        "fx_graph_cache_bypass",
        "aotautograd_cache_hit",
        "aotautograd_cache_miss",
        "aotautograd_cache_bypass",
        "inductor_collective_schedule",  # the collectives Inductor scheduled, in order (JSON list)
        "graph_execution",  # the compiled graphs in the order they ran ({"graph_execution_order": [...]})
    }
)
#: AOTInductor's generated C++ (``graph_dump`` records, kept with lowering): the wrapper, whose
#: comments name each kernel's source nodes and ATen ops as the Python wrapper's do, and the kernels.
AOT_DUMPS = frozenset({"inductor_aot_wrapper_code", "inductor_aot_kernel_code"})
#: Of those, artifacts whose payload is not needed (cache keys run to 70 KB each).
_NAME_ONLY = frozenset(a for a in LOWERING_ARTIFACTS if "_cache_" in a)
#: Compile-step events worth keeping: begin and end of a step ("B"/"E"), not instants.
_STEP_PHASES = ('"ph": "B"', '"ph": "E"')


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

    def emit(self, record: logging.LogRecord) -> None:
        if self.thread is not None and record.thread != self.thread:
            return
        if _OWN_DEPTH.get() > self.depth:
            return
        metadata = getattr(record, "metadata", None)
        if isinstance(metadata, dict) and "str" in metadata:
            entry = metadata["str"]
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
    if name is None:
        return None
    if name == "chromium_event" and not (isinstance(payload, str) and any(p in payload for p in _STEP_PHASES)):
        return None
    if name in _NAME_ONLY:
        payload = ""
    frame_id = metadata.get("frame_id")
    compile_id = f"{frame_id}/{metadata.get('frame_compile_id')}" if frame_id is not None else ""
    body = metadata.get(
        name if name in KEPT_EVENTS or name in LOWERING_EVENTS else "graph_dump" if name in AOT_DUMPS else "artifact")
    body = body if isinstance(body, dict) else {}
    if name in _USER_STACK_ONLY:
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


def kept_kind(kind: str, *, lowering: bool = False) -> bool:
    """True when records of this kind (an event's name or an artifact's) are kept."""
    return kind in KEPT_EVENTS or kind in KEPT_ARTIFACTS or (
        lowering and (kind in LOWERING_EVENTS or kind in LOWERING_ARTIFACTS or kind in AOT_DUMPS))


def _event_name(metadata: dict[str, Any], lowering: bool) -> str | None:
    for key in KEPT_EVENTS:
        if key in metadata:
            return key
    if lowering:
        for key in LOWERING_EVENTS:
            if key in metadata:
                return key
    artifact = metadata.get("artifact")
    if isinstance(artifact, dict):
        art = artifact.get("name")
        if art in KEPT_ARTIFACTS or (lowering and art in LOWERING_ARTIFACTS):
            return str(art)
    dump = metadata.get("graph_dump")
    if lowering and isinstance(dump, dict) and dump.get("name") in AOT_DUMPS:
        return str(dump["name"])
    return None

