"""Build the plain-data Report from trace events and recorded graphs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from dynscope._lexicon.wording import (
    RESUME_PREFIX,
    base_function,
    is_dropped_entry_reason,
    is_recompile_limit,
    is_resume_name,
    resume_site,
)
from dynscope._model import (
    Cause,
    CompileTime,
    Frame,
    Graph,
    GraphBreak,
    Guard,
    GuardFailure,
    Recompile,
    Report,
    SizeFix,
)
from dynscope._model.base import _Live
from dynscope._model.causes import NO_REASON
from dynscope._model.compile_ids import compile_id, compile_number, frame_of, is_recompile
from dynscope._read.break_sites import (
    fold_breaks,
    is_decorator_wrapper,
    qualified_name,
    without_dynscope,
    wrapped_function,
    wrapper_arguments,
)
from dynscope._read.cache_fold import lookups_of
from dynscope._read.coverage import with_coverage, with_runs
from dynscope._read.guard_checks import with_all_failures
from dynscope._read.lowering import (
    AOT_COMPILE,
    PROVENANCE_OFF,
    LoweringFold,
    ahead_of_time_graph,
    build_lowering,
    compile_times,
)
from dynscope._read.lowering import FOLDS as LOWERING_FOLDS
from dynscope._read.measured import with_measured
from dynscope._torch import records
from dynscope._torch.graph_text import (
    input_names_from_code,
    inputs_from_code,
    node_count_from_code,
    op_counts_from_code,
    readable_code,
)
from dynscope._torch.guard_text import (
    causes_of,
    global_state_cause,
    global_states,
    is_backend_mismatch,
    parse_recompile_reasons,
    reason_cause,
    state_values,
    states_differ,
    with_argument_names,
)
from dynscope._torch.registry import library_of
from dynscope._torch.shape_text import ShapeRecords, entry_failures, recompile_fixes, size_fixes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from dynscope._capture.backend import RecordedGraph
    from dynscope._model.measured import Measured
    from dynscope._read.guard_checks import CallsMade
    from dynscope._torch.break_report import ParsedBreak
    from dynscope._torch.metrics import CompileMetrics
    from dynscope._torch.profiler import OpCounts
    from dynscope._torch.trace import TraceEvent


def _renumbering(events: list[TraceEvent], recorded: list[RecordedGraph]) -> dict[str, str]:
    """Compile ids relative to this capture.

    PyTorch numbers frames process-wide and counts compiles of a code object across every
    earlier torch.compile, so raw ids depend on what ran before. Frames are renumbered in
    order of first appearance, compiles per frame likewise ("0/0", "0/1", "1/0"...).
    """
    frames: dict[str, int] = {}
    compiles: dict[str, dict[str, int]] = {}
    out: dict[str, str] = {}
    ids = [ev.compile_id for ev in events] + [r.compile_id for r in recorded]
    for cid in ids:
        if not cid or cid in out or "/" not in cid:
            continue
        frame = frame_of(cid)
        f_new = frames.setdefault(frame, len(frames))
        per = compiles.setdefault(frame, {})
        c_new = per.setdefault(cid, len(per))
        out[cid] = compile_id(f_new, c_new)
    return out


_Numbered = TypeVar("_Numbered", "TraceEvent", "RecordedGraph")


def _renumbered(item: _Numbered, renumber: dict[str, str]) -> _Numbered:
    """``item`` (a trace event or a recorded graph) with its compile id renumbered."""
    new = renumber.get(item.compile_id, item.compile_id)
    return item if new == item.compile_id else replace(item, compile_id=new)


def _users_reasons(reasons: tuple[str, ...], ignore_backend_mismatch: bool) -> tuple[str, ...]:
    """Failed guards that are about the user's program.

    Dropped: entries dynscope made inert after an earlier report (never the user's), and,
    for report(), "another backend compiled this before" (report() compiles afresh).
    """
    return tuple(
        r
        for r in reasons
        if not is_dropped_entry_reason(r) and not (ignore_backend_mismatch and is_backend_mismatch(r))
    )


def _explained(reason: str, cid: str, states: dict[str, dict[str, object]]) -> Cause:
    """A failed guard's cause; for grad mode / autocast, which state went from what to what:
    the new compile's state against that of the latest earlier compile of the frame that
    differed in a state the guard names (the compile it failed against)."""
    named = global_states(reason)
    after = states.get(cid, {})
    if not named or not after:
        return reason_cause(reason)
    frame, no = frame_of(cid), compile_number(cid)
    earlier = [states.get(compile_id(frame, n), {}) for n in range(no - 1, -1, -1)] if no is not None else []
    before = next((s for s in earlier if states_differ(reason, s, after)), earlier[0] if earlier else {})
    return global_state_cause(reason, before, after) or reason_cause(reason)


@dataclass(frozen=True)
class _Wrapped:
    """The function a decorator's wrapper frame runs (``@torch.no_grad()``, Hugging Face's
    ``can_return_tuple``): the frame is shown as it, where it is defined."""

    name: str  # its qualified name
    filename: str
    lineno: int  # its def line
    arguments: tuple[str, ...]  # its names for the wrapper's args[0], args[1]... (() when none)


def _first_metrics(st: _Assembly, ev: TraceEvent) -> None:
    """compilation_metrics, first pass: for a frame whose code is a decorator's wrapper, the
    function it runs, read from the node stacks of a graph the backend saw for the frame. Read
    in a pass of its own: a recompile's failed guards come before its compile's metrics."""
    frame = frame_of(ev.compile_id)
    if frame in st.wrapped or (rec := st.by_cid.get(ev.compile_id)) is None:
        return
    m: CompileMetrics = ev.record
    if not (m.co_name and m.co_filename and is_decorator_wrapper(m.co_filename, m.co_firstlineno)):
        return
    found = wrapped_function(rec.data.get("stacks") or [])
    if found is not None:
        filename, fn = found
        st.wrapped[frame] = _Wrapped(fn.name, filename, fn.line, wrapper_arguments(m.co_filename, m.co_firstlineno, fn))


def _named_arguments(ev: TraceEvent, names: tuple[str, ...]) -> TraceEvent:
    """``ev`` with a wrapper's ``args[i]`` named as the wrapped function names them, in its
    payload and metadata (guards, failed guards, size sources)."""

    def renamed(value: Any) -> Any:
        if isinstance(value, str):
            return with_argument_names(value, names)
        if isinstance(value, dict):
            return {k: renamed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [renamed(v) for v in value]
        return value

    return replace(ev, payload=with_argument_names(ev.payload, names), metadata=renamed(ev.metadata))


def _frame_name(co_name: str, filename: str, lineno: int, wrapped: _Wrapped | None) -> str:
    """The user-facing name of a compiled code object: its qualified name
    ("Attention.forward"), and for a decorator's wrapper the function it wraps
    ("GPT2Model.forward"); ``co_name`` when neither is known."""
    if co_name and wrapped is not None:
        if is_resume_name(co_name):  # "resume GPT2Model.forward_at_1182"
            return RESUME_PREFIX + wrapped.name + co_name[len(RESUME_PREFIX) + len(base_function(co_name)):]
        return wrapped.name
    return qualified_name(filename, lineno, co_name)


def _metrics_frame(cid: str, m: CompileMetrics, graph_ids: tuple[int, ...]) -> Frame:
    if m.fail_type:
        status = "failed"
    elif not graph_ids and m.op_count == 0:
        status = "empty"
    else:
        status = "compiled"
    return Frame(
        compile_id=cid,
        function=m.co_name,
        filename=m.co_filename,
        lineno=m.co_firstlineno,
        graph_ids=graph_ids,
        guard_count=m.guard_count,
        op_count=m.op_count,
        compile_time=CompileTime(
            total_s=m.total_s,
            dynamo_s=max(m.total_s - m.backend_s, 0.0),
            backend_s=m.backend_s,
            inductor_s=m.inductor_s,
        ),
        restarts=m.restarts,
        status=status,
        fail_reason=f"{m.fail_type}: {m.fail_reason}".strip(": ") if m.fail_type else "",
    )


def _first_ddp_piece(st: _Assembly, ev: TraceEvent) -> None:
    """optimize_ddp_split_child, first pass: a piece DDP's optimizer split a compile's graph
    into, as the trace logged it (one per piece, during the backend compile)."""
    if ev.compile_id:
        st.ddp_pieces.setdefault(ev.compile_id, {}).setdefault(ev.attempt, []).append(ev)


def _first_symbol(st: _Assembly, ev: TraceEvent) -> None:
    """create_symbol, first pass: the size a symbol ran at (ShapeEnv's create_symbol, logged
    while the frame is traced, before its graph): what a trace-only graph's dynamic inputs ran
    at. Read before the handlers run, so a graph sees every symbol of its compile whatever
    order the trace logged them in."""
    made = ev.record
    if made is not None and made.value is not None:
        st.symbol_sizes.setdefault(ev.compile_id, {}).setdefault(made.symbol, made.value)


def _ddp_traced(pieces: dict[str, dict[int, list[TraceEvent]]]) -> dict[str, list[TraceEvent]]:
    """compile id -> the pieces DDP's optimizer split its graph into, as the trace logged them,
    for compiles split in two or more. Of a compile that restarted, the last attempt's pieces."""
    last = {cid: by_attempt[max(by_attempt)] for cid, by_attempt in pieces.items()}
    return {cid: evs for cid, evs in last.items() if len(evs) > 1}


