"""PyTorch's structured-trace record kinds, in one registry: the only place that names them.

Each record the ``torch.__trace`` logger writes (in process, or to a TORCH_TRACE log) has a
kind: the first key of its metadata (``{"dynamo_start": {...}, ...}``), or, for the two
containers, the name inside (``{"artifact": {"name": "recompile_reasons"}}``,
``{"graph_dump": {"name": "inductor_aot_wrapper_code"}}``). For each kind dynscope knows, the
registry says when it is kept (always, only while lowering is watched, read apart by the
collector or the log reader, or skipped on purpose), what of it is kept (its payload, or only the user's frames of
its stack), and which function of ``_torch`` reads it into its typed record (``CompileMetrics``,
``ParsedBreak``, ``Guard``...). The collector (``trace``) and the log reader (``trace_log``)
build what they keep from it; each kept event is read through its kind's parser once, where
it enters (``TraceEvent.record``, on first ask: a log of a million records read for its counts
never parses their payloads), and ``_capture`` folds those records through its handler tables
(kind -> handler), never testing a kind itself. A new kind is a record type, one entry here and
one handler. A kind in no entry is counted as unknown by the log reader
(``Report.unparsed_kinds``), so a new kind in a new release is seen, not lost (tlparse's one
``Envelope`` with a catch-all, read the same way).

Kinds as torch 2.11 .. 2.15 write them (torch/_dynamo, torch/_inductor, torch/_functorch,
torch/fx/experimental/symbolic_shapes.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynscope._torch import cache_keys
from dynscope._torch import lowering_text as lt
from dynscope._torch.bounded_json import MAX_JSON_DEPTH, json_too_deep
from dynscope._torch.break_report import parse_break
from dynscope._torch.guard_text import parse_guards, parse_recompile_reasons
from dynscope._torch.metrics import read_metrics

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from dynscope._torch.trace import TraceEvent

# -- the containers: records whose kind is the name inside them ----------------------------
ARTIFACT = "artifact"
GRAPH_DUMP = "graph_dump"

# -- Dynamo: kept always -------------------------------------------------------------------
DYNAMO_START = "dynamo_start"
DYNAMO_OUTPUT_GRAPH = "dynamo_output_graph"
DYNAMO_CPP_GUARDS_STR = "dynamo_cpp_guards_str"
COMPILATION_METRICS = "compilation_metrics"
CREATE_SYMBOL = "create_symbol"
OPTIMIZE_DDP_SPLIT_CHILD = "optimize_ddp_split_child"
SYMBOLIC_SHAPE_SPECIALIZATION = "symbolic_shape_specialization"
GUARD_ADDED_FAST = "guard_added_fast"
DYNAMO_GRAPH_BREAK_REASON = "dynamo_graph_break_reason"
RECOMPILE_REASONS = "recompile_reasons"

# -- AOTAutograd and Inductor: kept while lowering is watched ---------------------------------
AOT_FORWARD_GRAPH = "aot_forward_graph"
AOT_BACKWARD_GRAPH = "aot_backward_graph"
AOT_INFERENCE_GRAPH = "aot_inference_graph"
INDUCTOR_OUTPUT_CODE = "inductor_output_code"
CHROMIUM_EVENT = "chromium_event"
INDUCTOR_POST_GRAD_GRAPH = "inductor_post_grad_graph"
PROVENANCE_NODE_MAPPINGS = "inductor_provenance_tracking_node_mappings"
PROVENANCE_KERNEL_STACK_TRACES = "inductor_provenance_tracking_kernel_stack_traces"
FX_GRAPH_CACHE_HIT = "fx_graph_cache_hit"
FX_GRAPH_CACHE_MISS = "fx_graph_cache_miss"
FX_GRAPH_CACHE_BYPASS = "fx_graph_cache_bypass"
AOTAUTOGRAD_CACHE_HIT = "aotautograd_cache_hit"
AOTAUTOGRAD_CACHE_MISS = "aotautograd_cache_miss"
AOTAUTOGRAD_CACHE_BYPASS = "aotautograd_cache_bypass"
INDUCTOR_COLLECTIVE_SCHEDULE = "inductor_collective_schedule"
INDUCTOR_RUNTIME_META = "inductor_runtime_and_tensor_meta"
GRAPH_EXECUTION = "graph_execution"
INDUCTOR_AOT_WRAPPER_CODE = "inductor_aot_wrapper_code"
INDUCTOR_AOT_KERNEL_CODE = "inductor_aot_kernel_code"

# -- read by the collector or the log reader themselves, never an event ------------------------
STR = "str"  # an interned string: later stacks give a file as its number
TORCH_VERSION = "torch_version"

#: Where a kind's record is found: a top-level key, or a name inside a container.
EVENT, IN_ARTIFACT, IN_GRAPH_DUMP = "event", ARTIFACT, GRAPH_DUMP
#: When a kind is kept.
ALWAYS, LOWERING, APART, SKIPPED = "always", "lowering", "read apart", "skipped"


@dataclass(frozen=True)
class RecordKind:
    """What dynscope does with one kind of trace record."""

    name: str
    where: tuple[str, ...]  # EVENT, IN_ARTIFACT, IN_GRAPH_DUMP (inductor_post_grad_graph is both of the first two)
    kept: str  # ALWAYS, LOWERING, APART (read by the collector or log reader, never an event), SKIPPED
    payload: bool = True  # False: the payload is dropped on arrival
    # On arrival the payload is cut to what the parser reads (a cache record's 70 KB of key
    # parts -> each part's name, hash and a short value): what a long job keeps stays small.
    compact: Callable[[str], str] | None = None
    user_stack_only: bool = False  # True: the full Python stack is dropped, the user's frames kept
    # Of a kept kind, whether a record is wanted, from its payload (chromium_event: steps only).
    accept: Callable[[str], bool] | None = None
    parser: Callable[[TraceEvent], object] | None = None  # what the readers read from it
    reads: str = ""  # that, in words
    # The fields of its own body (the metadata under its kind) dynscope reads, and what each
    # must be (a check of CHECKS); ``validate`` holds every record that enters to them.
    fields: Mapping[str, str] = field(default_factory=dict)
    json_payload: bool = False  # its payload is JSON: nested past MAX_JSON_DEPTH, it is not read
    # Its text names a frame's inputs by their guard sources (``L['args'][0]``): renamed for a
    # decorator's wrapper frame (Inductor's output code has ``args`` of its own, so not all are).
    names_inputs: bool = False

    @property
    def body_key(self) -> str:
        """The metadata key holding a record's own fields: its kind for a top-level kind
        (inductor_post_grad_graph's artifact form too, which holds none), else its container."""
        if EVENT in self.where:
            return self.name
        return GRAPH_DUMP if IN_GRAPH_DUMP in self.where else ARTIFACT


@dataclass(frozen=True)
class CreatedSymbol:
    """One ``create_symbol`` record: a size made dynamic (ShapeEnv.create_symbol logs
    ``{"symbol": "s77", "val": "4", "source": "L['x'].size()[0]", ...}``, torch 2.13)."""

    symbol: str
    value: int | None  # the size it was created at; None when not an integer
    source: str | None  # the guard source of the size it stands for; None when not given


def created_symbol(body: Mapping[str, Any]) -> CreatedSymbol | None:
    """The typed record of a ``create_symbol`` event's body (``TraceEvent.metadata``); None
    without a symbol name."""
    symbol, val, source = body.get("symbol"), str(body.get("val", "")), body.get("source")
    if not isinstance(symbol, str):
        return None
    return CreatedSymbol(
        symbol=symbol,
        value=int(val) if val.lstrip("-").isdigit() else None,
        source=source if isinstance(source, str) else None,
    )


#: A cache artifact's kind -> (which cache, what it says).
CACHE_RESULTS: dict[str, tuple[str, str]] = {
    FX_GRAPH_CACHE_HIT: ("fx_graph", "hit"),
    FX_GRAPH_CACHE_MISS: ("fx_graph", "miss"),
    FX_GRAPH_CACHE_BYPASS: ("fx_graph", "bypass"),
    AOTAUTOGRAD_CACHE_HIT: ("aot_autograd", "hit"),
    AOTAUTOGRAD_CACHE_MISS: ("aot_autograd", "miss"),
    AOTAUTOGRAD_CACHE_BYPASS: ("aot_autograd", "bypass"),
}
#: An AOT graph's kind -> which graph it is.
AOT_GRAPHS: dict[str, str] = {
    AOT_FORWARD_GRAPH: "forward", AOT_BACKWARD_GRAPH: "backward", AOT_INFERENCE_GRAPH: "inference",
}

#: Compile-step events worth keeping: begin and end of a step ("B"/"E"), not instants.
_STEP_PHASES = ('"ph": "B"', '"ph": "E"')


def _is_step(payload: str) -> bool:
    return any(p in payload for p in _STEP_PHASES)


def _payload(ev: TraceEvent) -> str:
    return ev.payload


def _body(ev: TraceEvent) -> dict[str, Any]:
    return ev.metadata


# -- what a field must be: the checks of ``validate`` ----------------------------------------
INT, NUMBER, TEXT, LIST = "an int", "a finite number", "a string", "a list"
STRS = "a list of strings"
SCALAR = "a string or a number"
FRAMES = "a list of stack frames"  # objects: filename a string (or an interned string's number), line an int, name and loc strings

#: What ``compilation_metrics`` fields dynscope reads must be (metrics.read_metrics,
#: trace_report's version). PyTorch writes null for what it has no value for.
_METRICS_FIELDS: dict[str, str] = {
    "co_name": TEXT, "co_filename": TEXT, "co_firstlineno": INT, "entire_frame_compile_time_s": NUMBER,
    "backend_compile_time_s": NUMBER, "inductor_compile_time_s": NUMBER, "guard_count": INT, "graph_op_count": INT,
    "graph_node_count": INT, "fail_type": TEXT, "fail_reason": TEXT, "restart_reasons": LIST,
    "recompile_reason": TEXT, "pytorch_version": TEXT,
}


def _dynamo_kinds() -> list[RecordKind]:
    return [
        RecordKind(DYNAMO_START, (EVENT,), ALWAYS, parser=lambda ev: ev.metadata.get("stack") or [],
                   reads="the stack Dynamo starts on (a first name for the frame)", fields={"stack": FRAMES}),
        RecordKind(DYNAMO_OUTPUT_GRAPH, (EVENT,), ALWAYS, parser=_payload, reads="the graph's printed code"),
        RecordKind(DYNAMO_CPP_GUARDS_STR, (EVENT,), ALWAYS, parser=lambda ev: parse_guards(ev.payload, ev.compile_id),
                   reads="the compile's guards (Guard)", names_inputs=True),
        RecordKind(COMPILATION_METRICS, (EVENT,), ALWAYS, parser=lambda ev: read_metrics(ev.metadata),
                   reads="the compile's numbers (CompileMetrics)", fields=_METRICS_FIELDS),
        RecordKind(CREATE_SYMBOL, (EVENT,), ALWAYS, user_stack_only=True, parser=lambda ev: created_symbol(ev.metadata),
                   reads="a dynamic size's symbol and the value it ran at (CreatedSymbol)", names_inputs=True,
                   fields={"symbol": TEXT, "val": SCALAR, "source": TEXT, "stack": FRAMES, "user_stack": FRAMES}),
        # a piece of a compile's graph DDP's optimizer split at gradient buckets, logged inside
        # the backend compile: the pieces of graphs dynscope's backend did not see
        RecordKind(OPTIMIZE_DDP_SPLIT_CHILD, (EVENT,), ALWAYS, parser=_payload, reads="a DDP piece's printed code",
                   fields={"name": TEXT}),
        # where sizes came from: a dynamic size the program fixed, a shape guard, each with
        # its user line (a dynamic model logs hundreds of shape guards: their stacks are dropped)
        RecordKind(SYMBOLIC_SHAPE_SPECIALIZATION, (EVENT,), ALWAYS, user_stack_only=True, parser=_body,
                   reads="a size the program fixed, with its user line (SizeFix)", names_inputs=True,
                   fields={"symbol": TEXT, "sources": STRS, "value": SCALAR, "reason": TEXT, "stack": FRAMES,
                           "user_stack": FRAMES}),
        RecordKind(GUARD_ADDED_FAST, (EVENT,), ALWAYS, user_stack_only=True, parser=_body,
                   reads="a shape guard, with its user line (SizeFix)", names_inputs=True,
                   fields={"expr": TEXT, "stack": FRAMES, "user_stack": FRAMES}),
        RecordKind(DYNAMO_GRAPH_BREAK_REASON, (IN_ARTIFACT,), ALWAYS, parser=lambda ev: parse_break(ev.payload),
                   reads="one graph break (ParsedBreak)"),
        RecordKind(RECOMPILE_REASONS, (IN_ARTIFACT,), ALWAYS, parser=lambda ev: parse_recompile_reasons(ev.payload),
                   reads="the guards that failed before a recompile", json_payload=True, names_inputs=True),
    ]


def _lowering_kinds() -> list[RecordKind]:
    graph = "an FX graph printed by print_readable (GraphText)"
    return [
        *(RecordKind(k, (EVENT,), LOWERING, parser=lambda ev: lt.parse_graph_text(ev.payload), reads=graph)
          for k in AOT_GRAPHS),
        RecordKind(INDUCTOR_OUTPUT_CODE, (EVENT,), LOWERING, parser=_payload, reads="Inductor's Python wrapper"),
        RecordKind(CHROMIUM_EVENT, (EVENT,), LOWERING, accept=_is_step, compact=cache_keys.without_key_parts,
                   parser=lambda ev: lt.read_chromium(ev.payload),
                   reads="the begin or end of a compile step", json_payload=True),
        # an event on a cache hit, an artifact otherwise
        RecordKind(INDUCTOR_POST_GRAD_GRAPH, (EVENT, IN_ARTIFACT), LOWERING,
                   parser=lambda ev: lt.parse_graph_text(ev.payload), reads=graph),
        RecordKind(PROVENANCE_NODE_MAPPINGS, (IN_ARTIFACT,), LOWERING, parser=lambda ev: lt.read_provenance(ev.payload),
                   reads="kernel -> post-grad nodes -> Dynamo nodes (Provenance)", json_payload=True),
        RecordKind(PROVENANCE_KERNEL_STACK_TRACES, (IN_ARTIFACT,), LOWERING,
                   parser=lambda ev: lt.read_kernel_lines(ev.payload), reads="each kernel's user lines", json_payload=True),
        *(RecordKind(k, (IN_ARTIFACT,), LOWERING, compact=cache_keys.compact, json_payload=True,
                     parser=lambda ev: cache_keys.read_lookup(ev, *CACHE_RESULTS[ev.name]),
                     reads="one cache lookup: which cache, hit/miss/bypass, its key and key parts (CacheLookup)")
          for k in CACHE_RESULTS),
        RecordKind(INDUCTOR_COLLECTIVE_SCHEDULE, (IN_ARTIFACT,), LOWERING,
                   parser=lambda ev: lt.read_collective_schedule(ev.payload),
                   reads="the collectives Inductor scheduled, in order", json_payload=True),
        RecordKind(INDUCTOR_RUNTIME_META, (IN_ARTIFACT,), LOWERING, parser=lambda ev: lt.read_runtime_meta(ev.payload),
                   reads="a digest of Inductor's runtime estimates and tensor metadata", json_payload=True),
        RecordKind(GRAPH_EXECUTION, (IN_ARTIFACT,), LOWERING, parser=lambda ev: lt.read_execution_order(ev.payload),
                   reads="the compiled graphs in the order they ran", json_payload=True),
        # AOTInductor's generated C++: the wrapper, whose comments name each kernel's source
        # nodes and ATen ops as the Python wrapper's do, and the kernels
        RecordKind(INDUCTOR_AOT_WRAPPER_CODE, (IN_GRAPH_DUMP,), LOWERING,
                   parser=lambda ev: lt.aot_wrapper_kernels(ev.payload), reads="AOTInductor's kernel calls (AotKernel)"),
        RecordKind(INDUCTOR_AOT_KERNEL_CODE, (IN_GRAPH_DUMP,), LOWERING, parser=_payload,
                   reads="AOTInductor's kernels' C++"),
    ]


#: Top-level kinds PyTorch writes that dynscope reads nothing from on purpose (the
#: ``trace_structured`` names of torch 2.11, 2.13 and 2.14). Artifacts are a container PyTorch
#: fills with dozens of names, some per function (``..._ORIGINAL_BYTECODE``): those dynscope
#: does not read are skipped without a count.
_SKIPPED_NAMES = (
    "aot_joint_graph", "bwd_compilation_metrics", "compiled_autograd_graph", "create_unbacked_symbol",
    "describe_source", "describe_storage", "describe_tensor", "dump_file", "dynamo_guards", "export",
    "exported_program", "expression_created", GRAPH_DUMP, "guard_added",
    "guard_on_data_dependent_error", "inductor_input_graph", "link", "mismatched_fake_kernel",
    "missing_fake_kernel", "propagate_real_tensors", "propagate_real_tensors_provenance",
    "unbacked_symbol_created",
)


def _other_kinds() -> list[RecordKind]:
    return [
        RecordKind(STR, (EVENT,), APART, reads="an interned string (the file names of later stacks)"),
        RecordKind(TORCH_VERSION, (IN_ARTIFACT,), APART, reads="the torch release that wrote the log", json_payload=True),
        *(RecordKind(k, (EVENT,), SKIPPED) for k in _SKIPPED_NAMES),
    ]


#: kind -> what dynscope does with it.
REGISTRY: dict[str, RecordKind] = {k.name: k for k in (*_dynamo_kinds(), *_lowering_kinds(), *_other_kinds())}


def _names(kept: str, where: str) -> tuple[str, ...]:
    return tuple(k.name for k in REGISTRY.values() if k.kept == kept and where in k.where)


#: Top-level kinds kept always, and artifacts kept always.
KEPT_EVENTS = frozenset(_names(ALWAYS, EVENT))
KEPT_ARTIFACTS = frozenset(_names(ALWAYS, IN_ARTIFACT))
#: Kept too when a collector watches lowering (what AOTAutograd and Inductor did).
LOWERING_EVENTS = frozenset(_names(LOWERING, EVENT))
LOWERING_ARTIFACTS = frozenset(_names(LOWERING, IN_ARTIFACT))
AOT_DUMPS = frozenset(_names(LOWERING, IN_GRAPH_DUMP))
#: Every kind kept while lowering is watched (one compile's lowering records).
LOWERING_KINDS = LOWERING_EVENTS | LOWERING_ARTIFACTS | AOT_DUMPS
#: Top-level kinds, in registry order, for finding a record's kind among its metadata's keys.
ALWAYS_ORDER = _names(ALWAYS, EVENT)
LOWERING_ORDER = _names(LOWERING, EVENT)
#: Kinds whose payload, and kinds whose full stack, are dropped on arrival; kinds whose payload
#: is cut to what their parser reads.
NAME_ONLY = frozenset(k.name for k in REGISTRY.values() if not k.payload)
COMPACTED = frozenset(k.name for k in REGISTRY.values() if k.compact is not None)
USER_STACK_ONLY = frozenset(k.name for k in REGISTRY.values() if k.user_stack_only)
#: Read besides the kept events, by the readers themselves: interned strings, the torch version.
READ_APART = frozenset(k.name for k in REGISTRY.values() if k.kept == APART)


def kind_of(metadata: Mapping[str, Any], *, lowering: bool = False) -> str | None:
    """The kind of a record to keep, from its metadata (a top-level key, or the name inside a
    container); None when no record of its kind is kept (``lowering``: AOTAutograd's and
    Inductor's are kept too)."""
    for key in ALWAYS_ORDER:
        if key in metadata:
            return key
    if lowering:
        for key in LOWERING_ORDER:
            if key in metadata:
                return key
    artifact = metadata.get(ARTIFACT)
    if isinstance(artifact, dict):
        art = artifact.get("name")
        if art in KEPT_ARTIFACTS or (lowering and art in LOWERING_ARTIFACTS):
            return str(art)
    dump = metadata.get(GRAPH_DUMP)
    if lowering and isinstance(dump, dict) and dump.get("name") in AOT_DUMPS:
        return str(dump["name"])
    return None


def of_kind(events: Iterable[TraceEvent], kind: str) -> Iterator[TraceEvent]:
    """The events of one kind, in order: for a reader that wants one kind's records, not a fold
    of every kind (that is a handler table's: ``_capture.assemble``, ``_capture.lowering``)."""
    return (ev for ev in events if ev.name == kind)


def interned(metadata: Mapping[str, Any]) -> tuple[int, str] | None:
    """(number, text) of an interned-string record (``{"str": [text, n]}``); None for a record
    of another kind. A damaged one is ``(-1, "")``."""
    if STR not in metadata:
        return None
    entry = metadata[STR]
    if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], int):
        return entry[1], entry[0]
    return -1, ""


