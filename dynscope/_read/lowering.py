"""Build ``Graph.lowering`` from what AOTAutograd and Inductor logged for one graph.

Input: the trace events of one graph's Inductor compile, in arrival order (a timed build
of dynscope's, or a compile PyTorch logged under ``capture()``), the Dynamo graph they came
from, and optionally the profiler's kernel times. Output: plain data (``Lowering``).

How kernels are tied to the Dynamo graph:

- forward / inference: Inductor's provenance maps each kernel call to post-grad nodes and
  each post-grad node to the Dynamo nodes it came from (exact);
- backward: PyTorch logs no node mapping for a backward compile, only each kernel's user
  source lines; its kernels are tied to the Dynamo nodes made on those lines.

``mapped_share`` counts the Dynamo graph's compute nodes (call nodes whose post-grad nodes
include an op that is not a view) that some forward kernel computes.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from dynscope._model import (
    AotGraph,
    CompileTime,
    Frame,
    Graph,
    Kernel,
    Lowering,
    Node,
    SavedTensors,
    TensorMeta,
)
from dynscope._model.cache import AOT_AUTOGRAD
from dynscope._torch import lowering_text as lt
from dynscope._torch import records

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dynscope._torch.profiler import KernelTimes
    from dynscope._torch.trace import TraceEvent

@dataclass
class _Unit:
    """One Inductor compile inside the graph's lowering (forward/inference, or backward)."""

    post_grad: lt.GraphText = field(default_factory=lt.GraphText)
    code: str = ""
    provenance: lt.Provenance = field(default_factory=lt.Provenance)
    lines: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    cache: str = ""
    collectives: tuple[str, ...] = ()  # Inductor's collective schedule for this compile
    runtime_meta: str = ""  # digest of Inductor's runtime estimates and tensor metadata


#: Said when a capture left Inductor's provenance tracking off and so lists no kernels.
PROVENANCE_OFF = (
    "Inductor's kernels are not listed: capture() leaves Inductor's provenance tracking off, because it is "
    "part of the FX graph cache key (your warm cache would miss and your compile times would change). To list "
    "kernels, run with INDUCTOR_PROVENANCE=1 (your cache keys then include it) or dynscope.capture(provenance=True)"
)


@lru_cache(maxsize=1)
def _registry() -> frozenset[str]:
    return lt.aten_vocabulary()


def _vocabulary(aot: dict[str, str], unit: _Unit | None = None, *, live: bool = False) -> frozenset[str]:
    """The ATen op names a fused kernel's name can be read with: those dynscope ships
    (dynscope/_torch/aten_ops.txt), those the compile's own graphs call (a newer torch's new
    ops), and, for a live compile (``live``: not read from a trace) where torch is already
    loaded, every registered one. Reading a trace log never imports torch for it, and reads
    the same with torch installed or not."""
    named = {lt.op_name(n.target) for n in unit.post_grad.nodes if n.target.startswith("torch.ops.aten.")} if unit else set()
    for text in aot.values():
        named |= lt.aten_ops_in(text)
    known = lt.shipped_aten_ops() | named
    return known | _registry() if live and "torch" in sys.modules else known


@dataclass
class LoweringFold:
    """One compile's lowering records, folded in arrival order through ``FOLDS`` (by
    :func:`split_units`, or event by event by the report's assembly)."""

    aot: dict[str, str] = field(default_factory=dict)  # AOT graph kind -> its printed text (the first)
    aot_parsed: dict[str, lt.GraphText] = field(default_factory=dict)  # the same, read
    units: list[_Unit] = field(default_factory=list)  # Inductor compiles in order
    steps: list[tuple[str, str, float]] = field(default_factory=list)  # compile steps
    aot_cache: str = ""  # AOTAutograd's cache result
    pending_post_grad: lt.GraphText = field(default_factory=lt.GraphText)  # the next unit's post-grad graph
    pending_collectives: tuple[str, ...] = ()  # the next unit's collective schedule
    aot_wrapper: str = ""  # AOTInductor's C++ wrapper (the first logged)
    aot_kernels: str = ""  # AOTInductor's kernels' C++ (the first logged)
    aot_calls: tuple[lt.AotKernel, ...] = ()  # the kernels the wrapper calls