@dataclass
class _Assembly:
    """What the trace handlers build up, event by event, for one report.

    The first four fields are given (what the backend recorded, the options); the next four
    grow in a first pass (``_FIRST``), the rest as the handlers in ``_HANDLERS`` read the events.
    """

    by_cid: dict[str, RecordedGraph]  # compile id -> the graph the backend saw for it
    ddp_split: dict[str, list[RecordedGraph]]  # compile id -> DDP's pieces of its graph
    ignore_backend_mismatch: bool  # drop "another backend compiled this before" recompiles
    renumber: dict[str, str]  # PyTorch's compile id -> this report's (_renumbering)
    wrapped: dict[str, _Wrapped] = field(default_factory=dict)  # frame id -> what its wrapper runs
    # compile id -> restart attempt -> the DDP pieces the trace logged (their code only)
    ddp_pieces: dict[str, dict[int, list[TraceEvent]]] = field(default_factory=dict)
    ddp_traced: dict[str, list[TraceEvent]] = field(default_factory=dict)  # compile id -> its pieces (_ddp_traced)
    symbol_sizes: dict[str, dict[str, int]] = field(default_factory=dict)  # compile id -> symbol -> size it ran at
    graphs: list[Graph] = field(default_factory=list)
    graph_ids: dict[str, list[int]] = field(default_factory=dict)  # compile id -> its graphs
    metrics: dict[str, CompileMetrics] = field(default_factory=dict)
    names: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # compile id -> (function, file, line)
    frame_names: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # frame id -> its first named compile
    guards: list[Guard] = field(default_factory=list)
    break_items: list[tuple[str, ParsedBreak]] = field(default_factory=list)
    pending_reasons: dict[str, tuple[str, ...]] = field(default_factory=dict)  # compile id -> failed guards
    failures: dict[str, tuple[GuardFailure, ...]] = field(default_factory=dict)  # compile id -> per-entry failures
    shapes: dict[str, ShapeRecords] = field(default_factory=dict)  # compile id -> its shape records
    used: set[str] = field(default_factory=set)  # compile ids whose graph the trace announced
    lowering: dict[str, LoweringFold] = field(default_factory=dict)  # compile id -> its lowering records, folded
    coded: set[str] = field(default_factory=set)  # compile ids Inductor logged output code for
    steps: dict[str, list[tuple[str, str, float]]] = field(default_factory=dict)  # compile id -> its compile steps
    # Payloads no parser understood, per event kind: counted, never dropped silently
    # (Report.unparsed is their total, Report.unparsed_kinds the split).
    unparsed: Counter[str] = field(default_factory=Counter)
    execution_order: tuple[str, ...] = ()  # compile ids in the order the graphs ran


