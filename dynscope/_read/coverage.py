"""Compile coverage: the share of torch ops a call ran inside captured graphs.

The profiler side (what ran where) is in ``dynscope._torch.profiler``; here each eager op
is tied to the graph break or frame it ran at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from dynscope._format import location
from dynscope._model import Coverage, Graph, Report

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynscope._torch.profiler import OpCounts


#: An eager op's key (region, (file, line) marks, op) -> (where it is listed, its break's index or -1).
_Placed = dict[tuple[str, tuple[tuple[str, int], ...], str], tuple[str, int]]


def _placed(rep: Report, counts: OpCounts) -> _Placed:
    """Each eager op's key -> (where it is listed, the break it belongs to or -1).

    An eager op that ran while a compiled frame was running belongs to that frame's graph
    break (a frame ends at its break; the op ran between the graph and the resume function)
    when it ran at the break's line or in a call made there (a disabled function called at the
    break), or when no line was marked. Ran at another line, it is listed at the line that ran
    it: after a break Dynamo gave up on (a loop
    whose condition breaks), the rest of the frame runs eagerly inside the region of its first
    compile, each op at its own line. Ops of frames without a break are listed by their line
    (else by the frame), ops outside any compiled frame as "outside compiled frames".
    """
    report_id = {f.torch_compile_id: f.compile_id for f in rep.frames}
    frames = {f.compile_id: f for f in rep.frames}
    # A break on which Dynamo gave up on frames left those frames eager from top to bottom.
    gave_up = {e.compile_id for e in rep.break_events if e.gave_up}
    site_of: dict[str, int] = {}
    for i, b in enumerate(rep.breaks):
        for cid in b.compile_ids:
            site_of.setdefault(cid, i)
    out: _Placed = {}
    for key in counts.eager:
        region, lines, _ = key
        cid = report_id.get(region, "")
        own = location(*lines[0]) if lines else ""
        i = site_of.get(cid, -1)
        if i >= 0:
            b = rep.breaks[i]
            eager = list(dict.fromkeys(frames[c].function for c in b.compile_ids if c in gave_up and c in frames))
            if not lines or (b.filename, b.lineno) in lines:
                out[key] = (b.location + (f" ({', '.join(eager)} ran eagerly)" if eager else ""), i)
            else:
                out[key] = (f"{own} (eager after the break at {b.location})", -1)
        elif cid in frames:
            f = frames[cid]
            out[key] = (own or f"{location(f.filename, f.lineno)} {f.function}", -1)
        else:
            out[key] = (f"{own} (outside compiled frames)" if own else "outside compiled frames", -1)
    return out


def coverage_of(rep: Report, counts: OpCounts, placed: _Placed | None = None) -> Coverage:
    """Coverage with each eager op tied to where it ran (:func:`_placed`, computed when not
    given). A backward op arrives here with the frame and line its forward ran at (the
    profiler side links the two), so it is listed where its forward ran, not at the
    ``backward()`` call."""
    placed = placed if placed is not None else _placed(rep, counts)
    sites: Counter[str] = Counter()
    for key, n in counts.eager.items():
        sites[f"{placed[key][0]} {key[2]}"] += n
    ordered = tuple(sorted(sites.items(), key=lambda kv: (-kv[1], kv[0])))
    return Coverage(
        ops_in_graphs=counts.in_graphs, ops_eager=sum(sites.values()), eager_sites=ordered, ops_dynamo=counts.glue
    )


def with_coverage(rep: Report, counts: OpCounts) -> Report:
    """The report with its coverage, and each break site with the eager time spent at it per
    call (the eager ops :func:`_placed` ties to the site, by their CPU time)."""
    graphs = with_runs(rep, counts.regions)
    # A graph the program's own backend compiled (report() of a program that compiles its
    # parts) runs unmarked unless Inductor built it: its ops cannot be told from eager ones.
    unmarked = [g.id for g in graphs if g.origin == "trace" and g.lowering is None and g.op_count and g.runs]
    if unmarked:
        note = (f"coverage not measured: graph{'s' if len(unmarked) > 1 else ''} {', '.join(map(str, unmarked))} "
                "ran through a backend other than Inductor (eager, aot_eager), whose graph runs the profiler "
                "cannot tell from eager ops")
        return replace(rep, graphs=graphs, notes=(*rep.notes, note))
    placed = _placed(rep, counts)
    us = [0.0] * len(rep.breaks)
    for key, t in counts.eager_us.items():
        i = placed[key][1]
        if i >= 0:
            us[i] += t
    calls = max(rep.calls, 1)
    breaks = tuple(replace(b, eager_ms=t / 1000.0 / calls) for b, t in zip(rep.breaks, us, strict=True))
    return replace(rep, coverage=coverage_of(rep, counts, placed), breaks=breaks, graphs=graphs)


def with_runs(rep: Report, runs: Mapping[str, int]) -> tuple[Graph, ...]:
    """The graphs, each that dynscope's backend did not count (the program's own compiles)
    with the times its compiled code ran, ``runs`` by PyTorch's compile id (the profiler's
    compiled-region ranges, or capture()'s run counter), where its compile made that one graph."""
    raw = {f.compile_id: f.torch_compile_id for f in rep.frames}
    per_compile = Counter(g.compile_id for g in rep.graphs)
    return tuple(
        replace(g, runs=runs.get(raw.get(g.compile_id, ""), 0))
        if g.runs == 0 and g.origin == "trace" and per_compile[g.compile_id] == 1 else g
        for g in rep.graphs
    )