def _on_aot_graph(sp: LoweringFold, ev: TraceEvent) -> None:
    kind = records.AOT_GRAPHS[ev.name]
    if kind not in sp.aot:
        sp.aot[kind], sp.aot_parsed[kind] = ev.payload, ev.record


def _on_post_grad(sp: LoweringFold, ev: TraceEvent) -> None:
    sp.pending_post_grad = ev.record


def _on_output_code(sp: LoweringFold, ev: TraceEvent) -> None:
    sp.units.append(_Unit(post_grad=sp.pending_post_grad, code=ev.payload, collectives=sp.pending_collectives))
    sp.pending_post_grad, sp.pending_collectives = lt.GraphText(), ()


def _on_step(sp: LoweringFold, ev: TraceEvent) -> None:
    if ev.record is not None:
        sp.steps.append(ev.record)


def _on_cache(sp: LoweringFold, ev: TraceEvent) -> None:
    lookup = ev.record  # a CacheLookup (dynscope._torch.cache_keys)
    if lookup.cache == AOT_AUTOGRAD:
        sp.aot_cache = lookup.result
    elif sp.units:
        sp.units[-1].cache = lookup.result


def _on_schedule(sp: LoweringFold, ev: TraceEvent) -> None:
    sp.pending_collectives = ev.record  # logged while scheduling, before the code


def _on_runtime_meta(sp: LoweringFold, ev: TraceEvent) -> None:
    if sp.units:  # logged after the code it is of
        sp.units[-1].runtime_meta = ev.record


def _on_provenance(sp: LoweringFold, ev: TraceEvent) -> None:
    if sp.units:
        sp.units[-1].provenance = ev.record


def _on_kernel_lines(sp: LoweringFold, ev: TraceEvent) -> None:
    if sp.units:
        sp.units[-1].lines = ev.record


def _on_aot_wrapper(sp: LoweringFold, ev: TraceEvent) -> None:
    if not sp.aot_wrapper:
        sp.aot_wrapper, sp.aot_calls = ev.payload, tuple(ev.record)


def _on_aot_kernels(sp: LoweringFold, ev: TraceEvent) -> None:
    sp.aot_kernels = sp.aot_kernels or ev.payload


#: Lowering record kind (dynscope._torch.records) -> how it folds into one compile's lowering
#: (each event read through its kind's parser: ``ev.record``). A new kind is one new entry. The
#: report's assembly dispatches these kinds straight to these folds (its one handler table holds
#: them); a timed build folds its own compile's events through them (:func:`split_units`).
FOLDS: dict[str, Callable[[LoweringFold, TraceEvent], None]] = {
    **{kind: _on_aot_graph for kind in records.AOT_GRAPHS},
    records.INDUCTOR_POST_GRAD_GRAPH: _on_post_grad,
    records.INDUCTOR_OUTPUT_CODE: _on_output_code,
    records.CHROMIUM_EVENT: _on_step,
    **{kind: _on_cache for kind in records.CACHE_RESULTS},
    records.INDUCTOR_COLLECTIVE_SCHEDULE: _on_schedule,
    records.INDUCTOR_RUNTIME_META: _on_runtime_meta,
    records.PROVENANCE_NODE_MAPPINGS: _on_provenance,
    records.PROVENANCE_KERNEL_STACK_TRACES: _on_kernel_lines,
    records.INDUCTOR_AOT_WRAPPER_CODE: _on_aot_wrapper,
    records.INDUCTOR_AOT_KERNEL_CODE: _on_aot_kernels,
}


def split_units(events: Sequence[TraceEvent]) -> LoweringFold:
    """One compile's lowering records folded through ``FOLDS``: AOT graph texts by kind,
    Inductor compiles in order, compile steps, the AOT cache result, AOTInductor's code."""
    sp = LoweringFold()
    for ev in events:
        fold = FOLDS.get(ev.name)
        if fold is not None:
            fold(sp, ev)
    return finished(sp)