def _on_output_graph(st: _Assembly, ev: TraceEvent) -> None:
    """dynamo_output_graph: the graph a compile produced (once per compile id)."""
    cid = ev.compile_id
    if cid in st.used:
        return
    st.used.add(cid)
    # The trace's code is of the graph before DDP split it: pieces keep their own. Pieces
    # the backend did not see (the user's own backend, a trace file) are read from the
    # trace's optimize_ddp_split_child records.
    if cid not in st.ddp_split and cid in st.ddp_traced:
        device = next((i.device for i in inputs_from_code(ev.payload) if i.device), "")
        for child in st.ddp_traced[cid]:
            g = _graph(len(st.graphs), cid, None, child.payload, st.names.get(cid), st.symbol_sizes.get(cid))
            inputs = tuple(replace(i, device=i.device or device) if i.kind == "tensor" else i for i in g.inputs)
            st.graphs.append(replace(g, split_by="ddp_bucket", inputs=inputs, node_count=node_count_from_code(child.payload)))
            st.graph_ids.setdefault(cid, []).append(st.graphs[-1].id)
        return
    pieces: list[RecordedGraph | None] = [*st.ddp_split.get(cid, [])] or [st.by_cid.get(cid)]
    for piece in pieces:
        code = "" if cid in st.ddp_split else ev.payload
        st.graphs.append(_graph(len(st.graphs), cid, piece, code, st.names.get(cid), st.symbol_sizes.get(cid)))
        st.graph_ids.setdefault(cid, []).append(st.graphs[-1].id)