def is_container(key: str) -> bool:
    """True for a container's key (artifact, graph dump): the record's kind is the name inside."""
    return key in (ARTIFACT, GRAPH_DUMP)


def kept_in_log(kind: str, *, in_graph_dump: bool) -> bool:
    """True when the log reader keeps a record of this kind (lowering's kinds included, and the
    kinds read apart). AOTInductor's code is read from graph dumps only (an artifact of that
    name is not it)."""
    if kind in READ_APART:
        return True
    return kept_kind(kind, lowering=True) and (in_graph_dump or IN_GRAPH_DUMP not in REGISTRY[kind].where)


def kept_kind(kind: str, *, lowering: bool = False) -> bool:
    """True when records of this kind (an event's name or an artifact's) are kept."""
    entry = REGISTRY.get(kind)
    return entry is not None and (entry.kept == ALWAYS or (lowering and entry.kept == LOWERING))


def wanted(kind: str, payload: object) -> bool:
    """False for a record of a kept kind whose payload says it is not wanted (a
    ``chromium_event`` that is not a step's begin or end)."""
    entry = REGISTRY.get(kind)
    if entry is None or entry.accept is None:
        return True
    return isinstance(payload, str) and entry.accept(payload)


def is_unknown(kind: str, *, in_container: bool) -> bool:
    """True for a record kind dynscope does not know, which the log reader counts. A name
    in a container (artifact, graph dump) dynscope does not read is skipped uncounted."""
    return not in_container and kind not in REGISTRY