def _folded(events: Sequence[TraceEvent] | LoweringFold) -> LoweringFold:
    """A compile's lowering records folded (as the report's assembly hands them), or its events."""
    return finished(events) if isinstance(events, LoweringFold) else split_units(events)


def finished(sp: LoweringFold) -> LoweringFold:
    """``sp`` once its compile's records are all folded in."""
    if sp.pending_collectives and sp.units and not sp.units[-1].collectives:
        # Older releases log the schedule after the code it is of (torch 2.8's tlparse test logs).
        sp.units[-1].collectives = sp.pending_collectives
    return sp


def build_lowering(
    graph: Graph,
    events: Sequence[TraceEvent] | LoweringFold,
    *,
    mode: str = "default",
    source: str = "timing",
    times: KernelTimes | None = None,
    measured_ms: float | None = None,
    notes: Sequence[str] = (),
) -> Lowering | None:
    """The lowering of ``graph`` from its compile's events; None when Inductor logged no code.

    Its phases are those of the compile the events are of: with ``source="trace"`` the
    user's compile of the graph's frame (what Report.compile_time counts), with
    ``source="timing"`` dynscope's own build (no Dynamo: dynscope hands Inductor the graph).
    """
    sp = _folded(events)
    aot, units, steps, aot_cache = sp.aot, sp.units, sp.steps, sp.aot_cache
    if not units:
        return _without_code(sp, mode=mode, source=source, notes=notes) if aot else None
    training = "backward" in aot or len(units) > 1
    kinds = ["forward", "backward"] if training else ["inference"]
    first = "forward" if aot.get("forward") else "inference"
    forward = _aot_graph(aot.get(first, ""), "forward" if training else "inference", sp.aot_parsed.get(first))
    backward = saved = None
    if "backward" in aot:
        backward_text = sp.aot_parsed["backward"]
        backward = _aot_graph(aot["backward"], "backward", backward_text)
        saved = _saved(backward_text) if backward_text.nodes else None

    call_nodes = {n.name: n for n in graph.nodes if n.op.startswith("call_")}
    ties = _Ties(aot, call_nodes, _nodes_by_line(call_nodes, units[0]), times, _whole_ms(times, measured_ms),
                 live=source != "trace")
    kernels: list[Kernel] = []
    out_notes = list(notes)
    for index, unit in enumerate(units[: len(kinds)]):
        calls = lt.kernel_calls(unit.code)
        if not calls and lt.calls_kernels(unit.code):
            out_notes.append(
                f"the {kinds[index]} output code marks no kernel calls (provenance tracking off or not in this "
                "torch): its kernels are not listed"
            )
        post = unit.post_grad.by_name()
        kernels += [ties.kernel(index, kinds[index], unit, post, key, line) for key, line in calls]
    if len(units) > len(kinds):
        out_notes.append(f"{len(units) - len(kinds)} more Inductor compile(s) for this graph were not read")

    mapped, unmapped = _mapped(units[0], call_nodes)
    if units[0].provenance.empty:
        out_notes.append("Inductor logged no node mapping for this graph: mapped_share is 0")
    cache = [("aot_autograd", "", aot_cache)] if aot_cache else []
    cache += [("fx_graph", kinds[i], unit.cache) for i, unit in enumerate(units[: len(kinds)]) if unit.cache]
    return Lowering(
        mode=mode,
        source=source,
        forward=forward,
        backward=backward,
        saved_for_backward=saved,
        kernels=tuple(kernels),
        mapped_share=mapped,
        unmapped=unmapped,
        code=units[0].code,
        backward_code=units[1].code if training and len(units) > 1 else "",
        cache=tuple(cache),
        phases=_phases(steps, source),
        profiled_ms=times.profiled_ms if times is not None else None,
        measured_ms=measured_ms if times is not None else None,
        notes=tuple(out_notes),
        collective_schedule=tuple(c for unit in units[: len(kinds)] for c in unit.collectives),
        runtime_meta=",".join(unit.runtime_meta for unit in units[: len(kinds)] if unit.runtime_meta),
    )