def _on_dynamo_start(st: _Assembly, ev: TraceEvent) -> None:
    """dynamo_start: a first name for the frame, from the top of the stack Dynamo starts on."""
    stack = ev.record
    if stack:
        top = stack[-1]
        st.names[ev.compile_id] = (str(top.get("name", "")), "", int(top.get("line") or 0))


def _on_metrics(st: _Assembly, ev: TraceEvent) -> None:
    """compilation_metrics: the compile's numbers and the code object it compiled."""
    cid = ev.compile_id
    m = st.metrics[cid] = ev.record
    # A compile that failed early (recompile limit) names no code: it is the
    # same frame as the frame's earlier compiles.
    same_frame = st.frame_names.get(frame_of(cid), ("", "", 0))
    filename, lineno = m.co_filename or same_frame[1], m.co_firstlineno or same_frame[2]
    wrapped = st.wrapped.get(frame_of(cid))
    name = _frame_name(m.co_name, filename, lineno, wrapped) or same_frame[0]
    # A wrapper frame (a torch or library file) is shown where the function it runs is.
    if wrapped is not None and not is_resume_name(m.co_name):
        filename, lineno = wrapped.filename, wrapped.lineno
    st.names[cid] = (name, filename, lineno)
    if st.names[cid][0]:
        st.frame_names.setdefault(frame_of(cid), st.names[cid])


def _on_guards(st: _Assembly, ev: TraceEvent) -> None:
    """dynamo_cpp_guards_str: the guard tree of a compile."""
    parsed_guards = ev.record
    if ev.payload.strip() and not parsed_guards:
        st.unparsed[ev.name] += 1
    st.guards.extend(parsed_guards)


def _on_break(st: _Assembly, ev: TraceEvent) -> None:
    """dynamo_graph_break_reason: one break event."""
    parsed = ev.record
    # One event per record, as PyTorch's own tests count them: a helper that breaks
    # inlined and again in its own frame (where Dynamo gives up) is two events.
    if parsed is None:
        st.unparsed[ev.name] += 1
    else:
        st.break_items.append((ev.compile_id, without_dynscope(parsed)))


def _on_recompile_reasons(st: _Assembly, ev: TraceEvent) -> None:
    """recompile_reasons: the guards that failed before a compile."""
    reasons = ev.record
    if ev.payload.strip() and not reasons:
        st.unparsed[ev.name] += 1
    reasons = _users_reasons(reasons, st.ignore_backend_mismatch)
    if reasons:
        st.pending_reasons[ev.compile_id] = reasons
        # Per earlier entry, in this report's compile ids. report() keeps only its own entries
        # (not those of the user's compiles before it, nor entries it made inert).
        st.failures[ev.compile_id] = tuple(
            replace(f, entry=st.renumber.get(f.entry, f.entry))
            for f in entry_failures(ev.payload, reason_cause)
            if _users_reasons((f.guard,), st.ignore_backend_mismatch)
            and (f.entry in st.renumber or not st.ignore_backend_mismatch)
        )


def _on_symbol(st: _Assembly, ev: TraceEvent) -> None:
    """create_symbol: a size made dynamic. This and the next two: where a compile's sizes came
    from, read once the compile's records are all in (Frame.shapes)."""
    st.shapes.setdefault(ev.compile_id, ShapeRecords()).created.append(ev.record)


def _on_size_fixed(st: _Assembly, ev: TraceEvent) -> None:
    """symbolic_shape_specialization: a dynamic size the program fixed."""
    st.shapes.setdefault(ev.compile_id, ShapeRecords()).fixed.append(ev.record)


def _on_shape_guard(st: _Assembly, ev: TraceEvent) -> None:
    """guard_added_fast: a shape guard."""
    st.shapes.setdefault(ev.compile_id, ShapeRecords()).guarded.append(ev.record)


def _folding(fold: Callable[[LoweringFold, TraceEvent], None]) -> Callable[[_Assembly, TraceEvent], None]:
    """The handler of a lowering kind: its fold (lowering.FOLDS) into its compile's lowering."""
    def handler(st: _Assembly, ev: TraceEvent) -> None:
        fold(st.lowering.setdefault(ev.compile_id, LoweringFold()), ev)
    return handler


_fold_code = _folding(LOWERING_FOLDS[records.INDUCTOR_OUTPUT_CODE])
_fold_step = _folding(LOWERING_FOLDS[records.CHROMIUM_EVENT])


def _on_output_code(st: _Assembly, ev: TraceEvent) -> None:
    """inductor_output_code: folded into the compile's lowering; the graph has a lowering."""
    _fold_code(st, ev)
    st.coded.add(ev.compile_id)


def _on_step(st: _Assembly, ev: TraceEvent) -> None:
    """chromium_event: a compile step, folded into the lowering and kept for the compile's time."""
    _fold_step(st, ev)
    if ev.record is not None:
        st.steps.setdefault(ev.compile_id, []).append(ev.record)


