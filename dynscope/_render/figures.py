"""The figures the report's sections are built from, computed once: which graphs a memory
table lists first, compile seconds per phase, cache lookups per cache, the sizes a compile
fixed, whether graphs ran more often than the program. Pure data logic about the report:
no words (those are dynscope._render.words') and no layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dynscope._model import Graph, Report, SizeFix

__all__ = ["CACHE_ORDER", "PHASE_ORDER", "cache_counts", "memory_order", "phase_seconds", "runs_shown", "sizes_of"]

#: Compile phases (Lowering.phases keys) in pipeline order.
PHASE_ORDER = ("dynamo", "backend", "aot_autograd", "inductor", "lowering", "codegen", "compile")

#: The caches (the first of a Lowering.cache lookup's fields), in the order shown.
CACHE_ORDER = ("fx_graph", "aot_autograd")


def memory_order(rep: Report) -> list[Graph]:
    """The measured graphs, those compile grew most first (then by id); graphs whose
    measurement failed last."""
    measured = [g for g in rep.graphs if g.memory is not None]
    return sorted(measured, key=lambda g: (g.memory.error != "" if g.memory else True, -(g.memory.growth if g.memory else 0), g.id))


def phase_seconds(graphs: list[Graph] | tuple[Graph, ...], *, source: str | None = None) -> list[tuple[str, float]]:
    """Compile seconds per phase summed over the graphs' lowerings (only those of ``source``,
    "trace" or "timing", when given), in pipeline order (phases no graph reports are left
    out; unknown ones come last, in the order met)."""
    total: dict[str, float] = {}
    for g in graphs:
        if g.lowering is not None and source in (None, g.lowering.source):
            for phase, s in g.lowering.phases:
                # Reports saved before dynscope kept compile times apart added the capture's
                # Dynamo seconds to a timed build's phases; dynscope's build runs no Dynamo.
                if not (phase == "dynamo" and g.lowering.source == "timing"):
                    total[phase] = total.get(phase, 0.0) + s
    known = [p for p in PHASE_ORDER if p in total]
    return [(p, total[p]) for p in known + [p for p in total if p not in PHASE_ORDER]]


def cache_counts(graphs: list[Graph] | tuple[Graph, ...]) -> list[tuple[str, dict[str, int]]]:
    """Per cache ("fx_graph"), how many lookups hit, missed or were bypassed; the known caches
    first, in CACHE_ORDER, then the others as met."""
    counts: dict[str, dict[str, int]] = {}
    for g in graphs:
        if g.lowering is not None:
            for cache, _graph, result in g.lowering.cache:
                per = counts.setdefault(cache, {})
                per[result] = per.get(result, 0) + 1
    return sorted(counts.items(), key=lambda kv: CACHE_ORDER.index(kv[0]) if kv[0] in CACHE_ORDER else len(CACHE_ORDER))


def sizes_of(rep: Report, compile_ids: Iterable[str]) -> list[SizeFix]:
    """The sizes the given compiles (and the entries their recompiles failed on) fixed or
    guarded, fixes first, once each."""
    ids = set(compile_ids)
    for r in rep.recompiles:
        if r.compile_id in ids:
            ids.update(f.entry for f in r.failures)
    fixes = [fx for fr in rep.frames if fr.compile_id in ids for fx in fr.shapes]
    return sorted(dict.fromkeys(fixes), key=lambda fx: (fx.kind != "fixed", fx.compile_id))


def runs_shown(rep: Report) -> bool:
    """Whether the graph tables show how often each graph ran: whenever runs were counted,
    unless every graph ran exactly once per call (the column would say nothing). Hot graphs
    (one serving every block of a per-block compile) and cold ones then stand apart."""
    if not any(g.runs > 0 for g in rep.graphs):
        return False
    return not (rep.calls > 0 and all(g.runs == rep.calls for g in rep.graphs))