def _without_code(sp: LoweringFold, *, mode: str, source: str, notes: Sequence[str]) -> Lowering:
    """The lowering of a graph AOTAutograd ran on but handed Inductor nothing: every output
    is an input, a view of one or a constant (``loss.detach()``), so there is no code and no
    kernel."""
    only = next(iter(sp.aot))
    return Lowering(
        mode=mode,
        source=source,
        forward=_aot_graph(sp.aot[only], only, sp.aot_parsed[only]),
        mapped_share=1.0,
        cache=(("aot_autograd", "", sp.aot_cache),) if sp.aot_cache else (),
        phases=_phases(sp.steps, source),
        notes=(
            *notes,
            "Inductor generated no code for this graph: nothing in it computes (its outputs are "
            "its inputs, views of them or constants)",
        ),
    )


def _nodes_by_line(call_nodes: dict[str, Node], first: _Unit) -> dict[tuple[str, int], list[str]]:
    """(file, line) -> the Dynamo call nodes made on it: from the graph's nodes, and, for
    graphs known only from the trace (no nodes), from the forward's post-grad nodes, which
    carry their user line and their Dynamo node and tie a line to its nodes just as well."""
    by_line: dict[tuple[str, int], list[str]] = {}
    for n in call_nodes.values():
        if n.filename:
            by_line.setdefault((n.filename, n.lineno), []).append(n.name)
    for pn in first.post_grad.nodes:
        for pre in first.provenance.post_to_pre.get(pn.name, ()):
            if pn.filename and pre not in by_line.get((pn.filename, pn.lineno), ()):
                by_line.setdefault((pn.filename, pn.lineno), []).append(pre)
    return by_line


def _whole_ms(times: KernelTimes | None, measured_ms: float | None) -> float | None:
    """What kernel shares are of: the timer's median of this build when known, else the
    profile; the profiled run when that was slower (a busy machine during profiling): a
    kernel never takes more than the run it is in."""
    profiled = times.profiled_ms if times is not None else None
    whole = measured_ms if measured_ms is not None else profiled
    if whole is not None and profiled is not None:
        whole = max(whole, profiled)
    return whole


@dataclass(frozen=True)
class _Ties:
    """What ties one graph's kernels to its Dynamo nodes, lines, ops and times."""

    aot: dict[str, str]  # the AOT graph texts by kind
    call_nodes: dict[str, Node]  # the Dynamo graph's call nodes by name
    by_line: dict[tuple[str, int], list[str]]  # (file, line) -> Dynamo nodes made on it
    times: KernelTimes | None
    whole: float | None  # what shares are of (ms)
    live: bool = False  # a live compile's (not read from a trace): torch's registered ops name kernels too

    def kernel(self, index: int, kind: str, unit: _Unit, post: dict[str, lt.GraphNode], key: str, line: int) -> Kernel:
        """The kernel called as ``key`` ("name:n") on ``line`` of unit ``index``'s code
        (``post``: its post-grad nodes by name)."""
        name, _ = lt.split_handle(key)
        kkind = lt.kernel_kind(name)
        post_nodes = unit.provenance.kernel_to_post.get(key, ())
        if post_nodes:
            nodes = _unique(p for pn in post_nodes for p in unit.provenance.post_to_pre.get(pn, ()))
            ops = _unique(_short_op(post[pn].target) for pn in post_nodes if pn in post and not lt.is_view(post[pn].target))
        else:
            nodes = _unique(n for where in unit.lines.get(key, ()) for n in self.by_line.get(where, ()))
            ops = ()
        if kkind in ("extern", "fallback"):
            ops = (lt.kernel_op(name),)
        elif not ops:
            ops = lt.name_ops(name, _vocabulary(self.aot, unit, live=self.live))
        lines = unit.lines.get(key, ()) or tuple(dict.fromkeys(
            (self.call_nodes[n].filename, self.call_nodes[n].lineno)
            for n in nodes if n in self.call_nodes and self.call_nodes[n].filename
        ))
        timed = self.times is not None
        ms = self.times.ms.get((index, key)) if self.times is not None else None
        share = ms / self.whole if ms is not None and self.whole else None
        return Kernel(
            name=name,
            kind=kkind,
            graph=kind,
            aten_ops=ops,
            nodes=nodes,
            source_lines=tuple((f, int(ln)) for f, ln in lines),
            time_ms=ms if ms is not None else (0.0 if timed else None),
            share=share if share is not None else (0.0 if timed else None),
            code_line=line,
        )