def _on_execution(st: _Assembly, ev: TraceEvent) -> None:
    """graph_execution: the compiled graphs in the order they ran (the last record wins)."""
    order = ev.record
    if order is None:
        st.unparsed[ev.name] += 1
    else:
        st.execution_order = tuple(st.renumber.get(cid, cid) for cid in order)


#: Trace-event kind (dynscope._torch.records) -> what the first pass reads of it, before
#: a wrapper frame's inputs are given their names and before ``_HANDLERS`` run.
_FIRST: dict[str, Callable[[_Assembly, TraceEvent], None]] = {
    records.COMPILATION_METRICS: _first_metrics,
    records.OPTIMIZE_DDP_SPLIT_CHILD: _first_ddp_piece,
    records.CREATE_SYMBOL: _first_symbol,
}

# Trace-event kind (dynscope._torch.records) -> its handler, one per artifact (as tlparse
# registers one parser per structured-log artifact), each reading the event's typed record
# (``ev.record``, parsed once by the kind's parser in the registry): a new artifact is one new
# entry. Events of other kinds are read in the first pass only (``_FIRST``) or ignored.
_HANDLERS: dict[str, Callable[[_Assembly, TraceEvent], None]] = {
    records.DYNAMO_OUTPUT_GRAPH: _on_output_graph,
    records.DYNAMO_START: _on_dynamo_start,
    records.COMPILATION_METRICS: _on_metrics,
    records.DYNAMO_CPP_GUARDS_STR: _on_guards,
    records.DYNAMO_GRAPH_BREAK_REASON: _on_break,
    records.RECOMPILE_REASONS: _on_recompile_reasons,
    # create_symbol is read in the first pass too (sizes), and here for shapes
    records.CREATE_SYMBOL: _on_symbol,
    records.SYMBOLIC_SHAPE_SPECIALIZATION: _on_size_fixed,
    records.GUARD_ADDED_FAST: _on_shape_guard,
    # AOTAutograd's and Inductor's records, each straight to its fold (lowering.FOLDS)
    **{name: _folding(fold) for name, fold in LOWERING_FOLDS.items()},
    records.INDUCTOR_OUTPUT_CODE: _on_output_code,
    records.CHROMIUM_EVENT: _on_step,
    records.GRAPH_EXECUTION: _on_execution,  # a lowering artifact, read apart
}


def build_report(
    events: list[TraceEvent],
    recorded: list[RecordedGraph],
    *,
    ignore_backend_mismatch: bool,
    title: str = "",
    calls: int = 0,
    rank: int = 0,
    world_size: int = 1,
    torch_version: str = "",
    coverage: OpCounts | None = None,
    runs: Mapping[str, int] | None = None,
    calls_made: CallsMade | None = None,
    provenance: bool = True,
    notes: Sequence[str] = (),
    measured: Measured | None = None,
) -> Report:
    """Assemble a Report from what was captured, without asking the running process.

    Args:
        events: kept trace events in arrival order.
        recorded: graphs dynscope's backend saw, in order.
        ignore_backend_mismatch: drop recompiles caused only by a different backend having
            compiled the code earlier (report() compiles with a fresh backend of its own).
        title: what was captured.
        calls: how many calls report() made.
        rank: the process's rank in a distributed job. Defaults to 0.
        world_size: how many ranks the job had. Defaults to 1.
        torch_version: the torch that produced the events. Defaults to "" (not known:
            a recorded trace assembled elsewhere).
        coverage: what the profiler saw (a live capture with coverage): each eager op tied
            to its break site (:func:`dynscope._read.coverage.with_coverage`). Defaults to None.
        runs: PyTorch's compile id -> times its compiled code ran, for the graphs dynscope's
            backend did not count (:func:`dynscope._read.coverage.with_runs`). Defaults to None.
        calls_made: the calls a live capture made, their inputs described: each recompile of
            the entry frame then carries every guard its earlier entries failed
            (:func:`dynscope._read.guard_checks.with_all_failures`). Defaults to None.
        provenance: whether Inductor's provenance tracking was on (False: a capture()
            that left it off, whose lowerings list no kernels, says why). Defaults to True.
        notes: what the capture must say of itself (a hook of dynscope's that failed, a
            measurement it skipped), after the notes the events give. Defaults to ().
        measured: what timing and memory measured on the report built from these same
            inputs (:func:`dynscope._read.measured.with_measured`). Defaults to None.
    """
    st, unmatched = _assembled(events, recorded, ignore_backend_mismatch)
    raw_ids = {new: old for old, new in st.renumber.items()}
    graphs = _all_graphs(st, unmatched)
    _reasons_in_metrics(st)
    shapes = {cid: size_fixes(cid, of_compile) for cid, of_compile in st.shapes.items()}
    recompiles = _recompiles(st, raw_ids, {cid: fixes for cid, (fixes, _) in shapes.items()})
    graphs = _with_lowering(graphs, st.lowering, st.coded)
    # One definition of the user's compile time (frame compile + lazy backward compile, by
    # phase), in lowering.compile_times: header, phases, CLI and JSON all read it.
    frames, total = compile_times(_frames(st, raw_ids, shapes), st.steps)
    breaks, break_events = fold_breaks(st.break_items)
    breaks = _costed(breaks, [g.frame for g in graphs], [r.frame for r in recompiles])
    rep = Report(
        rank=rank,
        world_size=world_size,
        graphs=tuple(graphs),
        breaks=breaks,
        break_events=break_events,
        recompiles=recompiles,
        guards=tuple(st.guards),
        frames=frames,
        compile_time=total,
        calls=calls,
        torch_version=torch_version,
        title=title,
        notes=_limit_notes(frames),
        unparsed=sum(st.unparsed.values()),
        unparsed_kinds=tuple(sorted(st.unparsed.items())),
        execution_order=st.execution_order,
        cache_lookups=tuple(replace(lk, compile_id=st.renumber.get(lk.compile_id, lk.compile_id))
                            for lk in lookups_of(events)),
    )
    return _joined(rep, events, coverage=coverage, runs=runs, calls_made=calls_made, provenance=provenance,
                   notes=tuple(notes), measured=measured)