def unknown_kind(kind: str) -> str:
    """The unparsed_kinds label of a record kind dynscope does not know."""
    return f"record kind {kind!r} not known to dynscope"


def parse(ev: TraceEvent) -> object:
    """What the readers read from one kept event, through its kind's parser; None for a kind
    with no parser."""
    entry = REGISTRY.get(ev.name)
    return entry.parser(ev) if entry is not None and entry.parser is not None else None


# -- the one validation step: every record that enters is held to its kind's schema ----------

#: What every record may carry beside its kind: its compile id, restart attempt, rank, the
#: MD5 of its payload.
COMMON_FIELDS: dict[str, str] = {
    "frame_id": INT, "frame_compile_id": INT, "attempt": INT, "rank": INT, "has_payload": TEXT,
}
#: Common fields without which a record means nothing (which compile it is of): a record
#: whose one of these is damaged is left out whole.
_IDENTITY = frozenset({"frame_id", "frame_compile_id"})
#: A stack frame's fields (dynamo_start, shape records): ``filename`` may be a number, an
#: interned string.
_FRAME_FIELDS: dict[str, str] = {"line": INT, "name": TEXT, "loc": TEXT}
_BIG = 1 << 63  # ints past 64 bits are not PyTorch's (and past 4300 digits Python will not print them)