def _phases(steps: list[tuple[str, str, float]], source: str) -> tuple[tuple[str, float], ...]:
    """Seconds per phase of one compile's steps, in pipeline order. The user's compile
    (``source="trace"``) counts what PyTorch counts, the frame compile and the lazy backward
    compile (see :func:`user_phases`); dynscope's build counts all its steps."""
    if source == "trace":
        return user_phases(steps)
    return _ordered(lt.phases_of_steps(steps))


def _ordered(phases: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple((p, phases[p]) for p in (*lt.PHASE_ORDER, *FALLBACK_PHASES) if p in phases)


#: Phases of a compile PyTorch logged no steps for, from compilation_metrics alone.
FALLBACK_PHASES = ("inductor",)


def user_phases(steps: Sequence[tuple[str, str, float]]) -> tuple[tuple[str, float], ...]:
    """The user's compile of one frame by phase: only time inside PyTorch's own compile
    total (:data:`lowering_text.WAIT_STEPS`) counts, so the phases add up to it; all the
    steps when neither of those was logged (a partial trace)."""
    steps = list(steps)
    windowed = any(name in lt.WAIT_STEPS for name, _, _ in steps)
    return _ordered(lt.phases_of_steps(steps, within=lt.WAIT_STEPS if windowed else ()))


def compile_times(
    frames: Sequence[Frame], steps: Mapping[str, Sequence[tuple[str, str, float]]]
) -> tuple[tuple[Frame, ...], CompileTime]:
    """The frames with their compile time completed, and the report's total: one definition
    of the user's compile time.

    A frame's ``total_s`` is what PyTorch counts as the compile its user waits for: the frame
    compile (compilation_metrics' ``entire_frame_compile_time_s``) plus AOTAutograd's lazy
    backward compile at the first ``backward()`` (the ``entire_backward_compile`` step, logged
    under the frame's compile id; compilation_metrics leaves it out). ``phases`` split that
    total by PyTorch's compile steps (``chromium_event``), counted inside those two spans
    only, so they add up to it; a frame without logged steps is split by compilation_metrics
    (dynamo, backend, inductor). The report's total and phases are the frames' sums.

    Args:
        frames: the report's frames.
        steps: compile id -> its compile steps (``chromium_event`` records), in order.
    """
    out: list[Frame] = []
    for f in frames:
        t = f.compile_time
        own = list(steps.get(f.compile_id, ()))
        backward = lt.step_seconds(own, lt.BACKWARD_STEP)
        phases = user_phases(own) if any(name in lt.WAIT_STEPS for name, _, _ in own) else ()
        ahead = lt.step_seconds(own, lt.AOT_STEP) if not phases else 0.0
        if ahead:  # an ahead-of-time compile: no frame compile, all of it Inductor's
            t = replace(t, total_s=ahead, backend_s=ahead, inductor_s=ahead)
            found = lt.phases_of_steps(own, within=(lt.AOT_STEP,))
            # Time inside compile_fx_aot but in no step of a phase of its own (torch 2.15
            # logs gaps of tens of milliseconds) is the backend's other work.
            rest = ahead - sum(found.values())
            if rest > 0:
                found["backend"] = found.get("backend", 0.0) + rest
            phases = _ordered(found)
        if not phases:
            fallback = {"dynamo": t.dynamo_s, "backend": t.backend_s - t.inductor_s, "inductor": t.inductor_s}
            phases = _ordered({p: s for p, s in fallback.items() if s > 0})
        out.append(replace(f, compile_time=replace(t, total_s=t.total_s + backward, backward_s=backward, phases=phases)))
    sums: dict[str, float] = {}
    for f in out:
        for p, s in f.compile_time.phases:
            sums[p] = sums.get(p, 0.0) + s
    total = CompileTime(
        total_s=sum(f.compile_time.total_s for f in out),
        dynamo_s=sum(f.compile_time.dynamo_s for f in out),
        backend_s=sum(f.compile_time.backend_s for f in out),
        inductor_s=sum(f.compile_time.inductor_s for f in out),
        backward_s=sum(f.compile_time.backward_s for f in out),
        phases=_ordered(sums),
    )
    return tuple(out), total


def _unique(items: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))  # type: ignore[call-overload]