def _limit_notes(frames: Iterable[Frame]) -> tuple[str, ...]:
    """A note for each frame PyTorch stopped compiling at its recompile limit."""
    return tuple(
        f"recompile limit hit in {f.function or 'a frame'} ({f.compile_id}): PyTorch stopped "
        f"compiling it, later calls ran its cached code or eager; counts after this point "
        f"are not what an unlimited run would show"
        for f in frames
        if is_recompile_limit(f.fail_reason)
    )


def _joined(
    rep: Report,
    events: list[TraceEvent],
    *,
    coverage: OpCounts | None,
    runs: Mapping[str, int] | None,
    calls_made: CallsMade | None,
    provenance: bool,
    notes: tuple[str, ...],
    measured: Measured | None,
) -> Report:
    """The report the events made joined with the builder's other inputs (build_report's
    arguments of the same names), each a pure join of data."""
    if coverage is not None:
        rep = with_coverage(rep, coverage)
    if calls_made is not None:
        rep = with_all_failures(rep, events, calls_made)
    if runs is not None:
        rep = replace(rep, graphs=with_runs(rep, runs))
    if not provenance and any(g.lowering is not None and not g.lowering.kernels for g in rep.graphs):
        notes = (PROVENANCE_OFF, *notes)
    if notes:
        rep = replace(rep, notes=(*rep.notes, *notes))
    return with_measured(rep, measured) if measured is not None else rep


def _assembled(
    events: list[TraceEvent], recorded: list[RecordedGraph], ignore_backend_mismatch: bool
) -> tuple[_Assembly, list[RecordedGraph]]:
    """Every event read by its handlers (``_FIRST``, then ``_HANDLERS``), with compile ids
    renumbered and the backend's graphs matched to their compiles; also the backend's graphs
    no compile id matched."""
    renumber = _renumbering(events, recorded)
    # Only what changes is copied: a report's trace runs to thousands of events (compile
    # steps, guards), and after torch._dynamo.reset() most ids are already the capture's own.
    events = [_renumbered(ev, renumber) for ev in events]
    recorded = [_renumbered(r, renumber) for r in recorded]
    # DDP's optimizer hands one compile's graph to the backend in pieces (bucket splits):
    # they all stand where the trace announces that compile's graph, in order. A compile
    # it did not split (one piece) is an ordinary graph.
    ddp_split = _ddp_splits(recorded)
    recorded = [r if not r.split_by or r.compile_id in ddp_split else replace(r, split_by="") for r in recorded]
    by_cid: dict[str, RecordedGraph] = {}
    unmatched: list[RecordedGraph] = []
    for rec in recorded:
        if rec.compile_id in ddp_split:
            continue
        if rec.compile_id and rec.compile_id not in by_cid:
            by_cid[rec.compile_id] = rec
        else:
            unmatched.append(rec)

    st = _Assembly(
        by_cid=by_cid, ddp_split=ddp_split, renumber=renumber, ignore_backend_mismatch=ignore_backend_mismatch
    )
    for ev in events:
        first = _FIRST.get(ev.name)
        if first is not None:
            first(st, ev)
    st.ddp_traced = _ddp_traced(st.ddp_pieces)
    if any(w.arguments for w in st.wrapped.values()):
        # a wrapper's args[i] named as the function it runs names them, in the records whose
        # text names a frame's inputs by their guard sources (the registry's names_inputs)
        events = [
            _named_arguments(ev, w.arguments)
            if records.REGISTRY[ev.name].names_inputs and (w := st.wrapped.get(frame_of(ev.compile_id)))
            and w.arguments else ev
            for ev in events
        ]
    for ev in events:
        handler = _HANDLERS.get(ev.name)
        if handler is not None:
            handler(st, ev)
    return st, unmatched