def _int(value: object) -> bool:
    return type(value) is int and -_BIG <= value < _BIG


def _frame(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    filename = value.get("filename")
    return (filename is None or isinstance(filename, str) or _int(filename)) and all(
        fits(value.get(k), check) for k, check in _FRAME_FIELDS.items())


def fits(value: object, check: str) -> bool:
    """True when ``value`` is what ``check`` (INT, NUMBER, TEXT, ...) asks; null fits every
    check (PyTorch writes null for what it has no value for, read as absent)."""
    if value is None:
        return True
    if check == INT:
        return _int(value)
    if check == NUMBER:
        return _int(value) or (type(value) is float and math.isfinite(value))
    if check == TEXT:
        return isinstance(value, str)
    if check == LIST:
        return isinstance(value, list)
    if check == STRS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if check == SCALAR:
        return isinstance(value, str) or _int(value) or (type(value) is float and math.isfinite(value))
    if check == FRAMES:
        return isinstance(value, list) and all(_frame(f) for f in value)
    raise AssertionError(f"no such check: {check}")


def _what(value: object) -> str:
    """A JSON value's type, in words."""
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int" if _int(value) else "an int over 64 bits"
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else f"{value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _wrong(key: str, value: object, check: str, then: str) -> str:
    what = "a list holding something else" if isinstance(value, list) and check in (STRS, FRAMES) else _what(value)
    return f"field {key!r} is {what}, not {check} ({then})"


def validate(metadata: dict[str, Any]) -> tuple[dict[str, Any] | None, list[str]]:
    """The one check every record that enters goes through (a log's, or one the collector
    hears in process): its common fields and the fields of every known kind's body it holds,
    against the registry's schema.

    Returns:
        (the metadata to read, with each damaged field left out (read as absent, as PyTorch's
        null is) and a body that is not an object read as empty; None when the record means
        nothing without what was damaged: its compile id, its container's name, an interned
        string), and why, one reason per damage, in words.
    """
    out = metadata
    problems: list[str] = []

    def drop(key: str, body_of: str | None = None) -> None:
        nonlocal out
        if out is metadata:
            out = dict(metadata)
        if body_of is None:
            del out[key]
        else:
            out[body_of] = {k: v for k, v in out[body_of].items() if k != key}

    for key, value in metadata.items():
        check = COMMON_FIELDS.get(key)
        if check is not None:
            if not fits(value, check):
                if key in _IDENTITY:
                    return None, [_wrong(key, value, check, "the record left out")]
                problems.append(_wrong(key, value, check, "read as absent"))
                drop(key)
            continue
        if key in (ARTIFACT, GRAPH_DUMP):
            if not (isinstance(value, dict) and isinstance(value.get("name"), str)):
                return None, [f"its {key} is {_what(value)}, not an object with a string name (the record left out)"]
            continue
        if key == STR:
            if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and _int(value[1])):
                return None, [f"its interned string is {_what(value)}, not [text, number] (the record left out)"]
            continue
        entry = REGISTRY.get(key)
        if entry is None or entry.kept == SKIPPED or EVENT not in entry.where:
            continue
        if not isinstance(value, dict):
            if value is not None:
                problems.append(f"its body is {_what(value)}, not an object (read as empty)")
            if out is metadata:
                out = dict(metadata)
            out[key] = {}
            continue
        for name, want in entry.fields.items():
            if name in value and not fits(value[name], want):
                problems.append(_wrong(name, value[name], want, "read as absent"))
                drop(name, body_of=key)
    return out, problems


def validate_payload(kind: str, payload: str) -> tuple[str, str]:
    """(the payload to read, why it is not read: "" when it is): a JSON payload nested past
    MAX_JSON_DEPTH is not read (its parser would recurse to the bottom)."""
    entry = REGISTRY.get(kind)
    if entry is not None and entry.json_payload and json_too_deep(payload):
        return "", f"payload is JSON nested over {MAX_JSON_DEPTH} deep (not read)"
    return payload, ""
