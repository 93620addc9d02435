"""Compile coverage: the share of torch ops a call ran inside captured graphs.

The profiler side (what ran where) is in ``dynscope._torch.profiler``; here each eager op
is tied to the graph break or frame it ran at.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from dynscope._format import location
from dynscope._model import Coverage, Report

if TYPE_CHECKING:
    from dynscope._torch.profiler import OpCounts


def coverage_of(rep: Report, counts: OpCounts) -> Coverage:
    """Coverage with each eager op tied to where it ran.

    An eager op that ran while a compiled frame was running belongs to that frame's graph
    break (a frame ends at its break; the op ran between the graph and the resume
    function): it is listed at the break's ``file:line``. Ops of frames Dynamo gave up on,
    or of code outside any compiled frame, are listed by that frame or as "outside
    compiled frames". A backward op arrives here with the frame its forward ran in (the
    profiler side links the two), so it is listed at the break that left its forward
    outside a graph, not at the ``backward()`` call.
    """
    report_id = {f.torch_compile_id: f.compile_id for f in rep.frames}
    frames = {f.compile_id: f for f in rep.frames}
    # A break on which Dynamo gave up on frames left those frames eager from top to bottom:
    # the ops tied to the break ran all over them, not at its line, and the label says so.
    gave_up = {e.compile_id for e in rep.break_events if e.gave_up}
    site_of: dict[str, str] = {}
    for b in rep.breaks:
        eager = list(dict.fromkeys(frames[c].function for c in b.compile_ids if c in gave_up and c in frames))
        label = b.location + (f" ({', '.join(eager)} ran eagerly)" if eager else "")
        for cid in b.compile_ids:
            site_of.setdefault(cid, label)
    sites: Counter[str] = Counter()
    for (region, op), n in counts.eager.items():
        cid = report_id.get(region, "")
        if cid in site_of:
            where = site_of[cid]
        elif cid in frames:
            f = frames[cid]
            where = f"{location(f.filename, f.lineno)} {f.function}"
        else:
            where = "outside compiled frames"
        sites[f"{where} {op}"] += n
    ordered = tuple(sorted(sites.items(), key=lambda kv: (-kv[1], kv[0])))
    return Coverage(
        ops_in_graphs=counts.in_graphs, ops_eager=sum(sites.values()), eager_sites=ordered, ops_dynamo=counts.glue
    )


def with_coverage(rep: Report, counts: OpCounts) -> Report:
    """The report with its coverage, and each break site with the eager time spent at it per
    call (the eager ops :func:`coverage_of` lists at the site, by their CPU time)."""
    report_id = {f.torch_compile_id: f.compile_id for f in rep.frames}
    site_of: dict[str, int] = {}
    for i, b in enumerate(rep.breaks):
        for cid in b.compile_ids:
            site_of.setdefault(cid, i)
    us = [0.0] * len(rep.breaks)
    for (region, _), t in counts.eager_us.items():
        i = site_of.get(report_id.get(region, ""), -1)
        if i >= 0:
            us[i] += t
    calls = max(rep.calls, 1)
    breaks = tuple(replace(b, eager_ms=t / 1000.0 / calls) for b, t in zip(rep.breaks, us, strict=True))
    return replace(rep, coverage=coverage_of(rep, counts), breaks=breaks)