def _all_graphs(st: _Assembly, unmatched: list[RecordedGraph]) -> list[Graph]:
    """The report's graphs: those the trace announced, then those the backend saw that it
    did not, then an ahead-of-time compile's, each with its frame's name and counts."""
    graphs, graph_ids, names = st.graphs, st.graph_ids, st.names
    # Graphs the backend saw that the trace did not announce (no trace handler, or a
    # compile id PyTorch did not give): keep them rather than lose them.
    split_unseen = [r for cid, pieces in st.ddp_split.items() if cid not in st.used for r in pieces]
    for rec in [r for cid, r in st.by_cid.items() if cid not in st.used] + split_unseen + unmatched:
        graphs.append(_graph(len(graphs), rec.compile_id, rec, "", names.get(rec.compile_id)))
        graph_ids.setdefault(rec.compile_id, []).append(graphs[-1].id)

    # An ahead-of-time compile (AOTInductor) logs its metrics and lowering without a compile
    # id, and no Dynamo graph: its graph is the exported one Inductor compiled.
    if "" in st.metrics and "" not in graph_ids:
        ahead = ahead_of_time_graph(len(graphs), st.lowering.get("", LoweringFold()))
        if ahead is not None:
            graphs.append(ahead)
            graph_ids[""] = [ahead.id]
            names[""] = (AOT_COMPILE, "", 0)

    # Fill in frame names the graph could not know when it was made, and, for graphs
    # known only from the trace, the exact counts from compilation_metrics.
    return [_named(g, names.get(g.compile_id), st.metrics.get(g.compile_id)) for g in graphs]


def _reasons_in_metrics(st: _Assembly) -> None:
    """Torch versions without the recompile_reasons artifact still put the reason in
    compilation_metrics: read there for compiles the artifact gave none."""
    for cid, m in st.metrics.items():
        if cid not in st.pending_reasons and m.recompile_reason:
            reasons = _users_reasons(parse_recompile_reasons(m.recompile_reason), st.ignore_backend_mismatch)
            if reasons:
                st.pending_reasons[cid] = reasons


def _frames(
    st: _Assembly, raw_ids: dict[str, str], shapes: dict[str, tuple[tuple[SizeFix, ...], tuple[str, ...]]]
) -> tuple[Frame, ...]:
    """One frame per compile PyTorch gave metrics for, named, with its sizes' records."""
    return tuple(
        replace(
            _metrics_frame(cid, m, tuple(st.graph_ids.get(cid, ()))),
            function=st.names.get(cid, ("", "", 0))[0],
            filename=st.names.get(cid, ("", "", 0))[1],
            lineno=st.names.get(cid, ("", "", 0))[2],
            torch_compile_id=raw_ids.get(cid, cid),
            shapes=shapes.get(cid, ((), ()))[0],
            dynamic_sizes=shapes.get(cid, ((), ()))[1],
        )
        for cid, m in st.metrics.items()
    )

def _recompiles(st: _Assembly, raw_ids: dict[str, str], shapes: dict[str, tuple[SizeFix, ...]]) -> tuple[Recompile, ...]:
    """The recompiles, with their failed guards read into causes (``Cause``: their words are
    dynscope._render.causes').

    A recompile is a second (third...) compile of one frame: counted from compile ids,
    so a reason PyTorch did not give, or that no parser read, still counts. report()
    counts within its own run (renumbered ids); capture() counts PyTorch's own ids, as
    code compiled before the block that recompiles inside it is a real recompile.
    """
    compiled_ids = [cid for cid in dict.fromkeys([*st.metrics, *st.pending_reasons]) if cid]
    states = {g.compile_id: state_values(g.detail) for g in st.guards if g.kind == "GLOBAL_STATE"}
    recompiles: list[Recompile] = []
    for cid in compiled_ids:
        counted_id = cid if st.ignore_backend_mismatch else raw_ids.get(cid, cid)
        if not is_recompile(counted_id):
            continue
        reasons = st.pending_reasons.get(cid, ())
        causes = tuple(_explained(r, cid, states) for r in reasons) or (Cause(NO_REASON),)
        fixes = tuple(dict.fromkeys(fix for r in reasons for fix in causes_of(r)))
        failures = st.failures.get(cid, ())
        fixes = recompile_fixes(fixes, failures, shapes, cid)
        frame, filename, _ = st.names.get(cid, ("", "", 0))
        library = library_of(filename)
        if library:  # the library's own recompile: its fixes say so first
            fixes = tuple(replace(f, library=library, function=frame) for f in fixes)
        recompiles.append(
            Recompile(
                compile_id=cid,
                frame=frame,
                raw_reasons=reasons,
                causes=causes,
                fixes=fixes,
                failures=failures,
                library=library,
            )
        )
    return tuple(recompiles)