def _short_op(target: str) -> str:
    """"torch.ops.aten.addmm.default" -> "aten.addmm"."""
    parts = lt.short_target(target).split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else ".".join(parts)


def _mapped(unit: _Unit, call_nodes: dict[str, Node]) -> tuple[float, tuple[str, ...]]:
    """(share of compute nodes some kernel computes, the compute nodes none does).

    A Dynamo node computes when one of its post-grad nodes calls an op that is not a view;
    nodes are taken from the provenance itself, so graphs known only from the trace count.
    """
    prov = unit.provenance
    if prov.empty:
        return 0.0, ()
    post = unit.post_grad.by_name()
    in_kernels = {p for nodes in prov.kernel_to_post.values() for p in nodes}
    pre_to_post: dict[str, list[str]] = {}
    for p, pres in prov.post_to_pre.items():
        node = post.get(p)
        if node is None or node.op != "call_function" or lt.is_view(node.target):
            continue
        for pre in pres:
            pre_to_post.setdefault(pre, []).append(p)
    order = {name: i for i, name in enumerate(call_nodes)}
    compute = sorted(pre_to_post, key=lambda n: order.get(n, len(order)))
    if not compute:
        return 1.0, ()
    unmapped = tuple(n for n in compute if not any(p in in_kernels for p in pre_to_post[n]))
    return (len(compute) - len(unmapped)) / len(compute), unmapped


def _meta(t: lt.TensorText | None) -> TensorMeta:
    if t is None or t.kind == "other":
        return TensorMeta(kind="other")
    if t.kind == "symint":
        return TensorMeta(kind="symint")
    return TensorMeta(kind="tensor", shape=t.shape, dtype=t.dtype, device=t.device, stride=t.stride)


def _aot_graph(text: str, kind: str, parsed: lt.GraphText | None = None) -> AotGraph | None:
    if not text:
        return None
    parsed = parsed or lt.parse_graph_text(text)
    if not parsed.nodes:
        return None
    nodes: list[Node] = [
        Node(
            name=n.name,
            op=n.op,
            target=lt.short_target(n.target),
            args=n.args,
            outputs=(_meta(n.meta),) if n.meta is not None else (),
            filename=n.filename,
            lineno=n.lineno,
            source=n.source,
        )
        for n in parsed.nodes
    ]
    nodes.append(Node(name="output", op="output", target="output", args=parsed.outputs))
    calls = [n for n in parsed.nodes if n.op == "call_function"]
    counts = Counter(_short_op(n.target) for n in calls)
    return AotGraph(
        kind=kind,
        node_count=len(nodes),
        op_count=len(calls),
        op_counts=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        inputs=tuple(_meta(n.meta) for n in parsed.placeholders),
        input_names=tuple(n.name for n in parsed.placeholders),
        nodes=tuple(nodes),
        code=text,
    )


def _saved(backward: lt.GraphText) -> SavedTensors:
    """Tensors the backward reads that are neither gradients coming in (tangents) nor the
    graph's own inputs (primals, alive anyway): the activations the forward kept."""
    kept = [
        n
        for n in backward.placeholders
        if n.meta is not None and n.meta.kind == "tensor" and not n.name.startswith(("tangents_", "primals_"))
    ]
    return SavedTensors(
        count=len(kept),
        bytes=sum(n.meta.nbytes for n in kept if n.meta is not None),
        symbolic=sum(1 for n in kept if n.meta is not None and n.meta.symbolic),
        names=tuple(n.name for n in kept),
    )