def _costed(breaks: tuple[GraphBreak, ...], graph_frames: list[str], recompiled: list[str]) -> tuple[GraphBreak, ...]:
    """Break sites with the graphs and recompiles they cause: those of the resume functions
    Dynamo made after the site (in its function at its line, or in a caller at the line
    that called into it)."""
    out = []
    for b in breaks:
        at = {(base_function(f.function), f.lineno) for f in b.user_stack}
        at.add((base_function(b.function), b.lineno))
        out.append(
            replace(
                b,
                graphs_split=sum(1 for name in graph_frames if resume_site(name) in at),
                recompiles_caused=sum(1 for name in recompiled if resume_site(name) in at),
            )
        )
    return tuple(out)


def _with_lowering(graphs: list[Graph], lowering: dict[str, LoweringFold], coded: set[str]) -> list[Graph]:
    """Graphs with the lowering PyTorch logged for their compile (Inductor compiles only).

    Args:
        graphs: the report's graphs.
        lowering: compile id -> the AOTAutograd and Inductor records of that compile, folded.
        coded: the compile ids Inductor logged output code for.
    """
    out = []
    for g in graphs:
        if g.compile_id in coded:
            g = replace(g, lowering=build_lowering(g, lowering[g.compile_id], source="trace"))
        out.append(g)
    return out


def _graph(
    gid: int,
    cid: str,
    rec: RecordedGraph | None,
    trace_code: str,
    name: tuple[str, str, int] | None,
    sizes: dict[str, int] | None = None,
) -> Graph:
    func, filename, lineno = name or ("", "", 0)
    where: dict[str, Any] = {"id": gid, "compile_id": cid, "frame": func, "filename": filename, "lineno": lineno}
    if rec is not None:
        d = rec.data
        return Graph(
            **where,
            node_count=d["node_count"],
            op_count=d["op_count"],
            op_counts=d["op_counts"],
            inputs=d["inputs"],
            nodes=d["nodes"],
            # The trace carries the same readable code Dynamo printed; no need to print twice.
            code=trace_code or readable_code(rec.module),
            origin="backend",
            runs=rec.runs,
            backward_runs=rec.backward_runs,
            split_by=rec.split_by,
            grad_enabled=rec.grad_enabled,
            _module=_Live(rec.module),
        )
    op_counts = op_counts_from_code(trace_code)
    return Graph(
        **where,
        node_count=0,
        op_count=sum(n for _, n in op_counts),
        op_counts=op_counts,
        inputs=inputs_from_code(trace_code, sizes),  # sizes: what its symbols ran at
        input_names=input_names_from_code(trace_code),  # no nodes: what tells its parameters
        code=trace_code,
        origin="trace",
    )


def _ddp_splits(recorded: list[RecordedGraph]) -> dict[str, list[RecordedGraph]]:
    """compile id -> the pieces DDP's optimizer split its graph into, for compiles split in two or more."""
    pieces: dict[str, list[RecordedGraph]] = {}
    for rec in recorded:
        if rec.split_by and rec.compile_id:
            pieces.setdefault(rec.compile_id, []).append(rec)
    return {cid: recs for cid, recs in pieces.items() if len(recs) > 1}


def _named(
    graph: Graph, name: tuple[str, str, int] | None, metrics: CompileMetrics | None
) -> Graph:
    if name is not None:
        func, filename, lineno = name
        graph = replace(
            graph,
            frame=func or graph.frame,
            filename=filename or graph.filename,
            lineno=lineno or graph.lineno,
        )
    if graph.origin == "trace" and metrics and not graph.split_by:  # a piece is not its whole compile
        graph = replace(
            graph,
            op_count=metrics.op_count or graph.op_count,
            node_count=metrics.node_count or graph.node_count,
        )
    return graph