@dataclass(frozen=True)
class CompileEvents:
    """The AOTAutograd and Inductor events of one compile, ready for profiling its kernels
    (:meth:`kernel_units`) and for :func:`build_lowering`.

    Attributes:
        events: the compile's trace events, in arrival order.
        missing: Inductor settings this torch lacks (said in the lowering's notes).
    """

    events: Sequence[TraceEvent]
    missing: Sequence[str] = ()

    def kernel_units(self) -> list[list[tuple[str, tuple[str, ...]]]]:
        """Per output code, its kernel calls as ("name:n", profiler names), in call order."""
        units = split_units(self.events).units
        return [
            [(key, lt.profiler_names(lt.split_handle(key)[0])) for key, _ in lt.kernel_calls(u.code)] for u in units
        ]

    def lowering(self, graph: Graph, *, notes: Sequence[str] = (), **kwargs: Any) -> Lowering | None:
        """The lowering of ``graph`` from these events (:func:`build_lowering`)."""
        said = [f"this torch has no Inductor setting {m}" for m in self.missing] + list(notes)
        return build_lowering(graph, self.events, notes=said, **kwargs)


#: The frame name of an ahead-of-time compile in a report (AOTInductor: torch.export, then
#: ``torch._inductor.aoti_compile_and_package``), which has no Python frame of its own.
AOT_COMPILE = "AOTInductor compile (ahead of time, from torch.export)"


def ahead_of_time_graph(gid: int, events: Sequence[TraceEvent] | LoweringFold) -> Graph | None:
    """The graph of an ahead-of-time compile, from the lowering events PyTorch logged for it
    without a compile id: the exported graph as AOTAutograd handed it to Inductor, the kernels
    AOTInductor's C++ wrapper calls (with the nodes and ATen ops it names), its compile steps;
    None when the events hold no such graph."""
    sp = _folded(events)
    # the graph AOTAutograd handed Inductor: the first forward or inference one logged
    kind = next((k for k in sp.aot if k != "backward"), None)
    if kind is None:
        return None
    aot = _aot_graph(sp.aot[kind], kind, sp.aot_parsed[kind])
    if aot is None:
        return None
    wrapper, kernel_code = sp.aot_wrapper, sp.aot_kernels
    vocabulary = _vocabulary({kind: sp.aot[kind]})  # read from a log: never torch's registry
    kernels = tuple(
        Kernel(name=k.name, kind=k.kind, graph=kind, aten_ops=k.aten_ops or lt.name_ops(k.name, vocabulary),
               nodes=k.nodes, code_line=k.line)
        for k in sp.aot_calls
    )
    steps = sp.steps
    mapped = {n for k in kernels for n in k.nodes}
    computing = [n.name for n in aot.nodes if n.op == "call_function" and not lt.is_view(n.target)]
    low = Lowering(
        mode="aot", source="trace", forward=aot, kernels=kernels, code=wrapper, backward_code=kernel_code,
        phases=_ordered(lt.phases_of_steps(steps, within=(lt.AOT_STEP,))),
        mapped_share=len(mapped & set(computing)) / len(computing) if computing else 0.0,
        notes=("an ahead-of-time compile (AOTInductor): no Dynamo frame, guards or breaks; the graph is "
               "torch.export's, as AOTAutograd handed it to Inductor; code is the C++ wrapper (and its "
               "kernels in backward_code)",),
    )
    return Graph(
        id=gid, compile_id="", frame=AOT_COMPILE, filename="", lineno=0, node_count=aot.node_count,
        op_count=aot.op_count, op_counts=aot.op_counts, inputs=aot.inputs, nodes=aot.nodes, code=aot.code,
        origin="trace", lowering=low,
    )
